"""The recipes' techniques were applied, not only configured: real tiny cpu cells, each in its
own worker, checked against the baseline of the same model and shape (as
tests/test_techniques_runs.py does for the core catalogue). Every assertion reads a fact
the worker observed (record ``details``, bench/worker/proofs.py) or a measured byte count,
and fails with the technique off (the baseline, or the technique's base cell, is that cell).
"""

import pytest

from bench.cells import matrix
from tests.helpers import d, ok, run_cells

pytestmark = pytest.mark.slow

TECHNIQUES = ["baseline", "chunked-ce+bf16", "liger-ce", "act-offload", "gc", "gc+act-offload", "opt-in-bwd",
              "adamw-fused", "compile", "compile+chunked-ce", "lora", "lora+dora", "lora+lora-all", "qlora", "qlora-fp32", "bf16"]
BATCH, SEQ, VOCAB, LAYERS = 2, 64, 32000, 4  # tiny-llama
WEIGHT_TENSORS = 9 * LAYERS + 3


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    from tests.helpers import write_matrix
    folder = tmp_path_factory.mktemp("recipes")
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": TECHNIQUES,
             "batch_size": BATCH, "seq_len": SEQ}
    specs = list(matrix.load(write_matrix(folder, {"r": study})).values())
    return run_cells(specs, folder)


def test_chunked_ce_never_keeps_the_full_fp32_logits(recs):
    assert d(recs, "bf16")["loss"] == "full" and d(recs, "chunked-ce+bf16")["loss"] == "chunked"
    tokens_x_vocab = BATCH * SEQ * VOCAB
    # under bf16 the full loss keeps the fp32 log-softmax (4 B per logit); the chunked one the
    # bf16 logits (2 B) and a logsumexp per row
    fell = d(recs, "bf16")["activation_bytes_after_forward"] - d(recs, "chunked-ce+bf16")["activation_bytes_after_forward"]
    assert fell > 0.9 * 2 * tokens_x_vocab
    # (in backward the fp32 gradient of the logits exists one chunk at a time, but the LM head's
    # weight gradient is accumulated over the chunks, one vocab x hidden buffer more: at this tiny
    # shape, 128 tokens against a hidden size of 256, that costs more than it saves, as it would on
    # a GPU; the 3B torchtune rows show the saving at 8192 tokens)


def test_liger_ce_is_a_skipped_record_off_cuda(recs):
    rec = recs["liger-ce"]
    assert rec["status"] == "skipped" and "CUDA" in rec["reason"]


def test_activation_offload_moves_saved_tensors_to_the_host(recs):
    off, base = d(recs, "act-offload"), d(recs, "baseline")
    assert off["activation_offload_bytes"] > 0 and "activation_offload_bytes" not in base
    # most of what moved left the device (a few moved tensors stay referenced, e.g. the final hidden
    # state the LM head saves); the LM head and loss (the fp32 log-softmax) stay, as in torchtune
    moved = off["activation_offload_bytes"]
    assert moved > 0.3 * base["activation_bytes_after_forward"]
    assert base["activation_bytes_after_forward"] - off["activation_bytes_after_forward"] > 0.5 * moved
    # with checkpointing only the checkpoints (layer inputs) are saved, so less moves
    gc_off = d(recs, "gc+act-offload")
    assert 0 < gc_off["activation_offload_bytes"] < off["activation_offload_bytes"]
    assert gc_off["activation_bytes_after_forward"] < d(recs, "gc")["activation_bytes_after_forward"]


def test_optimizer_in_backward_never_holds_the_gradients(recs):
    inb, base = ok(recs, "opt-in-bwd"), ok(recs, "baseline")
    steps = inb["steps"] + inb["warmup_steps"]
    assert inb["details"]["optimizer_in_backward_steps"] == WEIGHT_TENSORS * steps
    assert inb["details"]["optimizer_class"] == "AdamW"
    assert base["breakdown_bytes"]["gradients"] > 0 and inb["breakdown_bytes"]["gradients"] == 0
    assert inb["peak_bytes"] < base["peak_bytes"]
    assert inb["details"]["optimizer_state_bytes"] == base["details"]["optimizer_state_bytes"]


def test_fused_adamw_has_no_multi_tensor_temporaries(recs):
    fused, base = ok(recs, "adamw-fused"), ok(recs, "baseline")
    assert fused["details"]["optimizer_state_bytes"] == base["details"]["optimizer_state_bytes"]
    assert fused["phase_peak_bytes"]["optimizer"] < base["phase_peak_bytes"]["optimizer"]


def test_compile_compiles_the_chunked_loss_as_torchtune_does(recs):
    """torchtune's compile_loss compiles its chunked loss's CE in place; a plain loss stays eager."""
    both, chunked = d(recs, "compile+chunked-ce"), d(recs, "chunked-ce+bf16")
    assert both["loss"] == "chunked" and both["loss_compiled"] is True
    assert "loss_compiled" not in chunked and "loss_compiled" not in d(recs, "compile")
    assert both["compiled_graphs"] > d(recs, "compile")["compiled_graphs"]


def test_compile_runs_inductor_graphs_that_the_tracker_sees(recs):
    comp, base = d(recs, "compile"), d(recs, "baseline")
    assert comp["compiled_layers"] == LAYERS and comp["compiled_graphs"] >= 1
    assert "compiled_layers" not in base
    # the compiled layers save a different set of tensors for backward, and it is counted
    assert 0 < comp["activation_bytes_after_forward"] != base["activation_bytes_after_forward"]


def test_dora_and_all_linear_lora_change_the_adapters(recs):
    lora, dora, every = d(recs, "lora"), d(recs, "lora+dora"), d(recs, "lora+lora-all")
    assert "dora_modules" not in lora and dora["dora_modules"] == dora["lora_modules"] == lora["lora_modules"]
    assert every["lora_modules"] == 7 * LAYERS > lora["lora_modules"]
    assert every["activation_bytes_after_forward"] > lora["activation_bytes_after_forward"]
    assert dora["optimizer_state_bytes"] > lora["optimizer_state_bytes"]  # the magnitude vectors train too


def test_qlora_keeps_its_other_weights_bf16_and_qlora_fp32_upcasts_them(recs):
    q, q32 = d(recs, "qlora"), d(recs, "qlora-fp32")
    assert q["dtypes"]["quantized_weights"] == q32["dtypes"]["quantized_weights"] == ["nf4 in uint8"]
    assert "bfloat16" in q["dtypes"]["weights"] and "bfloat16" not in q32["dtypes"]["weights"]
    assert ok(recs, "qlora")["breakdown_bytes"]["parameters"] < ok(recs, "qlora-fp32")["breakdown_bytes"]["parameters"]


def test_every_record_names_each_parameter_groups_dtype(recs):
    base, bf16 = d(recs, "baseline")["dtypes"], d(recs, "bf16")["dtypes"]
    assert base == {"weights": ["float32"], "quantized_weights": [], "trainable_weights": ["float32"],
                    "gradients": ["float32"], "optimizer_state": ["float32"], "master_weights": []}
    assert bf16["weights"] == bf16["gradients"] == bf16["optimizer_state"] == ["bfloat16"]
    assert d(recs, "opt-in-bwd")["dtypes"]["gradients"] == ["float32"]  # seen inside backward
