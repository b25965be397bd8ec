"""FSDP1 ranks on a real GPU: matrix/cuda-h200-fsdp1.yaml's cells measured on an NVIDIA H200, each
FSDP1 cell run as its rank 0 alone over torch's fake process group, stored with their sim twins,
the GPU runs' own tracker traces and the real allocator's events in results/reference/cuda-h200-fsdp1
(README there).

    pytest tests/test_cuda_h200_fsdp1.py -q

Held: every stored record passes the gate; sim's rank allocates within 2 MiB of the H200's rank with
cuBLAS's workspaces counted (``torch.cuda.max_memory_allocated``; the shape of fms-acceleration's Mistral-7B rows, whose 2-GPU
LoRA rows sim answers 8-9% under: not this rank's program at today's versions); sim traces its
allocations on the streams the GPU used (FSDP1's flat-gradient cat on the unshard stream: the
backward stream rule, bench/worker/streams.py); sim's modelled reserved equals the allocator model
replaying the GPU run's own trace within 0.5%, and that model replaying the real allocator's own
events equals the GPU's reserved within 0.6%. What is left between the two replays (the trace the
tracker sees against the allocator's events: -2.3% to +5.2%) is named here, not hidden.
"""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from bench.estimate import replay
from tests.helpers import gpu_runs_and_twins, on_gpu
from tests.test_cuda_h100 import replay_events

ROOT = Path(__file__).resolve().parents[1] / "results" / "reference" / "cuda-h200-fsdp1"
ALLOCATED_WITHIN = 0.02
CUBLAS_WORKSPACES = 64 * 2**20   # what torch held beyond the tracker on every GPU cell of an H100 or H200
SAME_TRACE_WITHIN = 0.005
EVENTS_WITHIN = 0.006
# the allocator model replaying the GPU run's own tracker trace, against the GPU's reserved: the gap
# between what the tracker sees and what the allocator did (its events replay within EVENTS_WITHIN)
TRACE_GAP = {"mistral-7b-v0.1__h200__lora+fsdp1+bf16+gc+w2+shift-ce": +0.048,
             "llama-3.2-1b__h200__qlora+fsdp1+amp-bf16+gc+w2": +0.052,
             "llama-3.2-1b__h200__lora+fsdp1+bf16+gc+w2": -0.023,
             "mistral-7b-v0.1__h200__fsdp1+bf16+gc+w2+shift-ce": -0.017}


@pytest.fixture(scope="module")
def stored():
    return gpu_runs_and_twins(ROOT, "h200")


def twin(cell: str) -> str:
    return cell.replace("__h200__", "__sim__")


def test_the_gpu_runs_are_fsdp1_ranks_measured_on_an_h200(stored):
    cuda, sim = stored
    assert len(cuda) == 6 and set(map(twin, cuda)) == set(sim)
    for cell, rec in cuda.items():
        assert rec["status"] == "ok" and rec["provenance"] == "cuda-measured", cell
        assert rec["details"]["cuda"]["physical_device"] == "NVIDIA H200"
        if "+w2" in cell:
            program = rec["details"]["rank_program"]
            assert program["engine"] == "fsdp1" and program["process_group"] == "fake" and program["world_size"] == 2
    # torch 2.11's fake group left QLoRA's gathered weights unwritten: its loss is nan, and the record says
    # why that says nothing of the bytes (the gate accepts it only with that note)
    qlora = cuda["llama-3.2-1b__h200__qlora+fsdp1+amp-bf16+gc+w2"]["details"]
    assert qlora["rank_program"]["loss"] and qlora["final_loss"] != qlora["final_loss"]
    assert all(r["provenance"] == "simulated" for r in sim.values())


