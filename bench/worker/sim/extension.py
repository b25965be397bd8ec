"""The L-layer step from three simulations of k, k + 1 and k + 2 layers: its trace and its
figures extended, and verified exact (bench/worker/sim/layers.py runs the three and calls
``extend``; the trace as events, and the blocks a layer adds: bench/worker/sim/tracecodec.py).

- the allocation trace: each trace is written as events that name no serial (an allocation:
  its serial's distance from the last new serial, bytes, step, phase, op, category; a free:
  which live allocation of the same bytes, op and category it frees: the oldest, or else
  counted from the newest, as a layer frees its own). The k + 1 trace must be the k trace
  with blocks inserted, each a repeat of the events just before it (a layer's, or a layer's
  part, in each stretch of the step that walks the layers); the L trace is the k trace with
  each block inserted L - k times, read back into serials.
- the peaks (overall, per phase, per step, and the categories at each) are the extended trace's,
  recomputed by the tracker's rules (``trace_peaks``, held equal to the tracker's in all three
  simulations): a peak that moves as layers are added is found where the L-layer trace has it;
- every other measured figure (the record fields of the step, FLOPs, the step cost counter's
  tallies, the paged optimizer state, the trace's own counts) must be linear in the layer count
  across k, k + 1, k + 2, or the same in all three, and is extrapolated to L;
  ``trainable_fraction`` is recomputed from the extrapolated counts, as bench/worker/proofs.py
  computes it.

Verified, or ``NotExact``: the extension from (k, k + 1) must give the k + 2 simulation's
trace event for event, and the peaks (overall, per phase, per step, the build's) and the
categories at them, recomputed from a trace by the tracker's rules (``trace_peaks``), must
equal the tracker's in all three simulations; the build's must equal its extrapolation at L.
"""
from __future__ import annotations

from bench.records.record import PHASES
from bench.worker.sim.tracecodec import (COLUMNS, NotExact, decode, encode, first_serial,  # noqa: F401
                                         insertions, load_gap, pump)


# -- the extension -------------------------------------------------------------------------
EXCLUDED = ("load_host_peak_rss_bytes", "host_peak_rss_bytes")  # the worker's RSS: context (bench/records/identical.py)
PEAKS = ("peak_bytes", "breakdown_bytes", "phase_peak_bytes", "step_peak_bytes")  # read off the extended trace


def extend(spec: dict, parts: list[dict], more: int, cuda_model: bool):
    """``measure.Measured`` of the step with ``more`` layers beyond the first part's, from
    three parts of k, k + 1, k + 2 layers; NotExact unless verified."""
    from bench.worker import cuda_alloc
    from bench.worker.sim import measure, stepcost
    rounding = cuda_alloc.round_size if cuda_model else (lambda n: n)
    a, b, c = parts
    trace = extend_trace(a, b, c, more)
    outs = []
    for p in parts:
        out = {k: v for k, v in p["out"].items() if k not in EXCLUDED}
        details = dict(out["details"])
        fraction = details.pop("trainable_fraction", None)
        if fraction != out["params_trainable"] / max(1, out["params_total"]):
            raise NotExact("trainable_fraction is not params_trainable / params_total")
        out["details"] = details
        outs.append(out)
        check_peaks(p["trace"], rounding, p["reset_allocs"], out, p["phases"], "the tracker's", not p["per_rank"])
    # the peaks: the extended trace's, by the tracker's rules (held equal to the tracker's in all three above); a
    # peak that moves as layers are added (activations outgrowing a gather, say) is where the L-layer trace has it
    lin = linear(*({k: v for k, v in o.items() if k not in PEAKS} for o in outs), more, "out")
    reset_allocs = linear(a["reset_allocs"], b["reset_allocs"], c["reset_allocs"], more, "reset_allocs")
    got = trace_peaks(trace, rounding, reset_allocs)
    out = {k: got[k] if k in PEAKS else lin[k] for k in outs[0]}
    if not a["per_rank"] and got["build_peak_bytes"] != out["details"]["build_peak_bytes"]:
        raise NotExact(f"build_peak_bytes from the trace {got['build_peak_bytes']} is not the extrapolated "
                       f"{out['details']['build_peak_bytes']}")
    out["details"]["trainable_fraction"] = out["params_trainable"] / max(1, out["params_total"])
    out["load_host_peak_rss_bytes"] = max(p["out"].get("load_host_peak_rss_bytes") or 0 for p in parts)
    out["host_peak_rss_bytes"] = None  # finish sets it
    phases = got["phases"]
    cost = stepcost.StepCost(spec["knobs"], None)
    if cost.compile:
        raise NotExact("compile's fused byte counts")
    for key, value in linear(a["cost"], b["cost"], c["cost"], more, "step cost").items():
        setattr(cost, key, value)
    flops = linear(a["flops"], b["flops"], c["flops"], more, "flops")
    paged = linear(a["paged"], b["paged"], c["paged"], more, "paged state")
    return measure.Measured(out, phases, flops, _Traced(trace, rounding), cost, paged, cuda_model,
                            rss=max(p["rss"] for p in parts), facts=extend_facts(a["facts"], b["facts"], c["facts"], more))


