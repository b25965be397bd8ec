"""Each technique was applied, not only configured: real tiny cells, each in its own worker,
checked against the baseline of the same model and shape. Every assertion reads a fact the
worker observed (record ``details``, bench/worker/proofs.py) or a measured byte count, and would
fail with the technique switched off (the baseline is that cell).

All cells run once per session, two workers at a time (2 cores), in a module fixture.
"""

import pytest

from bench.runner import launch
from bench.cells import matrix
from tests.helpers import d, ok, run_cells

pytestmark = pytest.mark.slow

TECHNIQUES = ["baseline", "fp32+adamw+sdpa", "amp-fp16", "amp-bf16", "bf16", "gc", "ga2", "s64",
              "adamw8bit", "lora+keep-output", "lion8bit", "adafactor", "sgd", "lora", "qlora", "eager", "fa2",
              "zero3", "zero2-offload", "zero3-offload", "fsdp", "padding", "packing",
              "expandable-segments", "ckpt-load", "low-cpu-mem-usage"]
# the step-wise climb of padded batches needs activations to dominate: LoRA, several steps
BATCHING = ["lora+padding", "lora+packing"]
LAYERS = 4  # tiny-llama
PARAMS = 9 * LAYERS + 3  # weight tensors: 7 linear + 2 norms per block; embedding, final norm, head


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    from tests.helpers import write_matrix
    folder = tmp_path_factory.mktemp("techniques")
    base = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"]}
    path = write_matrix(folder, {
        "t": {**base, "techniques": TECHNIQUES, "batch_size": 2},
        "climb": {**base, "techniques": BATCHING, "batch_size": 2, "seq_len": 64, "steps": 5,
                  "exclude": [{"techniques": "baseline"}]},
    })
    cells = matrix.load(path)
    specs = [s for s in cells.values()]
    return run_cells(specs, folder)


def bd(recs, name):
    return ok(recs, name)["breakdown_bytes"]


def test_the_baseline_is_fp32_adamw_sdpa_spelled_out(recs):
    base, spelled = ok(recs, "baseline"), ok(recs, "fp32+adamw+sdpa")
    assert spelled["breakdown_bytes"] == base["breakdown_bytes"]
    assert d(recs, "baseline")["attn_implementation"] == "sdpa"
    assert d(recs, "baseline")["optimizer_class"] == "AdamW"


def test_autocast_computes_in_16_bit_over_fp32_weights(recs):
    assert d(recs, "baseline")["compute_dtype"] == "float32"
    for name, dtype in (("amp-bf16", "bfloat16"), ("amp-fp16", "float16")):
        assert d(recs, name)["compute_dtype"] == dtype
        assert d(recs, name)["param_dtypes"] == ["float32"]
    assert d(recs, "amp-fp16")["grad_scaler_scale"] > 1  # the fp16 loss scale is in use
    assert "grad_scaler_scale" not in d(recs, "amp-bf16")


def test_pure_bf16_halves_weights_gradients_and_optimizer_state(recs):
    assert d(recs, "bf16")["param_dtypes"] == ["bfloat16"]
    assert d(recs, "bf16")["optimizer_state_dtypes"] == ["bfloat16"]
    assert d(recs, "bf16")["optimizer_state_bytes"] < 0.51 * d(recs, "baseline")["optimizer_state_bytes"]
    assert bd(recs, "bf16")["parameters"] < 0.51 * bd(recs, "baseline")["parameters"]


def test_checkpointing_keeps_fewer_activations_for_backward(recs):
    assert d(recs, "gc")["gradient_checkpointing"] and not d(recs, "baseline")["gradient_checkpointing"]
    assert d(recs, "gc")["activation_bytes_after_forward"] < 0.8 * d(recs, "baseline")["activation_bytes_after_forward"]


def test_a_loop_that_keeps_its_output_holds_the_logits_through_the_optimizer_step(recs):
    """keep-output: out = model(...); out.loss.backward(); optimizer.step(): the fp32 logits (batch x sequence x
    vocabulary) stay alive until the step ends; the Trainer-like default lets them go after the loss."""
    rec = ok(recs, "lora+keep-output")
    logits = rec["batch_size"] * rec["seq_len"] * 32000 * 4  # tiny-llama's vocabulary, fp32
    kept, plain = rec["phase_peak_bytes"]["optimizer"], ok(recs, "lora")["phase_peak_bytes"]["optimizer"]
    assert kept - plain == pytest.approx(logits, abs=4096)  # the logits, and the loss scalar beside them
    assert rec["peak_bytes"] > ok(recs, "lora")["peak_bytes"]