def test_sims_fsdp1_rank_allocates_what_the_h200s_rank_allocated(stored):
    cuda, sim = stored
    errors = {c: on_gpu(sim[twin(c)], "h200") / r["peak_bytes"] - 1 for c, r in cuda.items()}
    assert all(abs(e) <= ALLOCATED_WITHIN for e in errors.values()), errors
    # each phase's tracked peak to within 0.1%: the same program, not a compensation
    for cell, rec in cuda.items():
        for phase, peak in rec["phase_peak_bytes"].items():
            assert sim[twin(cell)]["phase_peak_bytes"][phase] == pytest.approx(peak, rel=0.001), (cell, phase)


def test_what_torch_held_beyond_the_tracker_is_cublass_workspaces(stored):
    """What torch's allocator handed out that no tensor the tracker saw holds (the GPU record's ``other``
    beyond sim's) is 64-66 MiB on each of these cells and at least 63.9 MiB on every H100 and H200 cell
    stored: cuBLAS's workspaces, 32 MiB each on sm90 by torch's default, one for the forward's thread and
    one for autograd's backward thread. Sim counts them per GPU beside the trace (details.blas_workspaces,
    bench/estimate/verdicts.py); with them, the allocated peaks agree within 2 MiB (they were 0.2-1.6% short)."""
    cuda, sim = stored
    for cell, rec in cuda.items():
        twin_rec = sim[twin(cell)]
        assert twin_rec["details"]["blas_workspaces"]["by_gpu"]["h200"] == CUBLAS_WORKSPACES
        other = rec["breakdown_bytes"]["other"] - twin_rec["breakdown_bytes"]["other"]
        assert CUBLAS_WORKSPACES - 2**20 <= other <= CUBLAS_WORKSPACES + 3 * 2**20, (cell, other)
        assert abs(rec["peak_bytes"] - on_gpu(twin_rec, "h200")) <= 2 * 2**20, cell


def allocations_by_stream(trace: dict) -> Counter:
    cols = trace["columns"]
    return Counter(s for k, s in zip(cols["kind"], cols["stream"]) if k == 1 and s)


@pytest.mark.parametrize("path", sorted((ROOT / "traces").glob("*__h200__*.json.gz")), ids=lambda p: p.name[:-8])
def test_sim_allocates_on_the_streams_the_gpu_used(stored, path):
    """FSDP1's all-gather outputs and the flat-gradient cat on its unshard stream, its reduce-scatter
    outputs on its post-backward stream: as many on each, allocation for allocation. Before the backward
    stream rule sim put the cat on the default stream (Mistral-7B full fine-tune: 260 against 392)."""
    cell = path.name[:-len(".json.gz")]
    _, sim = stored
    gpu = allocations_by_stream(replay.load(path))
    assert gpu == allocations_by_stream(replay.load(ROOT / "traces" / f"{twin(cell)}.json.gz"))


def test_sims_reserved_is_the_replay_of_the_gpus_own_trace(stored):
    cuda, sim = stored
    for cell, rec in cuda.items():
        same = sim[twin(cell)]["modelled_reserved_peak_bytes"] / rec["modelled_reserved_peak_bytes"] - 1
        assert abs(same) <= SAME_TRACE_WITHIN, (cell, same)


@pytest.mark.parametrize("path", sorted((ROOT / "allocator-events").glob("*.json.gz")), ids=lambda p: p.name[:-8])
def test_the_allocator_model_replays_the_real_allocators_events(stored, path):
    cuda, _ = stored
    doc = json.loads(gzip.open(path).read())
    rec = cuda[doc["cell"]]
    measured = rec["reserved_peak_bytes"]
    per_stream = replay_events(doc, streams=True) / measured - 1
    assert abs(per_stream) <= EVENTS_WITHIN, per_stream
    assert abs(per_stream) <= abs(replay_events(doc, streams=False) / measured - 1)
    # the named gap: the tracker's trace of the same run, replayed, against the allocator's reserved
    gap = rec["modelled_reserved_peak_bytes"] / measured - 1
    assert gap == pytest.approx(TRACE_GAP[doc["cell"]], abs=0.003), gap
