"""Replay a cell's allocation trace through the caching-allocator model (bench/estimate/allocator.py).

    python -m bench.estimate.replay results/traces/CELL.json.gz [--alloc-conf expandable_segments:True]
        [--capacity-bytes N] [--snapshot CELL.pickle]

prints the replay's summary as JSON; ``--snapshot`` writes the replay as the dict
``torch.cuda.memory._snapshot()`` returns (pickled, as ``torch.cuda.memory._dump_snapshot``
does), which https://pytorch.org/memory_viz and ``torch.cuda._memory_viz`` open.

Torch-free. ``replay(trace)`` -> summary dict; ``model(trace, conf, gpus, reserve)`` -> what a
record keeps (``allocator_model``): the replay without a capacity (what the allocator reserves
on a card big enough), and per GPU the first allocation that fails under that GPU's memory
minus the context reserve (replayed only where the uncapped reserved peak does not fit).

The trace (bench/worker/memtrack.py ``TraceRecorder``) is a dict: ``columns`` of equal
length (``kind`` 1 alloc / 0 free, ``serial``, ``bytes`` as requested, ``step`` (-1: model
build), ``phase``, ``op``, ``category`` as indices into ``phases``, ``ops``, ``categories``, and
``stream``: the stream each storage was allocated on, 0 the default; a trace without it is all
default stream),
``reset_at`` (the event where the training peak starts, as torch.cuda.reset_peak_memory_stats
after the build), ``max_events`` and ``dropped_events``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import pickle
import sys

from bench.estimate import pools, steady, verdicts
from bench.estimate.allocator import SOURCE, Allocator
from bench.estimate.pools import OutOfMemory

# the op name of allocations made in CUDA unified memory (bitsandbytes' paged optimizer states,
# cudaMallocManaged): outside the caching allocator, paged to host memory by the driver under
# pressure; the replay counts them apart (``unified_peak_bytes``), never as allocator blocks
UNIFIED_OP = "bitsandbytes.get_paged (cudaMallocManaged)"

TIMELINE_POINTS = 400
SNAPSHOT_MAX_ENTRIES = 200_000  # trace entries kept in an exported snapshot: the latest, as torch's ring buffer


def load(path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def dump(trace: dict, path) -> None:
    # one string, one write: json.dump into the gzip stream writes token by token (~0.1 s a 7B trace)
    with gzip.open(path, "wb", compresslevel=6) as fh:
        fh.write(json.dumps(trace, separators=(",", ":")).encode())


def replay(trace: dict, conf: str | None = None, capacity: int | None = None, snapshot: bool = False,
           points: int = TIMELINE_POINTS) -> dict:
    """Summary of one replay: reserved and allocated peaks (from ``reset_at`` on), the
    fragmentation at the allocated peak (reserved minus allocated when the step needs most), segment
    (cudaMalloc / page map) counts, per-step peaks,
    a timeline of ``points`` samples, the first allocation that failed (``oom``), and with
    ``snapshot`` the torch snapshot dict."""
    col = trace["columns"]
    kind, serial, nbytes, step, cat = col["kind"], col["serial"], col["bytes"], col["step"], col["category"]
    n, ncat = len(kind), len(trace["categories"])
    streams = col.get("stream") or [0] * n
    log = [] if snapshot else None
    a = Allocator(capacity, conf, log)
    blocks: dict = {}
    by_cat = [0] * ncat
    reset_at = trace.get("reset_at", 0)
    peak = peak_alloc = alloc_at_peak = res_at_alloc_peak = 0
    peak_event = -1
    nsteps = max(step, default=-1) + 1
    step_res, step_alloc = [0] * nsteps, [0] * nsteps
    stride = max(1, -(-n // points))
    tl, bucket_max, bucket_alloc, bucket_cats = [], 0, -1, [0] * ncat
    oom = None
    unified_op = trace["ops"].index(UNIFIED_OP) if UNIFIED_OP in trace["ops"] else -1
    ops = col["op"]
    unified: dict = {}
    unified_live = unified_peak = 0
    # peaks move only on allocations (a free never changes reserved memory); plain ifs, not
    # max(): a call per event is a third of the replay's time
    grown: dict = {}  # (step, phase) -> segment bytes allocated while the cache held enough bytes
    load_res = load_alloc = 0
    load_end = None
    for i in range(n):
        if i == reset_at:
            load_end = (a.reserved, a.allocated)
        if kind[i] and ops[i] == unified_op:
            unified[serial[i]] = nbytes[i]
            unified_live += nbytes[i]
            if unified_live > unified_peak:  # noqa: PLR1730
                unified_peak = unified_live
        elif kind[i]:
            mark = len(log) if log is not None else 0
            cached, before = a.reserved - a.allocated, a.reserved
            try:
                b = a.malloc(nbytes[i], streams[i])
            except OutOfMemory:
                oom = failure(trace, i, a)
                break
            if a.reserved > before and cached >= nbytes[i]:  # new memory while enough sat cached
                where = (step[i], col["phase"][i])
                grown[where] = grown.get(where, 0) + a.reserved - before
            blocks[serial[i]] = b
            by_cat[cat[i]] += b.size
            if log is not None:
                _add_frames(trace, i, log, mark)
            res, alloc, s = a.reserved, a.allocated, step[i]
            if res > bucket_max:  # noqa: PLR1730
                bucket_max = res
            if alloc > bucket_alloc:  # the categories at this stretch's allocated peak
                bucket_alloc, bucket_cats = alloc, by_cat.copy()
            if s >= 0:
                if res > step_res[s]:  # noqa: PLR1730
                    step_res[s] = res
                if alloc > step_alloc[s]:  # noqa: PLR1730
                    step_alloc[s] = alloc
            if i < reset_at:  # the load: the model's build, before the training peak starts
                if res > load_res:  # noqa: PLR1730
                    load_res = res
                if alloc > load_alloc:  # noqa: PLR1730
                    load_alloc = alloc
            else:
                if res > peak:
                    peak, alloc_at_peak, peak_event = res, alloc, i
                if alloc > peak_alloc:
                    peak_alloc, res_at_alloc_peak = alloc, res
        elif serial[i] in unified:
            unified_live -= unified.pop(serial[i])
        else:
            b = blocks.pop(serial[i], None)
            if b is not None:
                by_cat[cat[i]] -= b.size
                a.free(b)
        if (i + 1) % stride == 0 or i == n - 1:
            if bucket_alloc < 0:  # no allocation in this stretch: what is live now
                bucket_alloc, bucket_cats = a.allocated, by_cat
            tl.append([i, step[i], a.reserved, max(bucket_max, a.reserved), a.allocated, bucket_alloc, *bucket_cats])
            bucket_max, bucket_alloc = 0, -1
    out = {
        "alloc_conf": conf or "", "capacity_bytes": capacity, "events": n,
        "reserved_peak_bytes": peak, "allocated_at_reserved_peak_bytes": alloc_at_peak,
        "allocated_peak_bytes": peak_alloc, "reserved_at_allocated_peak_bytes": res_at_alloc_peak,
        # what the allocator holds beyond live blocks when the step needs the most
        "fragmentation_at_peak_bytes": res_at_alloc_peak - peak_alloc,
        "peak_event": peak_event, "peak_step": step[peak_event] if peak_event >= 0 else None,
        "segment_allocs": a.device_allocs, "segment_frees": a.device_frees, "alloc_retries": a.retries,
        "step_reserved_peak_bytes": step_res, "step_allocated_peak_bytes": step_alloc,
        # one row per stretch of events: reserved and allocated at its end and their peaks in it,
        # the categories (allocated bytes) at its allocated peak
        "timeline": {"columns": ["event", "step", "reserved", "reserved_max", "allocated", "allocated_max",
                                 *trace["categories"]], "rows": tl},
        "oom": oom,
        "unified_peak_bytes": unified_peak,
        # where the allocator reserved new memory although its cache held as many free bytes
        # (split or too-small blocks): step (-1: the load) and phase, largest first
        "fragmentation_growth": [{"step": st, "phase": trace["phases"][ph], "bytes": nb}
                                 for (st, ph), nb in sorted(grown.items(), key=lambda kv: -kv[1])[:5]],
        # the load phase (events before ``reset_at``) and the allocator's state the step starts from
        "load_reserved_peak_bytes": load_res, "load_allocated_peak_bytes": load_alloc,
        "load_end_reserved_bytes": (load_end or (a.reserved, a.allocated))[0],
        "load_end_allocated_bytes": (load_end or (a.reserved, a.allocated))[1],
    }
    if snapshot:
        out["snapshot"] = {"segments": pools.segments_snapshot(a, blocks.values()),
                           "device_traces": [log[-SNAPSHOT_MAX_ENTRIES:]],
                           "dropped_trace_entries": max(0, len(log) - SNAPSHOT_MAX_ENTRIES)}
    return out


def failure(trace: dict, i: int, a: Allocator) -> dict:
    """The allocation that did not fit: where it was and what the allocator held."""
    col = trace["columns"]
    return {"event": i, "step": col["step"][i], "phase": trace["phases"][col["phase"][i]],
            "op": trace["ops"][col["op"][i]], "category": trace["categories"][col["category"][i]],
            "bytes": col["bytes"][i], "allocated_bytes": a.allocated, "reserved_bytes": a.reserved}


def _add_frames(trace: dict, i: int, log: list, mark: int) -> None:
    """Name the allocation in the visualizer: op, category, phase and step as its one frame."""
    col = trace["columns"]
    frame = [{"filename": "ft-membench", "line": col["step"][i],
              "name": f"{trace['ops'][col['op'][i]]} [{trace['categories'][col['category'][i]]}, "
                      f"{trace['phases'][col['phase'][i]]}, step {col['step'][i]}]"}]
    for entry in log[mark:]:
        entry["frames"] = frame if entry["action"] == "alloc" else []
        entry["time_us"] = i


def model(trace: dict, conf: str | None, gpus: dict, reserve_bytes: int, outside: dict | None = None) -> dict:
    """What a record keeps: the uncapped replay of the trace in its steady state (its last step
    repeated: bench/estimate/steady.py; ``steady_state`` says how, or why not), no timeline rows
    beyond TIMELINE_POINTS, and,
    per GPU, ``first_oom``: None when the step fits, else the failing allocation under
    (memory - reserve - cuBLAS's workspaces, bench/estimate/verdicts.py). A GPU whose capacity holds the uncapped reserved peak never fails:
    the allocator's decisions are the same as without a cap, so it is not replayed. ``outside``:
    {gpu: bytes} more held outside the allocator (a rank's NCCL buffers), off that GPU's capacity."""
    recorded_events = len(trace["columns"]["kind"])
    free, trace, steady_info = settled(trace, conf)
    outside = outside or {}
    first_oom, retries = {}, {}
    caps = {g: verdicts.capacity(p, outside.get(g, 0), reserve_bytes) for g, p in gpus.items()}
    for gpu in gpus:
        cap = caps[gpu]
        if free["reserved_peak_bytes"] <= cap:
            first_oom[gpu], retries[gpu] = None, 0
            continue
        capped = replay(trace, conf, capacity=cap, points=1)
        first_oom[gpu], retries[gpu] = capped["oom"], capped["alloc_retries"]
    free.update(first_oom=first_oom, alloc_retries_by_gpu=retries, source=SOURCE,
                capacity_bytes_by_gpu=caps,
                trace_events=recorded_events, trace_max_events=trace["max_events"],
                trace_dropped_events=trace["dropped_events"],
                steady_state=dict(steady_info, how=steady.HOW if steady_info["repeats"] else None))
    return free


def settled(trace: dict, conf: str | None = None, points: int = TIMELINE_POINTS) -> tuple[dict, dict, dict]:
    """(the replay, the trace replayed, steady-state info) of ``trace`` in the allocator's steady state: its
    last step repeated (bench/estimate/steady.py) once, then once more while the last repetition still
    reserved new memory, at most ``steady.MAX_REPEATS`` times; a trace that cannot be repeated is replayed
    as it is (``info["why_not"]``)."""
    ext, info = steady.extend(trace, 1)
    if not info["repeats"]:
        return replay(trace, conf, points=points), trace, info
    out = replay(ext, conf, points=points)
    while info["repeats"] < steady.MAX_REPEATS and \
            out["step_reserved_peak_bytes"][-1] > out["step_reserved_peak_bytes"][-2]:
        ext, info = steady.extend(trace, info["repeats"] + 1)
        out = replay(ext, conf, points=points)
    info["settled"] = out["step_reserved_peak_bytes"][-1] == out["step_reserved_peak_bytes"][-2]
    return out, ext, info


def reserved_peak(trace: dict, conf: str | None = None) -> int:
    """The reserved peak ``model`` gives this trace (its steady state), without the timeline:
    what a search reads at a shape it did not simulate."""
    return settled(trace, conf, points=1)[0]["reserved_peak_bytes"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--alloc-conf", default=None, help="PYTORCH_CUDA_ALLOC_CONF value to model")
    ap.add_argument("--capacity-bytes", type=int, default=None)
    ap.add_argument("--snapshot", default=None, help="write a torch memory snapshot (pickle) here")
    args = ap.parse_args(argv)
    trace = load(args.trace)
    conf = args.alloc_conf if args.alloc_conf is not None else trace.get("alloc_conf")
    out = replay(trace, conf, args.capacity_bytes, snapshot=bool(args.snapshot))
    if args.snapshot:
        with open(args.snapshot, "wb") as fh:
            pickle.dump(out.pop("snapshot"), fh)
    out.pop("timeline")
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