def test_accumulation_runs_half_batches_with_fewer_activations(recs):
    assert d(recs, "ga2")["micro_batches"] == 2
    assert d(recs, "ga2")["activation_bytes_after_forward"] < 0.6 * d(recs, "baseline")["activation_bytes_after_forward"]
    assert ok(recs, "ga2")["batch_size"] == ok(recs, "baseline")["batch_size"]  # same effective batch


def test_shape_overrides_change_what_a_step_holds(recs):
    base = d(recs, "baseline")
    assert ok(recs, "s64")["seq_len"] == 64 and d(recs, "s64")["batch_widths"] == [64, 64]
    assert d(recs, "s64")["activation_bytes_after_forward"] > 1.8 * base["activation_bytes_after_forward"]


@pytest.mark.parametrize("name, states", [("adamw8bit", 2), ("lion8bit", 1)])
def test_8bit_optimizers_keep_uint8_states(recs, name, states):
    n = ok(recs, name)["params_total"]
    assert "uint8" in d(recs, name)["optimizer_state_dtypes"]
    assert "uint8" not in d(recs, "baseline")["optimizer_state_dtypes"]
    # one byte per element and state, plus per-block scales (and 4-byte states for tiny tensors)
    assert states * n <= d(recs, name)["optimizer_state_bytes"] < states * n * 1.1


def test_adafactor_and_sgd_keep_less_optimizer_state(recs):
    n = ok(recs, "baseline")["params_total"]
    assert d(recs, "baseline")["optimizer_state_bytes"] >= 8 * n      # AdamW: two fp32 moments
    assert d(recs, "sgd")["optimizer_state_bytes"] == 4 * n           # one momentum buffer
    assert d(recs, "adafactor")["optimizer_state_bytes"] < 0.05 * n   # factored: rows + columns


def test_lora_trains_a_small_fraction_through_adapters(recs):
    rec = ok(recs, "lora")
    assert rec["params_trainable"] / rec["params_total"] < 0.01 and d(recs, "baseline")["trainable_fraction"] == 1
    assert d(recs, "lora")["lora_modules"] == 4 * LAYERS  # q, k, v and o projections: catalogue.LORA_DEFAULTS
    assert bd(recs, "lora")["optimizer"] < 0.01 * bd(recs, "baseline")["optimizer"]


def test_qlora_holds_base_weights_in_4_bit(recs):
    q = d(recs, "qlora")["quantized_weights"]
    assert q["quant_type"] == "nf4" and q["double_quant"] and q["storage_dtype"] == "uint8"
    assert q["count"] == 7 * LAYERS                                     # every linear layer of the blocks
    assert q["bytes"] * 2 == q["numel_unquantized"]                    # two weights a byte
    assert q["compute_dtype"] == "bfloat16"
    assert d(recs, "qlora")["optimizer_class"] == "PagedAdamW8bit"
    assert "quantized_weights" not in d(recs, "lora")
    assert bd(recs, "qlora")["parameters"] < bd(recs, "lora")["parameters"]


def test_eager_attention_keeps_the_score_matrix(recs):
    assert d(recs, "eager")["attn_implementation"] == "eager"
    assert d(recs, "eager")["activation_bytes_after_forward"] > d(recs, "baseline")["activation_bytes_after_forward"]


def test_zero3_leaves_only_partitions_in_the_module(recs):
    z = d(recs, "zero3")["zero"]
    assert z["zero_stage"] == 3 and z["partitioned_params"] == PARAMS
    assert z["params_full_numel"] == ok(recs, "baseline")["params_total"]
    assert z["params_materialized_numel"] < 0.01 * z["params_full_numel"]  # empty placeholders between uses
    assert "zero" not in d(recs, "baseline")


