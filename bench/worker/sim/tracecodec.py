"""The allocation trace as events that name no serial, and back; the blocks a layer adds
(bench/worker/sim/extension.py extends a step by them): an allocation is its serial's distance from
the last new serial, bytes, step, phase, op, category and stream; a free names which live
allocation of the same bytes, op and category it frees (the oldest, or else counted from the
newest, as a layer frees its own). A refill (a storage resized back from 0) names the allocation it
refills by the nearest of the last refill, the newest and the anchor serial.

    events = encode(trace); decode(events, trace["categories"], first_serial(trace), load_gap(trace))
    blocks = insertions(encode(k_trace), encode(k1_trace))   # None where k + 1 is not k with blocks
    pump(encode(k_trace), blocks, times)                      # k with each block inserted ``times`` times
"""
from __future__ import annotations


class NotExact(Exception):
    """The extension cannot be shown exact for this cell: the full step runs."""


COLUMNS = ("kind", "serial", "bytes", "step", "phase", "op", "category", "stream")


def first_serial(trace: dict) -> int:
    """The serial of the trace's first allocation (1 where it has none)."""
    col = trace["columns"]
    return next((s for k, s in zip(col["kind"], col["serial"]) if k), 1)


def _after_load(trace: dict) -> int | None:
    """The index of the first allocation after a rank's shards placed at load (bench/worker/onerank.py
    ``start_from_shards``), or None (no such block)."""
    from bench.worker.onerank import LOAD_OP
    ops, col = trace.get("ops", []), trace["columns"]
    if LOAD_OP not in ops:
        return None
    load, seen = ops.index(LOAD_OP), False
    for i, (k, o) in enumerate(zip(col["kind"], col["op"])):
        if k and o == load:
            seen = True
        elif k and seen:
            return i
    return None


def load_gap(trace: dict) -> int:
    """Serials between the last shard placed at load and the allocation after it (0: no such block): the
    shards an offloading rank holds on the host took serials there, a number that grows with the layers."""
    i = _after_load(trace)
    if i is None:
        return 0
    col = trace["columns"]
    last = max(s for k, s in zip(col["kind"][:i], col["serial"][:i]) if k)
    return col["serial"][i] - last


def encode(trace: dict) -> list[tuple]:
    """The trace's events without serials (see the module docstring). A storage resized in place
    (FSDP2 refills its all-gather buffers: bench/worker/memresize.py) allocates a serial freed
    before: that event names which by the signature it was freed with and its serial's distance
    from the last serial refilled of that signature (FSDP2 refills a unit's buffers in order, unit
    after unit, so the distance repeats with the layers where a rank among the freed would not), or
    from the newest serial (the first refill as backward turns back: the last unit's buffers, born
    just before the step's end) or from the last serial before the steps (the root unit's, born
    first in the first step), or from the last serial refilled of that signature on any stream (FSDP1
    frees a unit after forward on its unshard stream and refills it first in backward: the buffer it
    refilled last in forward), whichever is nearest.
    NotExact for a free of nothing live, or a serial allocated while live."""
    col = dict(trace["columns"])
    col.setdefault("stream", [0] * len(col["kind"]))  # a trace of before streams: all on the default one
    kind, serial, nbytes, step, phase, op, cat, stream = (col[k] for k in COLUMNS)
    live: dict = {}     # (bytes, op, category, stream) -> live serials, oldest first
    what: dict = {}     # serial -> its (bytes, op, category, stream)
    freed: dict = {}    # a freed serial -> the signature it was freed with
    refilled: dict = {}  # signature at its free -> the serial last allocated again
    refilled_any: dict = {}  # (bytes, op, category) of a refill -> its serial: the last refilled so, on any stream
    top, out = first_serial(trace) - 1, []  # gaps from the first allocation's serial (``decode`` is given it)
    after_load = _after_load(trace)  # its gap is ``load_gap``'s, given to ``decode``: written 0 here
    origin, anchor = top, None
    for i in range(len(kind)):
        s = serial[i]
        if kind[i]:
            sig = (nbytes[i], op[i], cat[i], stream[i])
            if s <= top:
                if s in what or s not in freed:
                    raise NotExact(f"serial {s} allocated again while live")
                old = freed.pop(s)
                ref = min((abs(d), mode, d) for mode, d in enumerate((s - refilled.get(old, origin), top - s,
                                                                          s - (origin if anchor is None else anchor),
                                                                          s - refilled_any.get(old[:3], origin))))
                ref = ref[1:]
                out.append((2, old, ref, nbytes[i], step[i], phase[i], op[i], cat[i], stream[i]))
                refilled[old] = refilled_any[sig[:3]] = s
            else:
                out.append((1, 0 if i == after_load else s - top, nbytes[i], step[i], phase[i], op[i], cat[i],
                            stream[i]))
                if step[i] >= 0 and anchor is None:
                    anchor = top  # the last serial before the steps
                top = s
            live.setdefault(sig, []).append(s)
            what[s] = sig
        else:
            sig = what.pop(s, None)
            if sig is None:
                raise NotExact(f"a free of serial {s}, not live")
            stack = live[sig]
            oldest = stack.index(s)
            newest = len(stack) - 1 - oldest
            stack.pop(oldest)
            out.append((0, step[i], phase[i], sig, -1 if oldest == 0 < newest else newest))
            freed[s] = sig
    return out