def extend_facts(a: dict, b: dict, c: dict, more: int) -> dict:
    """The model's facts (bench/worker/sim/measure.py ``model_facts``) with ``more`` layers beyond
    ``a``'s: its gather units are the input embedding, one unit per decoder layer, all alike, and the
    rest, so each part's layer units must be one unit repeated, the same in all three, and the ends
    the same; the largest weight the same; every other figure linear. NotExact otherwise."""
    a, b, c = dict(a), dict(b), dict(c)
    units = [x.pop("units") for x in (a, b, c)]
    numels = extend_numels(*(x.pop("trainable_numels") for x in (a, b, c)), more)
    first, layer, last = units[0][0], units[0][1] if len(units[0]) > 2 else None, units[0][-1]
    for i, u in enumerate(units):
        if len(u) != len(units[0]) + i or u[0] != first or u[-1] != last or any(x != layer for x in u[1:-1]):
            raise NotExact(f"model units: {len(u) - 2} layers are not {len(units[0]) - 2 + i} alike units")
    for key in ("largest_param_bytes",):
        if not a[key] == b[key] == c[key]:
            raise NotExact(f"model {key}: {a[key]}, {b[key]}, {c[key]} differ")
    out = linear(a, b, c, more, "model facts")
    out["units"] = [first, *[layer] * (len(units[0]) - 2 + more), last]
    out["trainable_numels"] = numels
    return out


def extend_numels(a: list, b: list, c: list, more: int) -> list:
    """Each trainable parameter's elements, in order, with ``more`` layers beyond ``a``'s: ``b`` must be
    ``a`` with one layer's parameters inserted, and ``c`` with that layer twice (the layers alike);
    NotExact otherwise."""
    d = len(b) - len(a)
    tail = next((k for k in range(len(a), -1, -1) if a[len(a) - k:] == b[len(b) - k:]), 0)
    cut = len(a) - tail
    layer = b[cut:cut + d]
    if d < 0 or len(c) - len(b) != d or b != a[:cut] + layer + a[cut:] or c != a[:cut] + layer * 2 + a[cut:]:
        raise NotExact("trainable parameters: one more layer does not add one layer's parameters")
    return a[:cut] + layer * more + a[cut:]


class _Traced:
    """What ``simulate.finish`` reads from a tracker, for an extended step: its trace and rounding."""

    def __init__(self, trace: dict, rounding):
        self._trace, self.rounding = trace, rounding

    def trace(self, alloc_conf=None) -> dict:
        return self._trace


def linear(a, b, c, more: int, path: str):
    """``a`` extended by ``more`` layers: each integer linear in a, b, c (one layer apart),
    everything else the same in all three; NotExact otherwise."""
    if not (type(a) is type(b) is type(c)):
        raise NotExact(f"{path}: types differ")
    if isinstance(a, dict):
        if not (list(a) == list(b) == list(c)):
            raise NotExact(f"{path}: keys differ")
        return {k: linear(a[k], b[k], c[k], more, f"{path}.{k}") for k in a}
    if isinstance(a, (list, tuple)):
        if not (len(a) == len(b) == len(c)):
            raise NotExact(f"{path}: lengths differ")
        return type(a)(linear(x, y, z, more, f"{path}[{i}]") for i, (x, y, z) in enumerate(zip(a, b, c)))
    if type(a) is int:
        if b - a != c - b:
            raise NotExact(f"{path}: {a}, {b}, {c} not linear in the layers")
        return a + more * (b - a)
    if a == b == c:
        return a
    raise NotExact(f"{path}: {a!r}, {b!r}, {c!r} differ")


