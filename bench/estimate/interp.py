"""A sim step's allocation trace at any shape of one axis, from its traces at a few shapes.

    fit = AxisFit.from_traces({512: t512, 1024: t1024, 2048: t2048, 4096: t4096}, degree=2)
    trace = fit.at(65536)          # the trace a simulation at seq 65536 would write

Torch-free. For one model x technique, a training step runs the same ops whatever its batch
and sequence length: only tensor sizes change, and each storage's size is a product of the
shape's dimensions, so each allocation's requested bytes is a polynomial in the sequence
length (degree 2: attention scores B x H x L x L where they exist) at a fixed batch, and in the
batch size (degree 1) at a fixed length. ``from_traces`` checks that, exactly, in integers:

- every trace has the same events (kind, serial, step, phase, op, category), op names and
  reset point, and none dropped events (bench/worker/memtrace.py MAX_TRACE_EVENTS);
- the polynomial through the first ``degree + 1`` shapes gives, for every event, exactly the
  bytes of each further shape (at least one further shape is required: the check).

Anything else (a technique whose op sequence depends on the shape, such as Liger's chunk
count, or whose sizes do not, such as padded batches drawn from a length distribution) is a
``NotExact`` with the first reason found, and the caller simulates instead. The interpolated
trace is the simulated one at the shapes checked; tests/test_fits.py holds it to the byte
against full simulations at shapes that were not sampled.
"""
from __future__ import annotations

from fractions import Fraction

STRUCTURE = ("kind", "serial", "step", "phase", "op", "category", "stream")


class NotExact(ValueError):
    """The traces are not one polynomial family: interpolation would not be exact."""


class AxisFit:
    def __init__(self, base: dict, xs: list[int], ys: list[list[int]]):
        self.base, self.xs, self.ys = base, xs, ys

    @classmethod
    def from_traces(cls, traces: dict[int, dict], degree: int) -> AxisFit:
        xs = sorted(traces)
        if len(xs) < degree + 2:
            raise NotExact(f"{len(xs)} shapes for a degree-{degree} fit: need {degree + 2} (one to check it)")
        base = traces[xs[0]]
        for x in xs:
            t = traces[x]
            if t.get("dropped_events"):
                raise NotExact(f"the trace at {x} dropped {t['dropped_events']} events (over its bound)")
            if t["ops"] != base["ops"] or t.get("reset_at") != base.get("reset_at"):
                raise NotExact(f"the step at {x} runs other ops than at {xs[0]}")
            for col in STRUCTURE:
                if t["columns"].get(col) != base["columns"].get(col):
                    raise NotExact(f"the step at {x} has other {col} events than at {xs[0]} "
                                   f"({len(t['columns']['kind'])} against {len(base['columns']['kind'])} events)")
        fit = cls(base, xs[: degree + 1], [traces[x]["columns"]["bytes"] for x in xs[: degree + 1]])
        for x in xs[degree + 1:]:
            want = traces[x]["columns"]["bytes"]
            got = fit.bytes_at(x)
            if got != want:
                i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
                op = base["ops"][base["columns"]["op"][i]]
                raise NotExact(f"event {i} ({op}) allocates {want[i]} bytes at {x}, not the {got[i]} its "
                               f"degree-{degree} polynomial through {fit.xs} gives")
        return fit

    def bytes_at(self, x: int) -> list[int]:
        """Every event's requested bytes at ``x`` (Lagrange, exact in integers)."""
        weights = []
        for j, xj in enumerate(self.xs):
            w = Fraction(1)
            for k, xk in enumerate(self.xs):
                if k != j:
                    w *= Fraction(x - xk, xj - xk)
            weights.append(w)
        den = 1
        for w in weights:
            den = den * w.denominator // _gcd(den, w.denominator)
        nums = [int(w * den) for w in weights]
        out = []
        for ys in zip(*self.ys):
            total = sum(n * y for n, y in zip(nums, ys))
            q, r = divmod(total, den)
            if r or q < 0:
                raise NotExact(f"the polynomial gives {Fraction(total, den)} bytes at {x}: not a size")
            out.append(q)
        return out

    def at(self, x: int) -> dict:
        """The trace at ``x``: the base trace's events with their bytes at ``x``."""
        cols = dict(self.base["columns"], bytes=self.bytes_at(x))
        return dict(self.base, columns=cols)


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a
