"""``ft-membench fit ... --dataset FILE``: will this recipe survive an epoch of the user's own data?

    fam, how = answer.family(spec_at, 4, True, samples.run_many, say)      # the step at every width
    doc = answer.epoch_answer(fam, lengths, batches, widths, conf, profile, max_length=4096)
    fixes = answer.remedies(fam, lengths, [(batches, widths)], conf, profile, None, 4096, doc, batch=4)

For one recipe on one GPU, or one rank (bench/dataset/command.py answers each rank with its own
batches): the dataset's token lengths (bench/dataset/lengths.py), the batches in the trainer's own
order (order.py), each step's width (epoch.py), the recipe's step simulated at four lengths and
derived exactly at every width (stairs.py ``Family``), and the caching allocator replayed over the
epoch (bench/estimate/replay.py):

- ``staircase``: the reserved memory after each replayed step (it climbs as longer batches come);
- ``first_oom``: the first step whose allocation fails under the GPU's capacity, with its batch's
  lengths, or None (the epoch survives);
- ``per_step``: the allocated peak of a step at each width (its steady state), as p50 / p99 / max
  over the epoch's steps;
- ``remedies``: judged on every rank, the rank that reserves the most deciding: expandable
  segments, the longest ``max_length`` that survives and how many samples it cuts, packing (the
  recipe's unpadded step at batch x max_length), the trainer's ``group_by_length`` order, and the
  same samples a step in twice the micro-batches.

Sample simulations go through bench/search/sample_cache.py, so a second question on the same recipe
and batch simulates nothing. Torch is imported only for the trainer's order (order.py).
"""
from __future__ import annotations

import time

from bench.dataset import epoch, order
from bench.dataset.stairs import GRID, Family
from bench.estimate import replay, verdicts

SAMPLE_SEQS = (512, 1024, 1536, 2048)   # multiples of 2 x GRID: padding-growing's step 0 is half the length
EXPANDABLE = "expandable_segments:True"


def family(spec_at, batch: int, padded: bool, simulate_many, say) -> tuple[Family, dict]:
    """The recipe's step at ``batch`` over widths, from four simulations: padded batches
    (``padding-growing``), or unpadded ones (batch 1, where one sample has no pad, and packing)."""
    jobs = [(spec_at(s, padded), None) for s in SAMPLE_SEQS]
    t0 = time.monotonic()
    say(f"ft-membench: {jobs[0][0]['cell']}: the step at {len(jobs)} lengths ({', '.join(map(str, SAMPLE_SEQS))}) "
        f"at batch {batch}, to derive it at every width")
    recs = simulate_many(jobs)
    for s, rec in zip(SAMPLE_SEQS, recs):
        if rec.get("status") != "ok" or "_trace" not in rec:
            raise RuntimeError(f"simulation at batch {batch} x {s}: {rec.get('status')}: {rec.get('reason')}")
    fam = Family({s: r["_trace"] for s, r in zip(SAMPLE_SEQS, recs)}, first_scale=2 if padded else 1)
    return fam, {"cell": jobs[0][0]["cell"], "padded": padded, "sample_seqs": list(SAMPLE_SEQS),
                 "simulated": sum(1 for r in recs if "cached" not in r), "s": round(time.monotonic() - t0, 1)}


def _run(fam: Family, widths: list[int], conf, capacity=None) -> dict:
    return replay.replay(fam.epoch(widths), conf, capacity=capacity, points=50)


def capacity(profile: dict, outside: int = 0) -> int:
    """What the allocator may reserve on the card: bench/estimate/verdicts.py's capacity, less memory
    outside PyTorch's allocator (a rank's NCCL buffers, bench/estimate/nccl.py)."""
    return verdicts.capacity(profile) - outside


def epoch_answer(fam: Family, lengths: list[int], batches: list[list[int]], widths: list[int], conf,
                 profile: dict, max_length: int, steps: list[int] | None = None, outside: int = 0) -> dict:
    cap = capacity(profile, outside)
    steps = epoch.replayed(widths) if steps is None else steps
    sub = [widths[k] for k in steps]
    free = _run(fam, sub, conf)
    res = free["step_reserved_peak_bytes"]
    stairs, top = [], 0
    for j, k in enumerate(steps):
        if res[j] > top:
            top = res[j]
            stairs.append({"step": k, "width": widths[k], "reserved_bytes": res[j]})
    oom = None
    if free["reserved_peak_bytes"] > cap:
        failed = _run(fam, sub, conf, capacity=cap)["oom"]
        if failed is not None:
            k = steps[max(failed["step"], 0)]
            oom = {"step": k, "width": widths[k], "lengths": sorted((lengths[i] for i in batches[k]), reverse=True),
                   "op": failed["op"], "bytes": failed["bytes"], "during": "the build" if failed["step"] < 0 else None}
    per_width = _per_width(fam, sorted(set(widths)), conf)
    alloc = [per_width[w]["allocated_bytes"] for w in widths]
    by_step = [{"step": k, "width": widths[k], "reserved_bytes": res[j],
                "allocated_bytes": free["step_allocated_peak_bytes"][j]} for j, k in enumerate(steps)]
    return {"steps": len(widths), "replayed_steps": len(steps), "capacity_bytes": cap, "by_step": by_step,
            "reserved_peak_bytes": free["reserved_peak_bytes"], "allocated_peak_bytes": free["allocated_peak_bytes"],
            "staircase": stairs, "first_oom": oom,
            # as bench/estimate/verdicts.py judges a step: tight = no allocation fails, but only because the
            # allocator released its cache (cudaFree and a synchronize) when the cap was reached
            "verdict": "oom" if oom else "fits" if free["reserved_peak_bytes"] <= cap else "tight",
            "survives": oom is None,
            "per_step_allocated": {"p50": epoch.percentile(alloc, 50), "p99": epoch.percentile(alloc, 99),
                                   "max": max(alloc)},
            "per_width": per_width}


