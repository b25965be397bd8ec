"""How far can I go on this card? The largest shapes that fit, searched over the simulation.

    python -m bench.search.fits --matrix matrix/default.yaml --cell CELL --out results/fits/CELL.json [--jobs 2]
    python -m bench.search.fits --collect results/fits/*.json --matrix matrix/default.yaml --out results/fits.csv

Torch-free. For one sim cell (a model x technique of a sim study) and every GPU it is judged
against, two answers:

- the largest sequence length at batch 1 that fits, on a grid of ``RESOLUTION_TOKENS``
  (multiples of 256 tokens) up to ``seq_limit`` (the model's context length, at most
  ``SEQ_LIMIT``);
- the largest batch at the study's sequence length that fits, on a grid of the technique's
  micro-batch count (1 unless gradient accumulation splits it) up to ``BATCH_LIMIT``.

"Fits" is the verdict rule in force (bench/estimate/verdicts.py; on several GPUs, NCCL's buffers off
each GPU's capacity, bench/estimate/nccl.py); each answer keeps its evidence
(the modelled reserved peak at the answer and at the next grid step up); past the limit it is
``beyond``, below the smallest shape ``none``; an exact search whose budget ran out between two
shapes is ``bracketed`` (at least one, below the other). How it is fast and still exact: the
traces of one model x technique are one polynomial family in each axis (bench/estimate/interp.py),
so up to seven simulations give every shape's trace exactly, checked at a shape not used for the
fit, and each candidate is one replay serving every GPU; where the check fails the axis is
searched by full simulations within ``EXACT_BUDGET``. docs/fits.md says more.

Not searched, each an ``error`` row with its reason: skipped cells, workloads other than
training (generation and vLLM have their own planners), padded batches (their widths are
drawn from a length distribution: no polynomial family).

Sharded cells on several GPUs (FSDP2 with or without CPU offload, FSDP1, DeepSpeed ZeRO-1/2/3 with or
without offload) are simulated as their peak rank runs them (bench/worker/sim/rankgroup.py) and searched
as any cell (samples skip the single-process cross-check), in the matrix as in the CLI: what is searched
depends on the cell, never on how long the machine took. A ZeRO cell on one GPU is partitioned by formula from
the single-process trace: that trace is interpolated as any cell's, and the record's per-rank rule
(``details.per_rank_rule``, bench/estimate/partition.py) applied to it gives each shape's per-rank
peak, the same rule the cell's own record was made with; where interpolation is not exact, each
shape is a full simulation, at most ``DIST_BUDGET`` per axis.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bench.estimate import nccl, replay, verdicts
from bench.records import atomic, checks
from bench.search.fits_csv import BATCH_LIMIT, RESOLUTION_TOKENS, collect, row, seq_limit
from bench.search.shapes import SearchError, Shapes, by_formula, judged_bytes

EXACT_BUDGET = 6  # full simulations per axis where interpolation is not exact
DIST_BUDGET = 12  # full simulations per axis for a ZeRO/FSDP cell (bisection over a 512-point grid: 11)


def not_searched(spec: dict) -> str | None:
    """Why this cell gets no search (an ``error`` row), or None: from the cell alone, so the matrix and the
    CLI search the same cells on any machine under any load."""
    if spec["mode"] != "sim":
        return f"a {spec['mode']} cell: searches run over the simulation only"
    if spec["skip_reason"]:
        return f"the cell is skipped: {spec['skip_reason']}"
    if spec["knobs"].get("workload", "train") != "train":
        return f"not a training workload ({spec['knobs']['workload']}): its memory is planned, not searched"
    if spec["knobs"]["batching"] in ("padding", "padding-growing"):
        return (f"{spec['knobs']['batching']} batches: each step's width is drawn from a length distribution "
                "that changes with the sequence length, so the step's sizes are not one polynomial family and an "
                "exact search would simulate every shape it judges; not searched")
    return None


def _largest(peak_at, n: int, caps: dict[str, int]) -> dict[str, tuple]:
    """{gpu: (k or None, 'fits'|'beyond'|'none')}: the largest k in 1..n with peak_at(k) <= cap,
    peaks being monotone in k; bisection per GPU over one shared cache of peaks; (k_fits,
    'bracketed', k_not) where ``peak_at``'s budget ran out (SearchError) between the two."""
    seen: dict[int, int] = {}

    def at(k):
        if k not in seen:
            seen[k] = peak_at(k)
        return seen[k]

    out = {}
    for gpu, cap in sorted(caps.items(), key=lambda kv: kv[1]):
        try:
            out[gpu] = _bisect(at, seen, n, cap)
        except SearchError:
            # a bracket found is the answer ("at least 11264, below 12288"), never nothing
            lo = max((k for k, p in seen.items() if p <= cap), default=None)
            hi = min((k for k, p in seen.items() if p > cap and (lo is None or k > lo)), default=None)
            if lo is None or hi is None:
                raise
            out[gpu] = (lo, "bracketed", hi)
    return out


