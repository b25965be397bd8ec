"""cuda mode: the cap to a smaller GPU profile, the NVML sampler, the CUDA context baseline.

    pytest tests/test_cuda.py -q       # the @pytest.mark.cuda tests skip without a GPU

The arithmetic and the sampler's aggregation are plain Python and run everywhere (the
sampler with a reader function of ours: NVML itself needs a driver). The cuda-marked tests
run real cells on the GPU through the launcher, as the matrix does.
"""
from __future__ import annotations

import importlib.util
import threading
import time

import pytest

from bench.worker import gpumem
from bench.records import checks
from bench.runner import launch
from bench.cells import matrix

GIB = 2**30
TINY = {"mode": "cuda", "models": ["tiny-llama"]}


def test_fraction_leaves_the_allocator_what_the_smaller_card_would():
    assert gpumem.memory_fraction(40 * GIB, 80 * GIB, context_bytes=GIB // 2) == pytest.approx((40 - 0.5) / 80)
    assert gpumem.memory_fraction(40 * GIB, 80 * GIB) == 0.5


def test_no_cap_when_the_profile_is_not_smaller():
    assert gpumem.memory_fraction(80 * GIB, 80 * GIB) is None
    assert gpumem.memory_fraction(141 * GIB, 80 * GIB) is None
    assert gpumem.memory_fraction(None, 80 * GIB) is None


def test_a_context_bigger_than_the_profile_leaves_nothing():
    assert gpumem.memory_fraction(GIB // 4, 80 * GIB, context_bytes=GIB // 2) == 0.0


def test_context_is_read_from_nvml_or_else_from_the_drivers_free_memory():
    nvml = gpumem.context_bytes(1 * GIB, 1 * GIB + 600 * 2**20, 2 * 2**20, free=70 * GIB, total=80 * GIB)
    assert nvml == (598 * 2**20, "nvml: device used after the context - before - torch reserved")
    # without NVML (no pynvml): cudaMemGetInfo's total - free, less torch's reserved; never negative
    context, how = gpumem.context_bytes(None, None, 2 * 2**20, free=80 * GIB - 600 * 2**20, total=80 * GIB)
    assert context == 598 * 2**20 and how.startswith("cudaMemGetInfo")
    assert gpumem.context_bytes(None, None, 2 * 2**20, free=80 * GIB, total=80 * GIB)[0] == 0


BREAKDOWN = {"parameters": 100, "gradients": 100, "optimizer": 200, "activations": 50, "temporaries": 30,
             "other": 10, "kv_cache": 0}


def test_the_peak_is_torchs_and_the_tracker_only_splits_it():
    more = gpumem.split_peak(BREAKDOWN, 490, 520)   # torch holds 30 more: rounding, workspaces
    assert more["peak_bytes"] == 520 == sum(more["breakdown_bytes"].values())
    assert more["breakdown_bytes"]["other"] == 40 and "tracker_over_cuda_bytes" not in more["details"]
    less = gpumem.split_peak(BREAKDOWN, 490, 460)   # the tracker held a storage torch had freed
    assert less["peak_bytes"] == 460 == sum(less["breakdown_bytes"].values())   # never the tracker's figure
    assert less["breakdown_bytes"]["other"] == 0 and less["breakdown_bytes"]["temporaries"] == 10
    assert less["details"]["tracker_over_cuda_bytes"] == 30
    with pytest.raises(RuntimeError, match="exceed torch's peak"):
        gpumem.split_peak(BREAKDOWN, 490, 300)


def test_summarize_takes_peaks_and_keeps_missing_as_none():
    samples = [(10.0, 1000, None), (10.05, 3000, 2000), (10.1, 2000, 2500)]
    out = gpumem.summarize(samples, 0.05)
    assert out["samples"] == 3 and out["device_used_peak_bytes"] == 3000 and out["process_peak_bytes"] == 2500
    assert out["device_used_first_bytes"] == 1000 and out["median_gap_s"] == pytest.approx(0.05)
    assert gpumem.summarize([(0.0, 5, None)])["process_peak_bytes"] is None  # NVML did not see our pid
    empty = gpumem.summarize([])
    assert empty["samples"] == 0 and empty["device_used_peak_bytes"] is None and empty["median_gap_s"] is None


def wait_for(condition, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_sampler_thread_reads_until_stopped():
    values = iter(range(1, 10**6))
    sampler = gpumem.Sampler(lambda: (next(values) * 100, 7), interval_s=0.01)
    sampler.start()
    wait_for(lambda: len(sampler.samples) >= 5)
    out = sampler.stop()
    assert not sampler.is_alive() and threading.active_count() >= 1
    assert out["samples"] >= 5 and out["error"] == ""
    assert out["device_used_peak_bytes"] == out["samples"] * 100 and out["process_peak_bytes"] == 7


def test_a_failing_read_ends_sampling_and_says_why():
    calls = []

    def read():
        calls.append(1)
        if len(calls) > 2:
            raise RuntimeError("NVML gone")
        return 50, None

    sampler = gpumem.Sampler(read, interval_s=0.01)
    sampler.start()
    wait_for(lambda: not sampler.is_alive())
    out = sampler.stop()
    assert out["samples"] == 2 and out["device_used_peak_bytes"] == 50 and "NVML gone" in out["error"]


def test_cuda_cell_without_a_gpu_is_a_skipped_record(matrix_file, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the cuda tests below run the cell for real")
    spec = matrix.load(matrix_file({"g": {**TINY, "gpus": ["t4"], "techniques": ["baseline"]}}))["tiny-llama__t4__baseline"]
    rec = launch.run_cell(spec, tmp_path / "w.log")
    assert rec["status"] == "skipped" and "CUDA device" in rec["reason"]
    assert rec["provenance"] == "cuda-measured" and checks.problems(rec) == []


# -- on a GPU ------------------------------------------------------------------------------------
def run_on_profile(matrix_file, tmp_path, memory_bytes, technique="baseline", **shape):
    gpus = {"small-gpu": {"kind": "cuda", "memory_bytes": memory_bytes}}
    study = {**TINY, "gpus": ["small-gpu"], "techniques": [technique], **shape}
    spec = matrix.load(matrix_file({"g": study}, gpus=gpus))[f"tiny-llama__small-gpu__{technique}"]
    return launch.run_cell(spec, tmp_path / f"{technique}.log")


@pytest.mark.cuda
def test_cell_on_a_smaller_profile_is_capped_and_names_both_devices(matrix_file, tmp_path):
    rec = run_on_profile(matrix_file, tmp_path, 8 * GIB)
    assert rec["status"] == "ok", f"{rec['reason']}\n{rec['log_tail']}"
    assert checks.problems(rec) == []
    cuda = rec["details"]["cuda"]
    assert cuda["device_profile"] == "small-gpu" and cuda["profile_memory_bytes"] == 8 * GIB
    assert cuda["physical_device"] and cuda["physical_memory_bytes"] > 8 * GIB
    context = cuda["cuda_context_bytes"] or 0
    assert cuda["memory_fraction"] == pytest.approx((8 * GIB - context) / cuda["physical_memory_bytes"])
    assert 0 < cuda["allocated_peak_bytes"] <= cuda["reserved_peak_bytes"] <= cuda["cap_bytes"]
    assert 0 < cuda["active_peak_bytes"] <= cuda["reserved_peak_bytes"]
    assert rec["peak_bytes"] >= cuda["allocated_peak_bytes"] and rec["reserved_peak_bytes"] == cuda["reserved_peak_bytes"]


@pytest.mark.cuda
def test_nvml_sees_the_context_and_the_run(matrix_file, tmp_path):
    if importlib.util.find_spec("pynvml") is None:
        pytest.skip("nvidia-ml-py is not installed (the [gpu] extra)")
    cuda = run_on_profile(matrix_file, tmp_path, 8 * GIB)["details"]["cuda"]
    assert cuda["nvml_note"] == "" and cuda["cuda_context_bytes"] > 0
    nvml = cuda["nvml"]
    assert nvml["samples"] >= 1 and nvml["error"] == ""
    # the card held at least this process's context and its allocator's peak at some sample
    assert nvml["device_used_peak_bytes"] >= cuda["device_used_after_init_bytes"]


@pytest.mark.cuda
def test_out_of_memory_happens_at_the_profile_not_the_card(matrix_file, tmp_path):
    # about 0.9 GiB of live tensors at batch 4 x 256 in fp32 (measured on CPU): it fits any
    # real card, not a 1 GiB one once the CUDA context is taken out
    shape = {"batch_size": 4, "seq_len": 256}
    small = run_on_profile(matrix_file, tmp_path, GIB, **shape)
    assert small["status"] == "oom", small["reason"]
    assert small["details"]["cuda"]["device_profile"] == "small-gpu"  # the facts survive the failure
    big = run_on_profile(matrix_file, tmp_path, 16 * GIB, **shape)
    assert big["status"] == "ok", big["reason"]


@pytest.mark.cuda
def test_two_ranks_on_two_gpus(matrix_file, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    rec = run_on_profile(matrix_file, tmp_path, 16 * GIB, technique="zero3+w2")
    assert rec["status"] == "ok", f"{rec['reason']}\n{rec['log_tail']}"
    assert [r["status"] for r in rec["details"]["ranks"]] == ["ok", "ok"]