def test_offload_moves_optimizer_state_and_parameters_to_the_host(recs):
    n = ok(recs, "baseline")["params_total"]
    for name in ("zero2-offload", "zero3-offload"):
        assert bd(recs, name)["optimizer"] == 0 < bd(recs, "zero3")["optimizer"]
        assert d(recs, name)["offloaded_bytes"]["optimizer"] >= 12 * n   # AdamW moments + fp32 master
    assert d(recs, "zero3-offload")["offloaded_bytes"]["parameters"] >= 4 * n
    assert bd(recs, "zero3-offload")["parameters"] < bd(recs, "zero3")["parameters"]  # gathered layers only
    assert "offloaded_bytes" not in d(recs, "zero3")


def test_fsdp_shards_every_parameter(recs):
    assert d(recs, "fsdp")["fsdp_sharded_params"] == PARAMS
    assert "fsdp_sharded_params" not in d(recs, "baseline")


def test_packing_leaves_no_pads_and_padding_climbs_with_the_longest_batch(recs):
    assert d(recs, "packing")["pad_tokens"] == 0 and d(recs, "padding")["pad_tokens"] > 0
    padded, packed = ok(recs, "lora+padding"), ok(recs, "lora+packing")
    widths, peaks = padded["details"]["batch_widths"], padded["step_peak_bytes"]
    assert len(set(widths)) > 1
    # a wider batch never needs less: the step peaks sort like the widths
    order = sorted(range(len(widths)), key=lambda i: (widths[i], peaks[i]))
    assert [peaks[i] for i in order] == sorted(peaks)
    assert max(peaks) > min(peaks)
    assert len(set(packed["step_peak_bytes"][1:])) == 1 and packed["details"]["pad_tokens"] == 0


def test_cuda_only_techniques_are_reasoned_skips_on_cpu(recs):
    assert recs["fa2"]["status"] == "skipped" and "CUDA" in recs["fa2"]["reason"]


def test_expandable_segments_on_cpu_change_the_modelled_reserved_memory_only(recs):
    es, base = ok(recs, "expandable-segments"), ok(recs, "baseline")
    assert es["peak_bytes"] == base["peak_bytes"]  # live bytes: the same step
    assert es["allocator_model"]["alloc_conf"] == "expandable_segments:True"
    assert es["modelled_reserved_peak_bytes"] != base["modelled_reserved_peak_bytes"]
    for rec in (es, base):
        assert rec["modelled_reserved_peak_bytes"] >= rec["allocator_model"]["allocated_peak_bytes"]


def test_loading_from_a_local_checkpoint(recs):
    assert d(recs, "baseline")["loaded_from"] == "random-init"
    for name in ("ckpt-load", "low-cpu-mem-usage"):
        assert d(recs, name)["loaded_from"] == "checkpoint" and "checkpoints" in d(recs, name)["name_or_path"]
        assert ok(recs, name)["load_host_peak_rss_bytes"] > 0
    assert d(recs, "low-cpu-mem-usage")["low_cpu_mem_usage_passed"]
    assert bd(recs, "ckpt-load") == bd(recs, "baseline")  # same weights, same training memory


def test_transformers_5_ignores_low_cpu_mem_usage(recs):
    """What the flag does in the installed transformers, measured: 5.x accepts and drops it,
    so loading with it holds the same host memory as without (4.x would differ)."""
    rec = ok(recs, "low-cpu-mem-usage")
    if int(rec["versions"]["transformers"].split(".")[0]) < 5:
        pytest.skip("transformers 4.x honours low_cpu_mem_usage")
    with_flag, without = rec["load_host_peak_rss_bytes"], ok(recs, "ckpt-load")["load_host_peak_rss_bytes"]
    assert abs(with_flag - without) < 0.05 * without


@pytest.mark.cuda
def test_expandable_segments_reach_the_cuda_allocator(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from tests.helpers import write_matrix
    path = write_matrix(tmp_path, {"g": {"mode": "cuda", "models": ["tiny-llama"], "gpus": ["h100-80gb"],
                                         "techniques": ["expandable-segments"]}})
    out = {"+".join(s["techniques"]): launch.run_cell(s, tmp_path / f"{s['cell']}.log")
           for s in matrix.load(path).values()}
    assert d(out, "expandable-segments")["cuda_alloc_conf"] == "expandable_segments:True"
    assert d(out, "expandable-segments")["cuda_expandable_segments"]
    assert not d(out, "baseline")["cuda_expandable_segments"]
    assert ok(out, "expandable-segments")["reserved_peak_bytes"] >= ok(out, "expandable-segments")["peak_bytes"]
