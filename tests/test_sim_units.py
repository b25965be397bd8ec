"""Sim mode's small parts, each against what it models: the CUDA allocator's rounding, the
verdict rule, the ZeRO paper's per-GPU arithmetic, and the CUDA attention routing."""
import pytest

from bench.worker import cuda_alloc
from bench.worker.sim import sharding
from bench.estimate import verdicts

MiB, GiB = 2**20, 2**30


@pytest.mark.parametrize("asked, counted", [(0, 0), (1, 512), (511, 512), (512, 512), (513, 1024),
                                            (4 * MiB + 1, 4 * MiB + 512)])
def test_round_size_is_the_caching_allocators(asked, counted):
    # c10/cuda/CUDACachingAllocator.cpp round_size: max(512, 512 * ceil(size / 512)); 0 never allocates
    assert cuda_alloc.round_size(asked) == counted


def test_the_tracker_and_the_replay_round_by_one_rule():
    # one copy: the worker's tracker rounds with the replay's rule, not a twin of it
    from bench.estimate import allocator, pools
    assert cuda_alloc.round_size is pools.round_size is allocator.round_size


def test_verdicts_come_from_the_modelled_reserved_memory_under_the_reserve():
    card = 24 * GiB
    assert verdicts.RESERVE_BYTES == 840 * MiB and "840 MiB" in verdicts.RULE
    # the reserve outside the allocator and cuBLAS's two workspaces (an unnamed arch: torch's non-sm90 default)
    reserve = verdicts.RESERVE_BYTES + 2 * (8 * MiB + 128 * 1024)
    prof = {"g": {"memory_bytes": card}}
    fits = {"reserved_peak_bytes": card - reserve, "first_oom": {"g": None}}
    assert verdicts.from_replay(fits, prof) == {"g": "fits"}
    flushed = {"reserved_peak_bytes": card - reserve + 1, "first_oom": {"g": None}}  # fits after a cache flush
    assert verdicts.from_replay(flushed, prof) == {"g": "tight"}
    failed = {"reserved_peak_bytes": card, "first_oom": {"g": {"event": 7}}}
    assert verdicts.from_replay(failed, prof) == {"g": "oom"}
    assert verdicts.from_estimate(card - reserve, 0, prof) == {"g": "fits"}
    assert verdicts.from_estimate(card, card - reserve, prof) == {"g": "tight"}
    assert verdicts.from_estimate(card, card - reserve + 1, prof) == {"g": "oom"}


def test_verdicts_cover_every_profile_and_note_gpus_without_bf16():
    profiles = {"big": {"memory_bytes": 80 * GiB, "bf16_tflops": 989.4},
                "t4": {"memory_bytes": 15 * GiB, "bf16_tflops": None}}
    assert verdicts.from_estimate(20 * GiB, 20 * GiB, profiles) == {"big": "fits", "t4": "oom"}
    knobs = {"precision": "bf16", "adapter": None}
    assert list(verdicts.notes(knobs, profiles)) == ["t4"]
    assert verdicts.notes({"precision": "fp32", "adapter": None}, profiles) == {}


@pytest.mark.parametrize("n", [1, 2, 8, 64])
def test_zero_paper_formulas(n):
    # ZeRO paper, Fig. 1: mixed-precision Adam, K = 12
    assert sharding.paper_bytes_per_param(0, n) == 16
    assert sharding.paper_bytes_per_param(1, n) == pytest.approx(4 + 12 / n)
    assert sharding.paper_bytes_per_param(2, n) == pytest.approx(2 + 14 / n)
    assert sharding.paper_bytes_per_param(3, n) == pytest.approx(16 / n)


@pytest.mark.parametrize("dist, stage", [("zero1", 1), ("zero2", 2), ("zero3", 3), ("fsdp", 3)])
@pytest.mark.parametrize("n", [1, 4, 8])
def test_partitioning_reproduces_the_paper_for_mixed_precision_states(dist, stage, n):
    psi = 7_000_000_000
    states = {"parameters": 2 * psi, "gradients": 2 * psi, "optimizer": 12 * psi,
              "activations": 0, "temporaries": 0, "other": 0}
    out = sharding.partition({"optimizer": states}, dist, n)
    assert out["peak_bytes"] == pytest.approx(sharding.paper_bytes_per_param(stage, n) * psi, abs=3)
    assert sum(out["breakdown_bytes"].values()) == out["peak_bytes"]


