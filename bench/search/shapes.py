"""One cell's modelled reserved peak at any (batch, seq), as the fits search (bench/search/fits.py)
asks for it: by a trace interpolated along one axis where that is exact (bench/estimate/interp.py),
else by simulating the shape. A ZeRO/FSDP cell partitioned by formula interpolates its
single-process trace and applies the record's per-rank rule to it (bench/estimate/partition.py
``per_rank_reserved``), the same rule its record was made with; a ZeRO/FSDP cell's shape is judged
at least by what one GPU holds while the model loads (``judged_bytes``); every answer cached, every simulation logged with its time (and, given ``say``, a progress line
with the time left: bench/search/progress.py).
"""
from __future__ import annotations

import time
from pathlib import Path

from bench.estimate import interp, partition, replay
from bench.search import progress
from bench.cells import techniques


class Shapes:
    """The modelled reserved peak of one cell at any (batch, seq): by interpolated trace
    where that is exact, else by simulation; every answer cached."""

    def __init__(self, spec: dict, simulate, log_dir=None, simulate_many=None, say=None):
        self.spec, self.simulate, self.log_dir = spec, simulate, log_dir
        self.pace = progress.Pace(0, say or (lambda m: None), f"{spec['cell']} search")
        self.simulate_many = simulate_many
        self.traces: dict[tuple[int, int], dict] = {}   # simulated (batch, seq) -> trace
        self.reserved: dict[tuple[int, int], int] = {}
        self.simulated: list[dict] = []                 # what was simulated, and how long it took
        self.fits: dict[str, interp.AxisFit | None] = {}
        self.why_not: dict[str, str] = {}
        self.rule: dict | None = None   # a formula cell's per-rank rule, from its records (shape-independent)
        self.floor = 0                  # what one GPU holds at load (ZeRO/FSDP), from its records

    def shape_spec(self, batch: int, seq: int) -> dict:
        """The cell at another shape; a sample needs no single-process cross-check of a per-rank step."""
        return dict(self.spec, batch_size=batch, seq_len=seq, cross_check=False)

    def trace(self, batch: int, seq: int) -> dict:
        if (batch, seq) not in self.traces:
            self.prefetch([(batch, seq)])
        return self.traces[(batch, seq)]

    def prefetch(self, points) -> None:
        """Simulate the shapes of ``points`` not simulated yet (concurrently where the
        simulator runs several at a time)."""
        todo = [p for p in dict.fromkeys(points) if p not in self.traces]
        if not todo:
            return
        jobs = [(self.shape_spec(b, s), Path(self.log_dir, f"b{b}-s{s}.log") if self.log_dir else None)
                for b, s in todo]
        t0 = time.monotonic()
        recs = self.simulate_many(jobs) if self.simulate_many else [self.simulate(*job) for job in jobs]
        took = round((time.monotonic() - t0) / len(todo), 2)
        for (batch, seq), rec in zip(todo, recs):
            if rec.get("status") != "ok" or "_trace" not in rec:
                raise SearchError(f"simulation at batch {batch} x {seq} tokens: {rec.get('status')}: "
                                  f"{rec.get('reason') or 'no allocation trace'}")
            self.traces[(batch, seq)] = rec["_trace"]
            self.reserved[(batch, seq)] = judged_bytes(rec)
            self.floor = max(self.floor, load_bytes(rec))
            self.rule = (rec.get("details") or {}).get("per_rank_rule") or self.rule
            self.simulated.append({"batch": batch, "seq": seq, "s": took,
                                   "reserved_peak_bytes": rec["modelled_reserved_peak_bytes"]})
            self.pace.done(f"batch {batch} x {seq} tokens", took)

    def add(self, batch: int, seq: int, trace: dict, reserved: int) -> None:
        """A trace simulated elsewhere (the cell's own run, same inputs)."""
        self.traces[(batch, seq)] = trace
        self.reserved[(batch, seq)] = reserved
        self.simulated.append({"batch": batch, "seq": seq, "s": 0.0, "reserved_peak_bytes": reserved,
                               "reused": "the cell's own record and trace"})

    def axis(self, name: str, points: list[tuple[int, int]], degree: int) -> None:
        """Fit axis ``name`` ('seq' at batch 1, 'batch' at the study's length) from ``points``."""
        try:
            by_x = {(s if name == "seq" else b): self.trace(b, s) for b, s in points}
            self.fits[name] = interp.AxisFit.from_traces(by_x, degree)
        except interp.NotExact as exc:
            self.fits[name], self.why_not[name] = None, str(exc)

    def peak(self, batch: int, seq: int, name: str) -> int:
        key = (batch, seq)
        if key not in self.reserved:
            fit = self.fits.get(name)
            if fit is None or (name == "batch" and batch < fit.xs[0]) or (by_formula(self.spec) and not self.rule):
                self.trace(batch, seq)  # simulated: sets reserved
            else:
                t, conf = fit.at(seq if name == "seq" else batch), self.spec["knobs"]["alloc_conf"]
                got = (partition.per_rank_reserved(t, self.rule, conf) if by_formula(self.spec)
                       else replay.reserved_peak(t, conf))
                self.reserved[key] = max(got, self.floor)
        return self.reserved[key]


def by_formula(spec: dict) -> bool:
    """A ZeRO/FSDP cell whose per-rank figures are partitioned by formula from the single-process
    trace, not one rank's trace (bench/cells/techniques.py ``traced_per_rank``)."""
    return bool(spec["knobs"]["dist"]) and not techniques.traced_per_rank(spec)


def judged_bytes(rec: dict) -> int:
    """The bytes a shape is judged by: the modelled reserved peak, and for a ZeRO/FSDP cell at
    least what one GPU holds while the model loads (bench/estimate/loadplan.py, the engine's
    placement), so a load that does not fit answers 'none' as the cell's verdict does."""
    return max(rec["modelled_reserved_peak_bytes"], load_bytes(rec))


def load_bytes(rec: dict) -> int:
    """What one GPU holds while a ZeRO/FSDP cell's model loads, as its engine places it (0 for others):
    the same at every shape."""
    load = (rec.get("details") or {}).get("load_phase") or {}
    return (load.get("placements") or {}).get(load.get("placement"), {}).get("gpu_bytes") or 0


class SearchError(RuntimeError):
    pass