# -- the trace ------------------------------------------------------------------------------
def extend_trace(a: dict, b: dict, c: dict, more: int) -> dict:
    """The trace with ``more`` layers beyond ``a``'s, from the parts' traces; NotExact unless
    ``a`` extended by 2 is ``c`` event for event."""
    from bench.worker.memtrace import MAX_TRACE_EVENTS
    ta, tb, tc = a["trace"], b["trace"], c["trace"]
    for key in ta:
        if key not in ("columns", "reset_at") and not (ta[key] == tb[key] == tc[key]):
            raise NotExact(f"trace {key} differs")
    if ta["dropped_events"] or tb["dropped_events"] or tc["dropped_events"]:
        raise NotExact("truncated traces")
    raw = linear(a["raw_events"], b["raw_events"], c["raw_events"], more, "trace events")
    if raw > MAX_TRACE_EVENTS:
        raise NotExact("the full trace would be truncated")
    ea, eb, ec = encode(ta), encode(tb), encode(tc)
    # the serials before the trace (a rank's build, before its shards are placed) grow with the layers, and so
    # do those of its shards held on the host (fsdp-offload), between the shards placed and the step
    start = linear(first_serial(ta), first_serial(tb), first_serial(tc), more, "trace first serial")
    jump = linear(load_gap(ta), load_gap(tb), load_gap(tc), more, "trace serials after the shards")
    blocks = insertions(ea, eb)
    if blocks is None:
        raise NotExact("the k + 1 trace is not the k trace with repeated blocks inserted")
    if pump(ea, blocks, 2) != ec:
        raise NotExact("the trace extended by 2 layers is not the k + 2 trace")
    if decode(ec, tc["categories"], first_serial(tc), load_gap(tc)) != {
            k: tc["columns"].get(k, [0] * len(tc["columns"]["kind"])) for k in COLUMNS}:
        raise NotExact("the trace does not read back")
    out = dict(ta, columns=decode(pump(ea, blocks, more), ta["categories"], start, jump))
    out["reset_at"] = linear(ta["reset_at"], tb["reset_at"], tc["reset_at"], more, "trace reset_at")
    return out
# -- peaks from a trace, by the tracker's rules ---------------------------------------------
def trace_peaks(trace: dict, rounding, reset_allocs: int) -> dict:
    """The tracker's peaks recomputed from its trace (bench/worker/memtrack.py): the peak after
    the build's reset and the categories live at its first reaching, each phase's peak and its
    categories, each step's peak (from what is live at its start), the build's peak.
    NotExact where the trace cannot say (the peak at the reset itself)."""
    from bench.worker.memtrace import TRACE_PHASES
    col = trace["columns"]
    kind, serial, nbytes, step, phase, cat = (col[k] for k in ("kind", "serial", "bytes", "step", "phase",
                                                              "category"))
    size: dict = {}
    total = allocs = build = at_reset = 0
    peak, peak_at = -1, -1
    phase_peak, phase_at = dict.fromkeys(PHASES, 0), {}
    steps = [None] * trace["steps"]
    current = -1
    for i in range(len(kind)):
        st = step[i]
        while current < st:  # a new step starts from what is live
            current += 1
            if current >= 0:
                steps[current] = total
        if kind[i]:
            n = size[serial[i]] = rounding(nbytes[i])
            total += n
            allocs += 1
            if allocs <= reset_allocs:
                build = max(build, total)
                at_reset = total
            else:
                if total > peak:
                    peak, peak_at = total, i
                name = TRACE_PHASES[phase[i]]
                if name in phase_peak and total > phase_peak[name]:
                    phase_peak[name], phase_at[name] = total, i
            if st >= 0 and total > steps[st]:
                steps[st] = total
        else:
            total -= size.pop(serial[i])
    if peak <= at_reset:
        raise NotExact("the peak is at the build's end")
    steps = [total if s is None else s for s in steps]
    wanted = {peak_at: [], **{i: [] for i in phase_at.values()}}
    live: dict = {}
    cats = trace["categories"]
    for i in range(len(kind)):
        if kind[i]:
            live[serial[i]] = (rounding(nbytes[i]), cat[i])
        else:
            live.pop(serial[i], None)
        if i in wanted:
            by = dict.fromkeys(cats, 0)
            for n, ca in live.values():
                by[cats[ca]] += n
            wanted[i] = by
    empty = dict.fromkeys(cats, 0)
    return {"peak_bytes": peak, "breakdown_bytes": wanted[peak_at], "phase_peak_bytes": phase_peak,
            "phases": {p: wanted[phase_at[p]] if p in phase_at else dict(empty) for p in PHASES},
            "step_peak_bytes": steps, "build_peak_bytes": build}


def check_peaks(trace: dict, rounding, reset_allocs: int, out: dict, phases: dict, whose: str,
                build: bool = True) -> None:
    """The peaks recomputed from ``trace`` must be the record's; ``build``: the build's too (a rank's
    trace starts from its shards: the whole model built before them is not in it, and its build
    peak is held linear with the rest of the record instead)."""
    got = trace_peaks(trace, rounding, reset_allocs)
    want = {"peak_bytes": out["peak_bytes"], "breakdown_bytes": out["breakdown_bytes"],
            "phase_peak_bytes": out["phase_peak_bytes"], "phases": phases,
            "step_peak_bytes": out["step_peak_bytes"]}
    if build:
        want["build_peak_bytes"] = out["details"]["build_peak_bytes"]
    for key, value in want.items():
        if got[key] != value:
            raise NotExact(f"{key} from the trace {got[key]} is not {whose} {value}")
