"""The cell's allocation trace, replayed through the caching-allocator model, into the record.

    attach(out, tracker, spec, gpus)   # record fields: modelled_reserved_peak_bytes, allocator_model
    write(rec, out_path)               # the trace beside the record: RECORD.json.trace.json.gz

The trace is the tracker's (bench/worker/memtrack.py); the model and the replay are torch-free
(bench/estimate/allocator.py, bench/estimate/replay.py). ``allocator_model`` holds the replay without a capacity
(reserved and allocated peaks, fragmentation at the allocated peak, segment allocations,
per-step peaks, a timeline of TIMELINE_POINTS samples) and, per GPU of ``gpus``, the first
allocation that fails under that GPU's memory minus the context reserve (bench/estimate/verdicts.py).
In cuda mode the real allocator history is recorded too (``cuda_history``) and its snapshot
written beside the record as RECORD.json.snapshot.pickle, as torch.cuda.memory._dump_snapshot
writes it.
"""
from __future__ import annotations

import pickle

from bench.estimate import replay, verdicts
# the ring buffer's size (FT_MEMBENCH_CUDA_HISTORY, torch's default 100000): read in one place, where the
# snapshot's reduction checks it (torch-free)
from bench.records.cuda_events import CUDA_HISTORY_ENTRIES

TRACE_SUFFIX = ".trace.json.gz"
SNAPSHOT_SUFFIX = ".snapshot.pickle"
TIMELINE_POINTS = 240


def attach(out: dict, tracker, spec: dict, gpus: dict, trace: dict | None = None, outside: dict | None = None) -> dict:
    """Replay ``tracker``'s trace (``trace``: taken already) under the cell's PYTORCH_CUDA_ALLOC_CONF;
    add the record fields to ``out`` and keep the trace for ``write``; ``outside``: {gpu: bytes} held
    outside the allocator besides the reserve (a rank's NCCL buffers). Returns the replay's summary."""
    conf = spec["knobs"]["alloc_conf"]
    trace = trace if trace is not None else tracker.trace(conf)
    model = replay.model(trace, conf, gpus, verdicts.RESERVE_BYTES, outside)
    model["timeline"] = _thin(model["timeline"], TIMELINE_POINTS)
    model["rule"] = ("reserved memory modelled: the step's allocation trace (every storage's "
                     "allocation and free, as the tracker saw them) replayed through a model of PyTorch's "
                     "CUDA caching allocator under PYTORCH_CUDA_ALLOC_CONF=" + (conf or "(default)"))
    out["modelled_reserved_peak_bytes"] = model["reserved_peak_bytes"]
    out["allocator_model"] = model
    out["_trace"] = trace
    return model


def _thin(timeline: dict, points: int) -> dict:
    rows = timeline["rows"]
    if len(rows) <= points:
        return timeline
    step = len(rows) / points
    return {"columns": timeline["columns"], "rows": [rows[int(i * step)] for i in range(points - 1)] + [rows[-1]]}


def write(rec: dict, out_path) -> None:
    """Move the trace (and a cuda snapshot) out of ``rec`` into files beside the record."""
    trace = rec.pop("_trace", None)
    if trace is not None:
        replay.dump(trace, f"{out_path}{TRACE_SUFFIX}")
    snap = rec.pop("_cuda_snapshot", None)
    if snap is not None:
        with open(f"{out_path}{SNAPSHOT_SUFFIX}", "wb") as fh:
            pickle.dump(snap, fh)


def start_cuda_history(torch) -> None:
    """Record the real allocator's history (cuda mode), for the snapshot beside the record.
    Without tracebacks (context=None): gathering a stack per allocation costs microseconds
    each, which would show in the cell's step time."""
    torch.cuda.memory._record_memory_history("all", context=None, max_entries=CUDA_HISTORY_ENTRIES)


def cuda_snapshot(torch) -> dict:
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    return snap