def _per_width(fam: Family, widths: list[int], conf) -> dict:
    """Each width's step as it allocates once the optimizer state exists: the second step of two
    (what a step allocates does not depend on the allocator's state, only what it reserves)."""
    return {w: {"allocated_bytes": _run(fam, [w, w], conf)["step_allocated_peak_bytes"][-1]} for w in widths}


def shortest_cut(fam: Family, lengths: list[int], ranks: list[list[list[int]]], conf, profile, pad_to, max_length: int,
                 outside: int = 0, free: bool = False) -> dict | None:
    """The longest max_length (a multiple of GRID below the asked one) whose epoch fits on every rank
    (``ranks``: each rank's batches): bisection over the candidates, each judged by the epoch's own
    replay at that cut, under one premise: an epoch cut shorter needs no more (every step's width is
    the same or smaller). The answer is a replay that fits, and the candidate above it one that does not."""
    cap = capacity(profile, outside)
    cands = [m for m in range(GRID, max_length, GRID)]   # ascending
    packed = not any(ranks[0])   # packing: every row m tokens
    seen: dict[int, int] = {}

    def reserved(m: int) -> int:
        if m not in seen:
            cut = [min(n, m) for n in lengths]
            every = [[m] * 4] if packed else [epoch.free_widths(cut, b) if free else epoch.padded_widths(cut, b, pad_to)
                                              for b in ranks]
            seen[m] = max(_run(fam, [w[k] for k in epoch.replayed(w)], conf)["reserved_peak_bytes"] for w in every)
        return seen[m]

    lo, hi = -1, len(cands)   # cands[lo] fits (or none), cands[hi] does not (or none beyond)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if reserved(cands[mid]) <= cap:
            lo = mid
        else:
            hi = mid
    if lo < 0:
        return None
    m = cands[lo]
    over = [n - m for n in lengths if n > m]
    return {"max_length": m, "samples_cut": len(over), "tokens_cut": sum(over),
            "tokens_share": sum(over) / max(1, sum(lengths)), "reserved_peak_bytes": reserved(m),
            "replays": len(seen)}


def remedies(fam, lengths, ranks, conf, profile, pad_to, max_length, result, *, batch: int = 1,
             packed_fam=None, seed: int = 42, sampling: str = "random", packed_steps: int | None = None,
             outside: int = 0, accum: int = 1, split: tuple | None = None, free: bool = False) -> list[dict]:
    """What to change, each replayed over the epoch of every rank (``ranks``: each rank's (batches,
    widths)) and judged by the rank that reserves the most: expandable segments, the longest
    max_length that fits, packing (``packed_fam``: the unpadded step at this batch; None when the
    epoch is packed already; ``packed_steps`` a rank's steps then) and the trainer's group_by_length
    order (when the epoch is padded and sampled otherwise), and ``split`` (the recipe with twice the
    micro-batches and its Family): the same samples a step, so the same widths, in smaller micro-batches."""
    out = []
    cap = capacity(profile, outside)

    def worst(every_widths, fam_=fam, conf_=conf) -> dict:
        return max((_run(fam_, [w[k] for k in epoch.replayed(w)], conf_) for w in every_widths),
                   key=lambda r: r["reserved_peak_bytes"])

    judged = lambda change, r, **more: {"change": change, "reserved_peak_bytes": r["reserved_peak_bytes"],  # noqa: E731
                                        "survives": r["reserved_peak_bytes"] <= cap, **more}
    widths = [w for _, w in ranks]
    if conf != EXPANDABLE:
        out.append(judged("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", worst(widths, conf_=EXPANDABLE)))
    if result["verdict"] != "fits":
        cut = shortest_cut(fam, lengths, [b for b, _ in ranks], conf, profile, pad_to, max_length, outside, free)
        out.append({"change": f"max_length {cut['max_length']}" if cut else "a shorter max_length",
                    **(cut or {"survives": False, "why": f"none from {max_length - GRID} down to {GRID} survives"}),
                    **({"survives": True} if cut else {})})
    if packed_fam is not None:
        n, w = packed_steps or epoch.packed_steps(lengths, batch, max_length), -(-max_length // GRID) * GRID
        out.append(judged(f"packing (rows of {max_length} tokens, {n} steps instead of {len(widths[0])})",
                          _run(packed_fam, [w] * 4, conf)))
    if packed_fam is not None and sampling != "group_by_length" and batch > 1:
        grouped = [epoch.padded_widths(lengths, b, pad_to)
                   for b in orders(lengths, batch, seed, "group_by_length", len(ranks), accum)]
        out.append(judged("train_sampling_strategy='group_by_length' (batches of like lengths, the longest first: "
                          f"{sum(map(sum, grouped))} padded tokens a row in all, against {sum(map(sum, widths))})",
                          worst(grouped)))
    if split is not None:
        recipe, split_fam = split
        out.append(judged(f"gradient accumulation over {2 * accum} micro-batches of {batch // (2 * accum)} "
                          f"({recipe}: the same {batch} samples a step)", worst(widths, fam_=split_fam)))
    return out


def orders(lengths, batch: int, seed: int, sampling: str, world_size: int = 1, accum: int = 1) -> list[list[list[int]]]:
    """Each rank's optimizer steps' samples (one list per rank): ``batch`` samples a step, in ``accum``
    micro-batches of ``batch // accum``."""
    micro = order.rank_batches(lengths, batch // accum, world_size, seed=seed, sampling=sampling, accum=accum)
    return [epoch.accumulated(m, accum) for m in micro]
