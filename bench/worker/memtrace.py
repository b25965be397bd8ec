"""What the memory tracker (bench/worker/memtrack.py) reports, read from its state: bytes per
category at the peak, at each phase's peak and on the host, and the allocation trace.

A storage's category, resolved when asked (the run has shown by then which storages were
gradients and optimizer state):

- parameters: storages of model parameters (and of sharded/quantized parameter data)
- gradients: ``.grad`` of model or optimizer parameters
- optimizer: tensors in the optimizer's state, and optimizer-owned master parameters
- activations: allocated during forward and still alive at the peak
- temporaries: allocated during backward or the optimizer step, none of the above
- other: everything else alive (inputs, buffers, anything from before the run)

The allocation trace (``trace()``): every device storage's allocation and free, in order,
with its requested bytes, serial, phase, step, the op that made it (the ATen op in
``__torch_dispatch__``; ``(direct)`` for storages counted outside an op: batches, marked
tensors) and its category (resolved when the trace is taken). Kernel scratch
(``transient``) is an allocation freed at once; an in-place resize is a free and a new
allocation under the same serial. Bounded: the first ``MAX_TRACE_EVENTS`` events are kept,
later ones are dropped and counted (``dropped_events``), so a replay of a truncated trace
covers its beginning only (bench/estimate/replay.py says so in the record). Frees that follow one
another with no allocation between them (in one step and phase) are written in allocation
order (``canonical_frees``): their order changes no peak and leaves the allocator in the same
state, but it is not the process's to choose reproducibly: autocast's cast-weight cache, for
one, is a C++ hash map keyed by tensor address, freed in address-hash order at autocast exit.
"""
from __future__ import annotations

from bench.records.record import CATEGORIES, PHASES

MAX_TRACE_EVENTS = 1_000_000  # about 100 MB of host memory at most; a 7B step takes ~1e5
TRACE_PHASES = ("other", *PHASES)


class TrackerReports:
    """``MemTracker``'s answers (a mixin: it reads the tracker's ``live``, ``peak_live``,
    ``phase_live``, ``host``, ``known``, ``events`` and ``ops``)."""

    def breakdown(self) -> dict[str, int]:
        """Bytes per category at the peak; sums to ``peak``."""
        entries = list(self.live.values()) if self._peak_dirty else self.peak_live
        out = dict.fromkeys(CATEGORIES, 0)
        for serial, nbytes, born in entries:
            out[self._category(serial, born)] += nbytes
        return out

    def phase_breakdown(self) -> dict[str, dict[str, int]]:
        """{phase: bytes per category at that phase's peak}, each summing to phase_peak[phase]."""
        self._snapshot_phase()
        out = {}
        for phase in PHASES:
            cats = dict.fromkeys(CATEGORIES, 0)
            for serial, nbytes, born in self.phase_live.get(phase, []):
                cats[self._category(serial, born)] += nbytes
            out[phase] = cats
        return out

    def host_breakdown(self) -> dict[str, int]:
        """Bytes per category counted on the host now (offloaded storages); zeros omitted."""
        out = dict.fromkeys(CATEGORIES, 0)
        for serial, nbytes, born in self.host.values():
            out[self._category(serial, born)] += nbytes
        return {k: v for k, v in out.items() if v}

    def trace(self, alloc_conf: str | None = None) -> dict:
        """The allocation trace as bench/estimate/replay.py reads it (columns; categories resolved now)."""
        cats = {c: i for i, c in enumerate(CATEGORIES)}
        cols = {k: [] for k in ("kind", "serial", "bytes", "step", "phase", "op", "category", "stream")}
        kind, serial, nbytes, step, phase, op, category, stream = cols.values()
        cat_of: dict[int, int] = {}
        stream_of: dict[int, int] = {}
        for ev in canonical_frees(self.events):
            if ev[0]:
                _, s, n, st, ph, o, sm = ev
                c = cat_of[s] = cats[self._category(s, TRACE_PHASES[ph])]
                stream_of[s] = sm
            else:
                _, s, st, ph = ev
                c = cat_of.get(s)
                if c is None:
                    continue  # freed without a traced allocation (zero bytes, or past the bound)
                n, o, sm = 0, 0, stream_of[s]
            kind.append(ev[0])
            serial.append(s)
            nbytes.append(n)
            step.append(st)
            phase.append(ph)
            op.append(o)
            category.append(c)
            stream.append(sm)
        names = [str(f) for f, _ in sorted(self.ops.items(), key=lambda kv: kv[1])]
        return {"format": "ft-membench-trace/1", "columns": cols, "categories": list(CATEGORIES),
                "phases": list(TRACE_PHASES), "ops": names, "reset_at": self.trace_reset_at,
                "steps": self.step + 1, "alloc_conf": alloc_conf or "",
                "max_events": MAX_TRACE_EVENTS, "dropped_events": self.dropped_events}

    def _category(self, serial: int, born: str) -> str:
        for cat in ("parameters", "gradients", "optimizer"):
            if serial in self.known[cat]:
                return cat
        return {"forward": "activations", "backward": "temporaries", "optimizer": "temporaries"}.get(born, "other")


def canonical_frees(events: list) -> list:
    """``events`` with each run of consecutive frees (same step and phase, no allocation
    between) sorted by serial, i.e. in the order the storages were allocated."""
    out, run = [], []
    for ev in events:
        if ev[0] == 0 and (not run or run[0][2:4] == ev[2:4]):
            run.append(ev)
            continue
        out.extend(sorted(run, key=lambda e: e[1]))
        run = [ev] if ev[0] == 0 else []
        if ev[0]:
            out.append(ev)
    out.extend(sorted(run, key=lambda e: e[1]))
    return out