def _bisect(at, seen: dict, n: int, cap: int) -> tuple:
    if at(1) > cap:
        return (None, "none")
    above = [k for k, p in seen.items() if p > cap]
    if not above and at(n) <= cap:
        return (n, "beyond")
    hi = min(above or [n])
    lo = max(k for k, p in seen.items() if p <= cap and k < hi)  # 1 at least: at(1) <= cap < at(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid) <= cap:
            lo = mid
        else:
            hi = mid
    return (lo, "fits")


def seq_points(study_seq: int, limit: int) -> list[int]:
    """Four grid lengths to fit (three) and check (one): the smallest (whether anything fits at
    all) and the study's among them, within the limit where it allows four."""
    r = RESOLUTION_TOKENS
    base = max(r, study_seq // r * r)
    cand = [r, base, base // 2, base * 2, base // 4, base * 3, base * 4, *range(2 * r, 8 * r, r)]
    out = []
    for s in cand:
        s = s // r * r
        if r <= s <= max(limit, base) and s not in out:
            out.append(s)
    return sorted(out[:4])


def search(spec: dict, simulate, log_dir=None, reuse: tuple[dict, int] | None = None, simulate_many=None,
           say=None) -> dict:
    """Rows of results/fits.csv for ``spec`` (one per GPU it is judged against) and the
    evidence behind them. ``simulate(spec, log_path) -> record`` (with ``_trace``) runs one
    shape; ``simulate_many([(spec, log_path), ...]) -> records`` runs several at once (the
    sample shapes are known up front); ``reuse``: (trace, reserved) of the cell at its own
    shape, already simulated; ``say``: a line per simulation with the time left (bench/search/progress.py)."""
    t0 = time.monotonic()
    gpus = spec["verdict_gpus"] or {}
    why = not_searched(spec)
    if why:
        return {"rows": [row(spec, g, {}, reason=why) for g in gpus], "simulated": [], "s": 0.0}
    accum = spec["knobs"]["accum"]
    shapes = Shapes(spec, simulate, log_dir, simulate_many, say)
    if reuse is not None:
        shapes.add(spec["batch_size"], spec["seq_len"], *reuse)
    outside = {g: v["bytes"] for g, v in nccl.by_gpu(spec.get("world_size") or 1, gpus).items()}  # a rank's NCCL buffers
    caps = {g: verdicts.capacity(p, outside.get(g, 0)) for g, p in gpus.items()}
    s_limit = seq_limit(spec)
    r = RESOLUTION_TOKENS
    try:
        seqs = seq_points(spec["seq_len"], s_limit)
        study = (accum, spec["seq_len"])
        # the seq axis is first fitted as a line through three of its lengths, the fourth simulated
        # only where that line does not check out (``seq_axis``)
        line = [(accum, s) for s in line_lengths(seqs, spec["seq_len"])]
        batch = [(accum * k, spec["seq_len"]) for k in (2, 3, 4)]
        points = [study] + [p for p in line + batch if p != study]
        # the smallest shape first (with one more, for a second core): if it fits no GPU, nothing does
        first = [(accum, r)] + [p for p in points if p not in shapes.traces and p != (accum, r)][:1]
        shapes.pace.plan(len({*first, *points} - set(shapes.traces)))
        shapes.prefetch(first)
        if shapes.reserved[(accum, r)] > max(caps.values(), default=0):
            return _none_rows(spec, gpus, shapes, t0)
        shapes.prefetch(points)
        seq_axis(shapes, line, [(accum, s) for s in seqs])
        # from batch 2 up: batch 1's step has a few events of its own (tests/test_fits.py), and a
        # line through it failed the structure check in every search of the default matrix
        shapes.axis("batch", batch, degree=1)
        plan, failed = {}, {}
        for name in ("seq", "batch"):
            n = s_limit // r if name == "seq" else BATCH_LIMIT // accum
            shape = (lambda k: (accum, k * r)) if name == "seq" else (lambda k: (k * accum, spec["seq_len"]))
            if shapes.fits[name] is None:
                _budget(shapes, name, DIST_BUDGET if by_formula(spec) else EXACT_BUDGET)
            try:
                plan[name] = (_largest(lambda k, s=shape, a=name: shapes.peak(*s(k), a), n, caps), shape, n)
            except SearchError as exc:  # this axis goes unanswered, with its reason; the other still stands
                failed[name] = str(exc)
        if not plan:
            raise SearchError("; ".join(failed.values()))
        rows = [row(spec, gpu, _evidence(shapes, plan, gpu, accum), reason="; ".join(failed.values()),
                    how=_how(shapes)) for gpu in gpus]
    except SearchError as exc:
        return {"rows": [row(spec, g, {}, reason=str(exc)) for g in gpus], "simulated": shapes.simulated,
                "not_exact": shapes.why_not, "shapes_judged": len(shapes.reserved),
                "s": round(time.monotonic() - t0, 2)}
    # shapes_judged: every shape whose peak the search needed (a full simulation each, without
    # interpolation); simulated: the ones it did simulate
    return {"rows": rows, "simulated": shapes.simulated, "not_exact": shapes.why_not,
            "shapes_judged": len(shapes.reserved), "s": round(time.monotonic() - t0, 2)}


def line_lengths(seqs: list[int], study_seq: int) -> list[int]:
    """The three of the sorted grid lengths ``seqs`` that ``seq_axis`` first fits as a line: the
    shortest, the study's own length where it lies between (its trace is the cell's, already
    simulated; else the longer of the two between) and the longest, where the quadratic is checked
    too. All of them where there are three or fewer."""
    if len(seqs) <= 3:
        return list(seqs)
    return [seqs[0], study_seq if study_seq in seqs[1:-1] else seqs[-2], seqs[-1]]


def seq_axis(shapes: Shapes, line: list, points: list) -> None:
    """Fit the seq axis as a line through the two shortest shapes of ``line``, checked at its
    longest; where that does not check out, as the quadratic through the three shortest of
    ``points`` checked at the fourth (the shape of ``points`` not in ``line`` simulated now).
    Both are checked equally far out, under one premise: a step's requested bytes are at most
    quadratic in the length (bench/estimate/interp.py). Under it a line through two lengths that
    also gives every event of a third is the family: a quadratic term would leave a difference
    from the line of degree 2 with three roots. So where the line checks out the answers are the
    quadratic's, with a simulation fewer; where it does not (eager attention's L x L scores), the
    quadratic runs as it always did."""
    shapes.axis("seq", line, degree=1)
    if shapes.fits["seq"] is not None or line == points:
        return
    shapes.why_not.pop("seq")  # where the quadratic fails too, its reason is the row's, as it always was
    shapes.pace.plan(shapes.pace.count + sum(1 for p in points if p not in shapes.traces))
    shapes.axis("seq", points, degree=2)


def _evidence(shapes: Shapes, plan: dict, gpu: str, accum: int) -> dict:
    """One GPU's answers and their evidence: the peak at the answer and at the next grid step."""
    vals = {}
    for name in plan:  # an axis not in the plan stays "error" (its reason is the row's)
        answers, shape, n = plan[name]
        k, answer, *below = answers[gpu]
        unit = RESOLUTION_TOKENS if name == "seq" else accum
        vals[f"{name}_answer"] = answer
        vals["max_seq_at_batch1" if name == "seq" else "max_batch_at_seq"] = k * unit if k else None
        vals[f"{name}_below"] = below[0] * unit if below else None
        nxt = below[0] if below else k + 1 if k else 1  # bracketed: the shape known not to fit
        vals[f"peak_at_max_{name}_bytes"] = shapes.peak(*shape(k), name) if k else None
        vals[f"peak_at_next_{name}_bytes"] = shapes.peak(*shape(nxt), name) if nxt <= n else None
    return vals


def _none_rows(spec: dict, gpus: dict, shapes: Shapes, t0: float) -> dict:
    """Rows for a cell whose smallest shape fits none of its GPUs (monotone peaks: no shape does)."""
    r = RESOLUTION_TOKENS
    at_min = shapes.reserved[(spec["knobs"]["accum"], r)]
    at_batch1 = shapes.reserved.get((spec["knobs"]["accum"], spec["seq_len"]))
    vals = {"seq_answer": "none", "batch_answer": "none", "peak_at_next_seq_bytes": at_min,
            "peak_at_next_batch_bytes": at_batch1}
    how = f"the smallest shape (batch 1 x {r} tokens) fits none of these GPUs; {len(shapes.simulated)} simulations"
    return {"rows": [row(spec, g, vals, how=how) for g in gpus], "simulated": shapes.simulated, "not_exact": {},
            "shapes_judged": len(shapes.reserved), "s": round(time.monotonic() - t0, 2)}


def _budget(shapes: Shapes, name: str, budget: int = EXACT_BUDGET) -> None:
    """Full simulations instead of interpolation, at most ``budget`` more for this axis."""
    start = len(shapes.simulated)
    shapes.pace.plan(shapes.pace.count + budget, at_most=True)

    def sim(batch, seq):  # the class's own trace, not an earlier axis's counted one: each axis its own budget
        return Shapes.trace(shapes, batch, seq)

    def counted(batch, seq):
        if (batch, seq) not in shapes.traces and len(shapes.simulated) - start >= budget:
            raise SearchError(f"{name} axis: interpolation not exact ({shapes.why_not[name]}) and an exact "
                              f"search needs more than {budget} simulations")
        return sim(batch, seq)
    shapes.trace = counted


def _how(shapes: Shapes) -> str:
    parts = []
    for name in ("seq", "batch"):
        if shapes.fits.get(name) is not None:
            xs = shapes.fits[name].xs
            parts.append(f"{name}: traces interpolated exactly from simulations at {xs} (checked at one more)")
        else:
            parts.append(f"{name}: full simulations ({shapes.why_not.get(name, '')})")
    n = sum(1 for e in shapes.simulated if not e.get("reused"))
    return f"{'; '.join(parts)}; {n} simulations"


# -- command line ---------------------------------------------------------------------------

def _reuse(spec: dict, results: Path):
    """The cell's own trace and reserved peak from its run, when made from the same inputs."""
    cell = results / "cells" / f"{spec['cell']}.json"
    trace = results / "traces" / f"{spec['cell']}.json.gz"
    if not (cell.is_file() and trace.is_file()):
        return None
    try:
        doc = json.loads(cell.read_text())
        rec = doc.get("benchmarks", [{}])[0].get("extra_info", doc) if "benchmarks" in doc else doc
        if not isinstance(rec, dict) or rec.get("status") != "ok" or checks.gate(rec, spec):
            return None
        return replay.load(trace), judged_bytes(rec)
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def run_cell(spec: dict, out: Path, results: Path = Path("results"), jobs: int = 1) -> dict:
    """Search ``spec`` and write ``out``. Inside a workflow run the simulations go to its warm
    engine (bench/runner/simengine.py, $FT_MEMBENCH_SIM_ENGINE) when it takes this code's cells,
    else to ``jobs`` warm servers of this search's own (bench/search/simpool.py): the same records
    either way."""
    import os

    from bench.runner.simengine import ENV, EnginePool
    from bench.search.simpool import SimPool
    with EnginePool(os.environ.get(ENV), jobs, lambda: SimPool(jobs)) as pool:
        trace, judged = _reuse(spec, results) or (None, None)
        doc = search(spec, pool.run_cell, log_dir=results / "logs" / "fits" / spec["cell"],
                     reuse=(trace, judged) if trace is not None else None, simulate_many=pool.run_many,
                     say=lambda m: print(m, file=sys.stderr, flush=True))
    from bench.records import reuse
    doc.update(cell=spec["cell"], inputs_sha256=spec["inputs_sha256"], versions=reuse.versions())
    atomic.write_json(out, doc)
    return doc


def main(argv=None) -> int:
    from bench.cells import matrix
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", default=str(matrix.DEFAULT_MATRIX))
    ap.add_argument("--cell", help="search this sim cell and write --out (JSON)")
    ap.add_argument("--collect", nargs="*", help="per-cell JSON files to gather into --out (CSV)")
    ap.add_argument("--results", default="results")
    ap.add_argument("--jobs", type=int, default=1, help="simulations at once (one warm worker each)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    cells = matrix.load(args.matrix)
    if args.collect is not None:
        n = collect(args.collect, cells, Path(args.out), say=lambda m: print(m, file=sys.stderr))
        print(f"{args.out}: {n} rows")
        return 0
    if args.cell not in cells:
        print(f"bench.search.fits: unknown cell {args.cell!r} in {args.matrix}", file=sys.stderr)
        return 2
    try:
        doc = run_cell(cells[args.cell], Path(args.out), Path(args.results), args.jobs)
    except OSError as exc:  # a full disk or an unwritable folder: one line naming the path (atomic.py's words)
        print(f"bench.search.fits: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"cell": args.cell, "s": doc["s"], "simulated": len(doc["simulated"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