def test_partitioning_keeps_activations_and_adds_stage3_gathers():
    phases = {"forward": {"parameters": 800, "gradients": 0, "optimizer": 1600, "activations": 1000,
                          "temporaries": 10, "other": 1},
              "backward": {"parameters": 800, "gradients": 400, "optimizer": 1600, "activations": 500,
                           "temporaries": 20, "other": 1},
              "optimizer": {"parameters": 800, "gradients": 800, "optimizer": 1600, "activations": 0,
                            "temporaries": 800, "other": 1}}
    units = [(100, 100), (300, 300), (300, 300), (100, 100)]
    z3 = sharding.partition(phases, "zero3", 4, units)
    assert z3["phase_peak_bytes"]["forward"] == 200 + 600 + 400 + 1000 + 10 + 1  # 600: two gathered units
    assert z3["phase_peak_bytes"]["backward"] == 200 + 600 + 100 + 300 + 400 + 500 + 20 + 1
    assert z3["phase_peak_bytes"]["optimizer"] == 200 + 200 + 400 + 200 + 1
    off = sharding.partition(phases, "zero3-offload", 4, units)
    assert off["phase_peak_bytes"]["optimizer"] == 0 + 200 + 0 + 0 + 1  # states and their step on the host
    z1 = sharding.partition(phases, "zero1", 4)
    assert z1["phase_peak_bytes"]["forward"] == 800 + 400 + 1000 + 10 + 1
    assert z1["peak_phase"] == "forward" and z1["breakdown_bytes"]["activations"] == 1000


def test_cuda_attention_backend_choice():
    torch = pytest.importorskip("torch")
    from bench.worker.sim.cuda_kernels import cuda_backend
    q16 = torch.empty(1, 8, 16, 128, dtype=torch.bfloat16, device="meta")
    q32 = q16.float()
    mask = torch.empty(1, 1, 16, 16, dtype=torch.bool, device="meta")
    assert cuda_backend(q16, q16, q16, None) == "flash"
    assert cuda_backend(q16, q16, q16, mask) == "efficient"  # flash takes no mask
    assert cuda_backend(q32, q32, q32, None) == "efficient"  # flash is 16-bit only
    big = torch.empty(1, 8, 16, 320, dtype=torch.bfloat16, device="meta")
    assert cuda_backend(big, big, big, None) == "efficient"
    odd = torch.empty(1, 8, 16, 66, dtype=torch.float32, device="meta")
    assert cuda_backend(odd, odd, odd, None) == "math"  # not a multiple of the fp32 alignment (4)


def test_grouped_query_attention_in_fp32_runs_the_math_kernel():
    """The memory-efficient kernel takes equal head counts only (sdp_utils.cpp
    check_batch_size_and_num_heads_dense<false>); flash takes grouped heads but not fp32. So fp32
    attention with fewer key/value heads, passed as enable_gqa (transformers does so without a
    mask), is the math kernel's: each layer keeps B x H x L x L probabilities. An H200 showed it
    (results/reference/cuda-h200: fp32 Qwen2.5-0.5B at 2048 tokens held 5.6 GiB more than
    memory-efficient attention would)."""
    torch = pytest.importorskip("torch")
    from bench.worker.sim.cuda_kernels import cuda_backend
    q32 = torch.empty(1, 14, 16, 64, dtype=torch.float32, device="meta")
    kv32 = torch.empty(1, 2, 16, 64, dtype=torch.float32, device="meta")
    assert cuda_backend(q32, kv32, kv32, None, enable_gqa=True) == "math"
    assert cuda_backend(q32.bfloat16(), kv32.bfloat16(), kv32.bfloat16(), None, enable_gqa=True) == "flash"
    assert cuda_backend(q32, q32, q32, None, enable_gqa=True) == "efficient"  # heads already repeated
    assert cuda_backend(q32, q32, q32, None) == "efficient"


def test_a_published_allocator_figure_is_compared_without_paged_optimizer_state():
    from bench.worker.sim import simulate
    gib = 2**30
    active = simulate.published({"peak_gib": 10.0, "measure": "active"}, 16 * gib, 6 * gib)
    assert active["simulated_peak_gib"] == 10.0 and active["simulated_device_peak_gib"] == 16.0
    assert active["signed_error"] == 0.0 and "paged" in active["compared"]
    device = simulate.published({"peak_gib": 10.0, "measure": "nvidia-smi"}, 16 * gib, 6 * gib)
    assert device["simulated_peak_gib"] == 16.0 and device["compared"] == "peak"
    assert simulate.published({"peak_gib": 8.0, "measure": "active"}, 16 * gib, 0)["signed_error"] == 1.0


def test_model_states_are_read_where_they_peak_also_when_the_step_runs_in_backward():
    from bench.worker.sim.simulate import states_phase_of
    zero = dict.fromkeys(("activations", "gradients", "kv_cache", "optimizer", "other", "parameters", "temporaries"), 0)
    usual = {"forward": {**zero, "parameters": 4, "optimizer": 8, "activations": 9},
             "backward": {**zero, "parameters": 4, "optimizer": 8, "gradients": 3, "activations": 5},
             "optimizer": {**zero, "parameters": 4, "optimizer": 8, "gradients": 4}}
    assert states_phase_of(usual) == "optimizer"
    in_backward = {**usual, "backward": {**usual["backward"], "gradients": 1}, "optimizer": dict(zero)}
    assert states_phase_of(in_backward) == "backward"  # opt-in-bwd: the optimizer phase is empty


def test_the_replay_caps_each_gpu_by_the_verdicts_capacity():
    # one copy of the capacity rule: the capped replay and the verdicts read verdicts.capacity
    import inspect
    from bench.estimate import replay
    assert "verdicts.capacity(" in inspect.getsource(replay.model)
    assert "blas_workspace_bytes" not in inspect.getsource(replay.model)
