"""The real CUDA caching allocator's own events, kept beside a GPU run's record: a snapshot's
device trace (``torch.cuda.memory._snapshot()['device_traces'][0]``, pickled by the worker next to
the cell's trace) reduced to the four actions the allocator model replays (bench/estimate/allocator.py;
tests/test_cuda_h100.py replays them).

    python -m bench.records.cuda_events OUT_DIR SNAPSHOT.pickle [...]   # writes OUT_DIR/<cell>.json.gz

A snapshot whose ring buffer overflowed holds only the run's end: it is refused, not reduced.
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
import sys
from pathlib import Path

# the ring buffer's size the worker records with (bench/worker/alloctrace.py imports it from here): this
# module stays torch-free
CUDA_HISTORY_ENTRIES = int(os.environ.get("FT_MEMBENCH_CUDA_HISTORY", "100000"))

FORMAT = "ft-membench-cuda-allocator-events/1"
ACTIONS = ["alloc", "free_completed", "segment_alloc", "segment_free"]
HOW = ("torch.cuda.memory._snapshot()['device_traces'][0] of the cell's GPU run (ring buffer not full: the whole "
       "run), reduced to its allocator events: action (index into actions), block (the alloc's number; 0 for "
       "segments), size (bytes as the allocator handed out), stream (0 the default stream, then in order of first use)")


def reduce(snapshot: dict, cell: str, max_entries: int | None = None) -> dict:
    """``snapshot``: what ``torch.cuda.memory._snapshot()`` returned. ``max_entries``: the ring
    buffer's size the run recorded with; a trace that long may have lost its start (ValueError)."""
    trace = snapshot["device_traces"][0]
    if max_entries is not None and len(trace) >= max_entries:
        raise ValueError(f"{cell}: the device trace holds {len(trace)} entries, the ring buffer's size: its start may be lost")
    cols: dict[str, list[int]] = {"action": [], "block": [], "size": [], "stream": []}
    streams: dict[int, int] = {}
    blocks: dict[int, int] = {}   # live block's address -> its number
    made = 0
    for entry in trace:
        action = entry["action"]
        if action not in ACTIONS:
            continue
        stream = streams.setdefault(entry["stream"], len(streams) + 1) if entry.get("stream", 0) else 0
        if action == "alloc":
            made += 1
            blocks[entry["addr"]] = block = made
        elif action == "free_completed":
            block = blocks.pop(entry["addr"], 0)
            if not block:
                continue  # a block allocated before the history began
        else:
            block = 0
        cols["action"].append(ACTIONS.index(action))
        cols["block"].append(block)
        cols["size"].append(int(entry["size"]))
        cols["stream"].append(stream)
    return {"format": FORMAT, "cell": cell, "how": HOW, "actions": ACTIONS, "columns": cols}


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for path in map(Path, argv[1:]):
        cell = path.name.removesuffix(".snapshot.pickle")
        with open(path, "rb") as fh:
            snap = pickle.load(fh)
        try:
            doc = reduce(snap, cell, CUDA_HISTORY_ENTRIES)
        except (KeyError, IndexError, ValueError) as exc:
            print(f"{path}: not reduced: {exc}", file=sys.stderr)
            continue
        with gzip.open(out / f"{cell}.json.gz", "wt") as fh:
            json.dump(doc, fh)
        print(f"{out / (cell + '.json.gz')}: {len(doc['columns']['action'])} events, streams {sorted(set(doc['columns']['stream']))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
