"""The allocator's steady state: a trace's last training step repeated, as the run goes on repeating it.

A cell's trace holds the build, a warm-up step and the measured step(s). PyTorch's caching
allocator does not stop changing after the first step: a block split in one step may leave a
free piece that the next step's request no longer fits, and the allocator reserves a new segment.
A replay of one or two steps can so under-count what a long run reserves. (Found on an H100: Qwen2.5-7B,
FSDP2 at world size 4, gc, bf16, reserved -4.9% after one step against a real run of three; the
same trace with its last step repeated comes within -0.4%: results/reference/cuda-h100/README.md.)

``extend(trace, k)`` appends k copies of the last step to the trace, each copy's storages new, as
the next steps would allocate them (bench/estimate/replay.py ``settled`` adds copies until one
reserves nothing new, at most ``MAX_REPEATS``):
- A storage allocated in the last step and still live at its end (the step's carry: gradients
  created by this step, a reduce-scatter buffer kept for the next) stands, in the next copy, for
  the storage of the same size that the last step freed from before it. Carried storages are
  paired by size, in the order they were allocated.
- A storage from before the step that the step freed and that the step's own carry does not
  replace (the batch made before the step) is made again at the start of each copy, as the data
  loader makes the next batch.
- A step whose carry has a storage that nothing freed replaces (memory growing step after
  step), a step made before more than ``REMADE_MAX`` bytes of what it frees (a generation's
  cache), a trace with one step, or a trace whose events were dropped: not extended, and
  ``info["why_not"]`` says why.

Allocated bytes are unchanged by construction (every copy holds what the last step held);
what moves is the reserved memory, the allocator's own state. The replay of the extended trace
is what records and searches read (bench/estimate/replay.py ``model``, ``reserved_peak``).
"""
from __future__ import annotations

from collections import defaultdict

MAX_REPEATS = 3           # copies of the last step at most: a copy more while the last one still grew
REMADE_MAX = 64 * 2 ** 20  # bytes a step may free of what was made before it, unreplaced (a batch, not a cache)
HOW = ("the last step repeated after the trace until a repetition reserves no new memory (at most "
       f"{MAX_REPEATS}; its carried storages paired by size, the batch made again), so the reserved figure is the "
       "allocator's steady state, not its first step's")


def _plan(trace: dict):
    """(first event of the last step, {carried-in serial: carried-out serial}, [events to make again],
    [carried-out serials]) or a reason string."""
    col = trace["columns"]
    kind, serial, nbytes, step = col["kind"], col["serial"], col["bytes"], col["step"]
    n = len(kind)
    if trace.get("dropped_events"):
        return "the trace dropped events"
    last = max(step, default=-1)
    if last < 1:
        return "one training step in the trace: nothing to pair its carry with"
    first = step.index(last)
    if any(s != last for s in step[first:]):
        return "the last step's events are not the trace's tail"
    live: dict[int, int] = {}
    for i in range(first):
        if kind[i]:
            live[serial[i]] = i
        else:
            live.pop(serial[i], None)
    born: dict[int, int] = {}
    carried_in = []
    for i in range(first, n):
        s = serial[i]
        if kind[i]:
            born[s] = i
        elif s in born:
            del born[s]
        elif s in live:
            carried_in.append(live.pop(s))
    by_size: dict[int, list] = defaultdict(list)
    for i in sorted(born.values()):
        by_size[nbytes[i]].append(serial[i])
    pair, remade = {}, []
    for i in sorted(carried_in):
        if by_size[nbytes[i]]:
            pair[serial[i]] = by_size[nbytes[i]].pop(0)
        else:
            remade.append(i)
    grows = sum(len(v) for v in by_size.values())
    if grows:
        return f"the last step keeps {grows} storages that replace nothing it freed (memory grows step by step)"
    if sum(nbytes[i] for i in remade) > REMADE_MAX:
        return (f"the last step frees {sum(nbytes[i] for i in remade) / 2 ** 20:.0f} MiB made before it "
                "that it does not make again (not a training step's batch)")
    return first, pair, remade, list(born)


def extend(trace: dict, repeats: int = 1) -> tuple[dict, dict]:
    """(the trace with its last step repeated ``repeats`` times, info) or (the trace unchanged,
    info with ``why_not``). The input is not modified."""
    plan = _plan(trace)
    if isinstance(plan, str):
        return trace, {"repeats": 0, "why_not": plan}
    first, pair, remade, carried = plan
    col = trace["columns"]
    kind, serial, step = col["kind"], col["serial"], col["step"]
    n, last = len(kind), step[first]
    nxt = max(serial) + 1
    prev = {s: s for s in carried}  # carried-out serial -> its storage in the previous copy
    rows: list[int] = []      # the events each copy repeats (indices into the trace), in order
    serials: list[int] = []   # their storages' serials in the copies
    steps: list[int] = []
    for copy in range(repeats):
        cur: dict[int, int] = {}
        here: set = set()
        mark = len(rows)
        for i in remade:  # the next batch, made before the step
            cur[serial[i]] = nxt
            rows.append(i)
            serials.append(nxt)
            nxt += 1
        for i in range(first, n):
            s = serial[i]
            if kind[i]:
                cur[s] = nxt
                here.add(s)
                new = nxt
                nxt += 1
            elif s in here:
                here.discard(s)
                new = cur[s]
            elif s in pair:
                new = prev[pair[s]]
            elif s in cur:  # a storage made again at the copy's start
                new = cur[s]
            else:  # a free the step's plan did not count (of a storage not live before it): none here
                continue
            rows.append(i)
            serials.append(new)
        steps += [last + 1 + copy] * (len(rows) - mark)
        prev = {s: cur[s] for s in carried}
    out = {k: (v + serials if k == "serial" else v + steps if k == "step" else v + [v[i] for i in rows])
           for k, v in col.items()}
    return dict(trace, columns=out), {"repeats": repeats, "why_not": None, "steps_in_trace": last + 1}
