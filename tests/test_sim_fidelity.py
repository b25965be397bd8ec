"""Sim mode counts what a real run counts: the same tiny model and techniques, run for real on
the CPU and simulated under fake tensors with the CUDA modelling off, give identical byte
counts (peak, breakdown, phase peaks, per-step peaks). With the CUDA modelling on, every
storage is counted in the caching allocator's 512-byte blocks."""
import pytest

# Imported before any run: their module-level constants (peft's, bitsandbytes' NF4 tables)
# would otherwise be created, and counted, inside whichever run imports them first.
import bitsandbytes  # noqa: F401
import peft  # noqa: F401
from bench.cells import matrix
from bench.worker import models, train
from bench.worker.sim import measure
from bench.worker.memtrack import MemTracker

pytestmark = pytest.mark.slow
TECHNIQUES = ["baseline", "amp-bf16", "gc", "lora+gc+bf16", "adamw8bit", "qlora", "ga2",
              # the recipes' techniques (liger-ce has no cpu run to compare: its Triton kernel is CUDA only;
              # compile runs inductor's kernels on cpu and its graphs op by op in sim, so a buffer
              # inductor reuses inside a graph differs by a few KiB: tests/test_sim_fusion.py)
              "chunked-ce+bf16", "gc+act-offload", "opt-in-bwd", "adamw-fused", "lora+dora", "lora+lora-all",
              "qlora-fp32", "shift-ce+bf16"]
KEYS = ("peak_bytes", "breakdown_bytes", "phase_peak_bytes", "step_peak_bytes", "params_total", "params_trainable")


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    from tests.helpers import write_matrix
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": [*TECHNIQUES, "bf16"],
             "batch_size": 2, "seq_len": 32}
    return matrix.load(write_matrix(tmp_path_factory.mktemp("fidelity"), {"s": study}))


@pytest.fixture(scope="module")
def bnb_warm(cells):
    """The first 4-bit load in a process creates bitsandbytes' cached constants (1 KiB) that
    later loads reuse; make that happen before the runs compared."""
    spec = cells["tiny-llama__cpu__qlora"]
    models.load_qlora_base(spec, models.load_config(spec["model_config"], "sdpa"), "cpu")


@pytest.mark.parametrize("technique", TECHNIQUES)
def test_sim_counts_what_a_real_cpu_run_counts(cells, bnb_warm, technique):
    spec = cells[f"tiny-llama__cpu__{technique}"]
    real = train.train(spec, "cpu", MemTracker())
    sim, _, _ = measure.simulate_step(spec, cuda_model=False)
    assert {k: sim[k] for k in KEYS} == {k: real[k] for k in KEYS}
    assert sim["details"]["param_dtypes"] == real["details"]["param_dtypes"]
    assert sim["details"]["optimizer_state_dtypes"] == real["details"]["optimizer_state_dtypes"]
    assert sim["details"]["dtypes"] == real["details"]["dtypes"]


def test_cuda_rounding_counts_whole_blocks(cells):
    spec = cells["tiny-llama__cpu__baseline"]
    exact, _, _ = measure.simulate_step(spec, cuda_model=False)
    cuda, tracker, _ = measure.simulate_step(spec, cuda_model=True)
    assert all(nbytes % 512 == 0 for _, nbytes, _ in tracker.live.values())
    assert all(v % 512 == 0 for v in cuda["breakdown_bytes"].values())
    assert cuda["peak_bytes"] >= exact["peak_bytes"]
    # the weights are large tensors and a few small ones (norms): rounding adds < 512 B each
    n_params = len(list(tracker.known["parameters"]))
    assert 0 <= cuda["breakdown_bytes"]["parameters"] - exact["breakdown_bytes"]["parameters"] < 512 * n_params


def test_sim_loads_qlora_as_transformers_does(cells, bnb_warm):
    """The load phase: sim's QLoRA base arrives one tensor at a time and each 4-bit weight is
    quantized on arrival (bench/worker/sim/fakestep.py ``qlora_base``), as transformers'
    from_pretrained + bitsandbytes load the real checkpoint on the cpu. With fp32 non-quantized
    weights the checkpoint's dtype is the load's, so the build peak is the same to the byte;
    building the whole 16-bit model first and quantizing it after (the old sim build) held every
    16-bit weight at once (78,693,824 B against the real 67,690,496 B here). In the bf16 variant
    the real cpu load also holds the fp32 checkpoint's host copies while it casts them, which a
    GPU load keeps in host memory, so only the fp32 variant is compared byte for byte."""
    spec = cells["tiny-llama__cpu__qlora-fp32"]
    real = train.train(spec, "cpu", MemTracker())
    sim, _, _ = measure.simulate_step(spec, cuda_model=False)
    assert sim["details"]["build_peak_bytes"] == real["details"]["build_peak_bytes"]
    bf16, _, _ = measure.simulate_step(cells["tiny-llama__cpu__qlora"], cuda_model=False)
    weights = bf16["breakdown_bytes"]["parameters"]
    assert bf16["details"]["build_peak_bytes"] < 1.1 * weights  # never the 16-bit model on the device


def test_shift_ce_holds_transformers_4_48s_shifted_fp32_copy_at_the_loss(cells):
    """transformers 4.46-4.48's loss (shift-ce) against today's (PR #35646 padded the labels instead):
    at the loss, the fp32 logits (N = batch x seq x vocab), the shifted copy and log_softmax's output
    (N' = batch x (seq - 1) x vocab each), where today's holds the fp32 logits and log_softmax's output
    over all N: 8N' - 4N more bytes, 4 x batch x vocab x (seq - 2). The value of the loss is the same."""
    import torch
    from transformers.loss.loss_utils import ForCausalLMLoss

    from bench.worker import losses
    today = train.train(cells["tiny-llama__cpu__bf16"], "cpu", MemTracker())
    shift = train.train(cells["tiny-llama__cpu__shift-ce+bf16"], "cpu", MemTracker())
    spec = cells["tiny-llama__cpu__bf16"]
    vocab = 32000
    more = 4 * spec["batch_size"] * vocab * (spec["seq_len"] - 2)
    # within the labels' few hundred bytes (today's padded labels are one token longer than the shifted ones)
    assert abs(shift["phase_peak_bytes"]["forward"] - today["phase_peak_bytes"]["forward"] - more) < 1024
    logits, labels = torch.randn(2, 9, 50, dtype=torch.bfloat16), torch.randint(0, 50, (2, 9))
    labels[0, 3] = -100
    for n in (None, torch.tensor(11)):
        assert torch.allclose(losses.shift_loss(logits, labels, 50, n), ForCausalLMLoss(logits, labels, 50, n))