def decode(events: list[tuple], categories, first: int = 1, load_gap: int = 0) -> dict:
    """Columns of encoded events (``encode``'s inverse), the first allocation's serial ``first``, the
    gap after a rank's shards placed at load ``load_gap`` (written 0)."""
    cols = {k: [] for k in COLUMNS}
    kind, serial, nbytes, step, phase, op, cat, stream = cols.values()
    live: dict = {}
    freed: dict = {}     # a freed serial -> the signature it was freed with
    refilled: dict = {}
    refilled_any: dict = {}
    top = origin = first - 1
    anchor = None
    for ev in events:
        if ev[0] == 1:
            _, gap, n, st, ph, o, ca, sm = ev
            if st >= 0 and anchor is None:
                anchor = top
            top += gap or load_gap
            s = top
            live.setdefault((n, o, ca, sm), []).append(s)
        elif ev[0] == 2:  # a freed serial allocated again (an in-place resize)
            _, old, (mode, distance), n, st, ph, o, ca, sm = ev
            s = (refilled.get(old, origin) + distance, top - distance,
                 (origin if anchor is None else anchor) + distance, refilled_any.get(old[:3], origin) + distance)[mode]
            if freed.pop(s, None) != old:
                raise NotExact("a refill of nothing freed")
            refilled[old] = refilled_any[(n, o, ca)] = s
            live.setdefault((n, o, ca, sm), []).append(s)
        else:
            _, st, ph, sig, rank = ev
            stack = live.get(sig)
            index = (len(stack) - 1 - rank if rank >= 0 else -1 - rank) if stack else -1
            if not stack or not 0 <= index < len(stack):
                raise NotExact("a free of nothing live")
            s = stack.pop(index)
            freed[s] = sig
            n, o, ca, sm = 0, 0, sig[2], sig[3]
        kind.append(1 if ev[0] else 0)
        serial.append(s)
        nbytes.append(n)
        step.append(st)
        phase.append(ph)
        op.append(o)
        cat.append(ca)
        stream.append(sm)
    return cols


WINDOW = 64


def insertions(a: list, b: list) -> list | None:
    """``b`` as ``a`` with blocks inserted, each a repeat of the events just before it in
    ``b``: [(position in a, block)], or None. Where a block goes, the smallest that repeats what
    precedes it and after which ``b`` runs on as ``a`` for the longest window is taken."""
    i = j = 0
    left = len(b) - len(a)
    out = []
    while i < len(a):
        if j < len(b) and a[i] == b[j]:
            i += 1
            j += 1
            continue
        found, window = None, WINDOW
        while found is None and window >= 1:
            w = min(window, len(a) - i)
            for d in range(1, min(left, j) + 1):
                if b[j + d] != a[i] if j + d < len(b) else True:
                    continue  # b cannot run on as a from here: no need to compare more
                if b[j + d:j + d + w] == a[i:i + w] and b[j:j + d] == b[j - d:j]:
                    found = d
                    break
            window //= 2
        if found is None:
            return None
        out.append((i, b[j:j + found]))
        j += found
        left -= found
    if j < len(b):
        d = len(b) - j
        if d > j or b[j:] != b[j - d:j]:
            return None
        out.append((len(a), b[j:]))
    return out


def pump(a: list, blocks: list, times: int) -> list:
    """``a`` with each block inserted ``times`` times at its place."""
    out, prev = [], 0
    for pos, block in blocks:
        out.extend(a[prev:pos])
        out.extend(block * times)
        prev = pos
    out.extend(a[prev:])
    return out
