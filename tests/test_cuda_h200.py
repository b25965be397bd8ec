"""Sim against real GPU runs it was never fitted to: matrix/cuda-h200.yaml's 16 training cells,
measured on an NVIDIA H200 (torch 2.11 + CUDA 13.0, transformers 5.17, peft 0.21, bitsandbytes
0.50.2), stored with their sim twins in results/reference/cuda-h200 (README there).

    pytest tests/test_cuda_h200.py -q

Held: every stored record passes the gate; sim's allocated peak with cuBLAS's workspaces
(details.blas_workspaces) within 1% of ``torch.cuda.max_memory_allocated`` on every cell (2% before they
were counted), its modelled reserved memory within 3.5% of
``max_memory_reserved`` but for one named cell; the memory a process held outside the caching
allocator (NVML's used memory less the allocator's reserved, less what the device held before the
process) within the verdict's reserve. The first H200 run found two layers that lied, both fixed
at their layer and held here: fp32 grouped-query attention runs the math kernel on a GPU (sim had
the memory-efficient one: -28.6% and -26.6% on the two fp32 baselines), and the reserve for memory
outside the allocator was 576 MiB where the H200 showed 742-758 MiB.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.estimate import verdicts
from bench.records import checks, results
from tests.helpers import gpu_runs_and_twins, on_gpu

ROOT = Path(__file__).resolve().parents[1] / "results" / "reference" / "cuda-h200"
ALLOCATED_WITHIN = 0.01
RESERVED_WITHIN = 0.035
# the allocator model replaying the real run's own trace gives 5.03 GiB against 5.88 measured: the
# replay, not the trace, is what is short on this cell (QLoRA's load leaves segments the model frees)
RESERVED_EXCEPTIONS = {"qwen2.5-0.5b__h200__qlora+gc": -0.21}


@pytest.fixture(scope="module")
def stored():
    return gpu_runs_and_twins(ROOT, "h200")


def twin(cell: str) -> str:
    return cell.replace("__h200__", "__sim__")


def test_the_gpu_runs_are_measurements_of_an_h200(stored):
    cuda, sim = stored
    assert len(cuda) == 16 and set(map(twin, cuda)) == set(sim)
    for cell, rec in cuda.items():
        assert rec["status"] == "ok" and rec["provenance"] == "cuda-measured" and checks.problems(rec) == []
        info = rec["details"]["cuda"]
        assert info["physical_device"] == "NVIDIA H200" and info["nvml"]["samples"] > 0, cell
        assert rec["peak_bytes"] == info["allocated_peak_bytes"] and rec["reserved_peak_bytes"] == info["reserved_peak_bytes"]
    assert all(r["provenance"] == "simulated" for r in sim.values())


def test_sim_allocates_what_the_h200_allocated(stored):
    cuda, sim = stored
    errors = {c: on_gpu(sim[twin(c)], "h200") / r["peak_bytes"] - 1 for c, r in cuda.items()}
    assert all(abs(e) <= ALLOCATED_WITHIN for e in errors.values()), errors
    # the two fp32 baselines, whose attention runs the math kernel on the GPU, are in the set
    assert {"qwen2.5-0.5b__h200__baseline", "llama-3.2-1b__h200__baseline"} <= set(errors)


def test_modelled_reserved_against_the_h200s_reserved(stored):
    cuda, sim = stored
    for cell, rec in cuda.items():
        err = on_gpu(sim[twin(cell)], "h200", "modelled_reserved_peak_bytes") / rec["reserved_peak_bytes"] - 1
        if cell in RESERVED_EXCEPTIONS:
            assert err == pytest.approx(RESERVED_EXCEPTIONS[cell], abs=0.02), cell
            replayed = rec["modelled_reserved_peak_bytes"] / rec["reserved_peak_bytes"] - 1
            assert replayed < -0.1  # the replay of the real trace is short too: the allocator model's gap
        else:
            assert abs(err) <= RESERVED_WITHIN, (cell, err)


def test_the_verdicts_reserve_covers_what_the_process_held_outside_the_allocator(stored):
    cuda, _ = stored
    outside = []
    for rec in cuda.values():
        info = rec["details"]["cuda"]
        outside.append(info["nvml"]["device_used_peak_bytes"] - info["device_used_before_bytes"]
                       - info["reserved_peak_bytes"])
    assert 700 * 2**20 < max(outside) <= verdicts.RESERVE_BYTES


@pytest.mark.slow
def test_fp32_grouped_query_attention_is_simulated_as_the_gpu_ran_it(tmp_path):
    """Live: the fp32 Qwen2.5-0.5B baseline (14 query heads, 2 key/value heads) at 2048 tokens,
    simulated now, against the H200's allocated peak (sim had -28.6% before the fix)."""
    from bench.cells import matrix
    from bench.worker.sim import simulate
    spec = matrix.load(Path(__file__).resolve().parents[1] / "matrix" / "cuda-h200.yaml")["qwen2.5-0.5b__sim__baseline"]
    measured = results.read(ROOT, only="qwen2.5-0.5b__h200__baseline").records["qwen2.5-0.5b__h200__baseline"]
    rec = simulate.run(spec)
    assert abs(on_gpu(rec, "h200") / measured["peak_bytes"] - 1) <= ALLOCATED_WITHIN


MEASURED = ROOT / "measure-llama-3.2-3b"


def test_ft_membench_measure_on_the_h200_held_out_llama_3b():
    """`ft-membench measure llama-3.2-3b --gpu h200 --techniques bf16,gc+bf16,lora+gc+bf16,qlora+gc`,
    predicted here (pinned versions) and stored before it ran on the H200: a model no earlier run
    had measured. Allocated within 1.5%, reserved within 0.5%, every verdict as the run ended. The
    predictions are kept as they were made (the reserve was 768 MiB then, 840 MiB now)."""
    import json
    rs = results.read(MEASURED)
    assert rs.problems == [] and len(rs.records) == 4
    for cell, rec in rs.records.items():
        assert rec["status"] == "ok" and rec["provenance"] == "cuda-measured"
        assert rec["details"]["cuda"]["physical_device"] == "NVIDIA H200"
        twin = cell.replace("__h200__", "__sim__")
        pred = json.loads((MEASURED / "predicted" / f"{twin}.b1.s2048.json").read_text())
        # stored before the run, so made under the reserve of its day (768 MiB, before cuBLAS's workspaces were
        # counted): the gate finds that, and only that, stale; the bytes compared below do not depend on either
        stale = checks.problems(pred)
        assert pred["details"]["verdict_reserve_bytes"] == 768 * 2**20 and stale and all(
            "verdict_reserve_bytes is 805306368" in p or p.startswith("allocator_model.capacity_bytes_by_gpu.")
            or p.startswith("details.blas_workspaces.by_gpu is None") for p in stale)
        assert pred["verdicts"]["h200"] == "fits"
        assert abs(pred["peak_bytes"] / rec["peak_bytes"] - 1) <= 0.015, cell
        assert abs(pred["modelled_reserved_peak_bytes"] / rec["reserved_peak_bytes"] - 1) <= 0.005, cell
