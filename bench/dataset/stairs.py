"""One recipe's training step at any padded width, and the allocator replayed over an epoch of them.

    fam = Family({512: t512, 1024: t1024, 1536: t1536, 2048: t2048}, first_scale=2)
    trace = fam.epoch([1024, 384, 2048, 640])     # build, then one step per width, in this order
    summary = replay.replay(trace, conf)           # bench/estimate/replay.py

A sim cell's trace holds the build, a warm-up step (step 0) and one more step (step 1). Its
batching decides the widths: ``padding-growing`` (padded batches, pads masked) runs step 0 at half
the cell's length and step 1 at the whole (``first_scale`` 2), ``fixed`` (no pad) both at the
whole (``first_scale`` 1). Each storage's size is a polynomial in the width on multiples of
``GRID`` tokens (flash attention's backward workspace is sized in 128-token blocks:
bench/worker/sim/cuda_kernels.py), so the trace is split in three parts, each fitted exactly
along the cell's length by bench/estimate/interp.py and checked at one more length:

- the build and step 0 (at the first batch's width);
- the next batch, made before step 1 (at the width of the step it feeds);
- step 1 itself.

An epoch's trace is the build and step 0 at its first width, step 1 at its second, then step 1
again for every further width, with the carry of one step paired to the next as
bench/estimate/steady.py pairs them (its ``_plan``): the same storages, sizes of each step's
width. Widths are rounded up to ``GRID`` (``round_width``): an upper bound by at most 127 pad
tokens a row, exact where ``pad_to_multiple_of`` is a multiple of 128.
"""
from __future__ import annotations

from bench.estimate import interp, steady

GRID = 128
COLUMNS = ("kind", "serial", "bytes", "step", "phase", "op", "category", "stream")


def round_width(w: int) -> int:
    return -(-w // GRID) * GRID


class Family:
    def __init__(self, traces: dict[int, dict], first_scale: int):
        xs = sorted(traces)
        if any(x % (GRID * first_scale) for x in xs):
            raise interp.NotExact(f"sample lengths {xs} must be multiples of {GRID * first_scale}")
        self.base, self.first_scale = traces[xs[0]], first_scale
        plan = steady._plan(self.base)
        if isinstance(plan, str):
            raise interp.NotExact(f"the step does not repeat: {plan}")
        self.first, self.pair, remade, self.carried = plan
        self.remade = set(remade)
        n = len(self.base["columns"]["kind"])
        self.parts = {"prefix": [i for i in range(self.first) if i not in self.remade],
                      "batch": sorted(self.remade), "step": list(range(self.first, n))}
        self.fits = {name: interp.AxisFit.from_traces({x: _slice(traces[x], idx) for x, idx in
                                                       ((x, rows) for x in xs)}, degree=2)
                     for name, rows in self.parts.items()}
        self._cache: dict = {}

    def bytes_of(self, part: str, width: int) -> list[int]:
        key = (part, width)
        if key not in self._cache:
            self._cache[key] = self.fits[part].bytes_at(width)
        return self._cache[key]

    def epoch(self, widths: list[int]) -> dict:
        """The trace of an epoch whose steps have these (GRID-rounded) widths, in order: steps
        numbered 0.. in the ``step`` column, the build as -1."""
        if not widths or any(w % GRID or w <= 0 for w in widths):
            raise ValueError(f"widths must be positive multiples of {GRID}")
        col = self.base["columns"]
        cols = {k: [] for k in COLUMNS}
        streams = col.get("stream") or [0] * len(col["kind"])

        def emit(i, serial, nbytes, step):
            cols["kind"].append(col["kind"][i])
            cols["serial"].append(serial)
            cols["bytes"].append(nbytes)
            cols["step"].append(step)
            cols["phase"].append(col["phase"][i])
            cols["op"].append(col["op"][i])
            cols["category"].append(col["category"][i])
            cols["stream"].append(streams[i])

        w1 = widths[1] if len(widths) > 1 else widths[0]
        pre = dict(zip(self.parts["prefix"], self.bytes_of("prefix", widths[0] * self.first_scale)))
        pre.update(zip(self.parts["batch"], self.bytes_of("batch", w1)))
        for i in range(self.first):
            emit(i, col["serial"][i], pre[i], min(col["step"][i], 0))
        held = []
        if len(widths) > 1:
            held = self._step(1, col["serial"], self.bytes_of("step", w1), emit, last=len(widths) == 2)
        self._repeat(widths[2:], emit, held)
        return dict(self.base, columns=cols, dropped_events=0)

    def _step(self, k: int, serials, step_bytes: list[int], emit, last: bool) -> list:
        """Emit step 1's rows as step ``k`` with these storages and sizes. Unless it is the epoch's
        last, the frees of its own batch are held back and returned: the loop makes the next
        batch before it lets go of this one (as a trace of more steps shows)."""
        col = self.base["columns"]
        batch = {col["serial"][i] for i in self.parts["batch"]}
        held = []
        for j, i in enumerate(range(self.first, len(col["kind"]))):
            s = serials(i) if callable(serials) else serials[i]
            if s is None:
                continue
            if not last and not col["kind"][i] and col["serial"][i] in batch:
                held.append((i, s, step_bytes[j]))
                continue
            emit(i, s, step_bytes[j], k)
        return held

    def _repeat(self, widths: list[int], emit, held: list) -> None:
        """Step 1 again for each width, as bench/estimate/steady.py ``extend`` repeats it."""
        col = self.base["columns"]
        kind, serial = col["kind"], col["serial"]
        nxt = max(serial) + 1
        prev = {s: s for s in self.carried}
        for k, w in enumerate(widths, start=2):
            batch_bytes = dict(zip(self.parts["batch"], self.bytes_of("batch", w)))
            cur: dict[int, int] = {}
            here: set = set()
            for i in self.parts["batch"]:   # the next batch, made before the step
                cur[serial[i]] = nxt
                emit(i, nxt, batch_bytes[i], k - 1)
                nxt += 1
            for i, s, b in held:            # then the last batch let go
                emit(i, s, b, k - 1)

            def storage(i, cur=cur, here=here, prev=prev):
                nonlocal nxt
                s = serial[i]
                if kind[i]:
                    cur[s] = nxt
                    here.add(s)
                    nxt += 1
                    return cur[s]
                if s in here:
                    here.discard(s)
                    return cur[s]
                if s in self.pair:
                    return prev[self.pair[s]]
                return cur.get(s)   # a storage made again at the copy's start, else none of this step's
            held = self._step(k, storage, self.bytes_of("step", w), emit, last=k == len(widths) + 1)
            prev = {s: cur[s] for s in self.carried}


def _slice(trace: dict, rows: list[int]) -> dict:
    col = trace["columns"]
    cols = {k: [col[k][i] for i in rows] for k in interp.STRUCTURE + ("bytes",) if k in col}
    return {"ops": trace["ops"], "columns": cols, "dropped_events": trace.get("dropped_events")}
