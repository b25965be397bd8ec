"""How each claim of report/claims.py is judged: one check function per claim over the long-form
table and the claim's limits, returning one result per mode with evidence (modes are never
pooled: a simulated number does not vote with a measured one). Checks read only the table:
capacities from ``gpu_memory_bytes`` / ``verdict_gpu_memory_bytes``, what a cell ran from its
``knobs`` and shape columns. Torch-free.
"""
from __future__ import annotations

import statistics

from bench.records import record
from bench.cells import techniques
from report import GIB
from report.claim import (HOLDS, NOT, PARTLY, UNMEASURABLE, UNMEASURED, band, by_mode, in_range, lower, overall,
                          per_technique, ratio, result, step)
from report.compare import ok_rows, pairs, without_knob
from report.fmt import analytic_note, details, fmt_gib, jcol, knobs, missing
from report.lookup import step_time_changes


def mixed_precision(df, t):
    found = by_mode([p for name in ("bf16", "amp-bf16", "amp-fp16") for p in pairs(df, name)])
    out = []
    for _mode, prs in found.items():
        evidence, outcomes, per = [], [], []
        for w, wo in prs:
            said, halved = [], []
            for cat, label in (("parameters", "weights"), ("gradients", "gradients")):
                r = ratio(w[f"{cat}_bytes"], wo[f"{cat}_bytes"])
                if r is None:
                    said.append(f"{label}: none live at the peak, not compared")
                    continue
                halved.append(t["halved"][0] <= r <= t["halved"][1])
                said.append(f"{label} {fmt_gib(wo[f'{cat}_bytes'])} → {fmt_gib(w[f'{cat}_bytes'])} GiB (×{r:.2f})")
            if not halved:
                continue
            outcome = HOLDS if len(halved) == 2 and all(halved) else PARTLY if any(halved) else NOT
            outcomes.append(outcome)
            per.append((w["technique"], outcome))
            evidence.append(f"{step(w, wo)}: {'; '.join(said)}")
        if outcomes:
            why = per_technique(per) + "."
            if any(knobs(w).get("precision", "").startswith("amp-") for w, _ in prs):
                why += " Autocast (amp-*) keeps fp32 weights and gradients and casts the compute."
            why += " Gradients count only where live at the peak."
            out.append(result([p[0] for p in prs], overall(outcomes), evidence, why))
    return out


def gc_time(df, t):
    out = []
    for mode, prs in by_mode(pairs(df, "gc")).items():
        noun = "modelled step time" if mode == "sim" else "step time"
        costs, evidence = [], []
        for w, wo in prs:
            if mode == "sim":
                changes = step_time_changes(w, wo)
                cost = statistics.median(changes) if changes else None
            else:
                r = ratio(wo["tokens_per_s"], w["tokens_per_s"])
                cost = None if r is None else (r - 1) * 100
            if cost is None:
                continue
            costs.append(cost)
            evidence.append(f"{step(w, wo)}: {noun} {cost:+.1f}%")
        if costs:
            med = statistics.median(costs)
            why = f"median {noun} change {med:+.1f}%"
            why += (" (the speed model's step time, median over the GPUs both cells have an estimate for: the "
                    "recomputed forward, never FLOPs alone)" if mode == "sim" else
                    " (cpu: small models, and every step carries the memory tracker's overhead)" if mode == "cpu" else "")
            verdict = band(med, t["holds"], t["partly"])
            if mode == "cpu" and abs(med) < t["cpu_noise"]:
                # repeats of one CPU cell spread this much (bench/records/noise.py): a smaller change is no evidence
                verdict = UNMEASURABLE
                why += (f"; within the measured run-to-run noise of CPU timings, ±{t['cpu_noise']:g}% "
                        "(bench/records/noise.py, results/reference/throughput-noise.txt), so it neither confirms nor refutes")
            out.append(result([p[0] for p in prs], verdict, evidence, why))
    return out


def state_dtypes(row) -> str:
    """'float32', 'bfloat16'...: the optimizer states' dtypes a record names ('unknown' if none)."""
    return "+".join(details(row).get("optimizer_state_dtypes") or []) or "unknown"


def adam8bit(df, t):
    found = by_mode([p for name in ("adamw8bit", "paged-adamw8bit") for p in pairs(df, name)])
    out = []
    for _mode, all_prs in found.items():
        # like for like: from fp32 states and from bf16 states are two claims' worth of evidence, never pooled
        by_dtype: dict[str, list] = {}
        for w, wo in all_prs:
            by_dtype.setdefault(state_dtypes(wo), []).append((w, wo))
        for dtype, prs in by_dtype.items():
            out += adam8bit_from(prs, dtype, t)
    return out


def savings(prs, column: str, say) -> tuple[list[float], list[str]]:
    """(percent saved, evidence line) for each (with, without) pair whose ``column`` has a ratio;
    ``say(with, without, ratio)`` words the evidence."""
    saved, evidence = [], []
    for w, wo in prs:
        r = ratio(w[column], wo[column])
        if r is not None:
            saved.append((1 - r) * 100)
            evidence.append(say(w, wo, r))
    return saved, evidence


def adam8bit_from(prs, dtype: str, t) -> list:
    out = []
    if prs:
        saved, evidence = savings(prs, "optimizer_bytes", lambda w, wo, r: (
            f"{step(w, wo)}: optimizer {fmt_gib(wo['optimizer_bytes'])} → "
            f"{fmt_gib(w['optimizer_bytes'])} GiB ({(1 - r) * 100:.1f}% saved)"))
        if saved:
            med = statistics.median(saved)
            out.append(result([p[0] for p in prs], band(med, t["holds"], t["partly"]), evidence,
                              f"from {dtype} states: median saving {med:.1f}% of the optimizer category at the "
                              "peak (pairs from other state dtypes are judged in their own row)"))
    return out


def precision_only(k: dict) -> bool:
    """The knobs are the baseline's (torch AdamW, no sharding, ...) but for the precision."""
    return bool(k) and all(k.get(n) == v for n, v in techniques.DEFAULT_KNOBS.items() if n != "precision")


def adam_vs_fp16(df, t):
    out = []
    for _mode, rows in ok_rows(df).groupby("mode", sort=False):
        evidence, outcomes, used = [], [], []
        for _, r in rows.iterrows():
            if not precision_only(knobs(r)):
                continue
            n = r["params_trainable"] if not missing(r["params_trainable"]) and r["params_trainable"] > 0 else r["params_total"]
            x = ratio(r["optimizer_bytes"], None if missing(n) else 2 * n)
            if x is None or r["optimizer_bytes"] == 0:
                continue
            dtypes = "/".join(details(r).get("optimizer_state_dtypes") or []) or "dtype not recorded"
            outcomes.append(HOLDS if t["holds"][0] <= x <= t["holds"][1] else NOT)
            used.append(r)
            evidence.append(f"{r['model']} {r['technique']} (states {dtypes}): optimizer {fmt_gib(r['optimizer_bytes'])} GiB"
                            f" = {x:.2f} × fp16 weights ({n / 1e6:,.1f} M params × 2 bytes)")
        if used:
            out.append(result(used, overall(outcomes), evidence,
                              "AdamW keeps two states per parameter in the states' dtype: 2 × 4 bytes in fp32 "
                              "(4× the fp16 weights), 2 × 2 bytes in bf16 (2×)"))
    return out


def transformers_major(row) -> int | None:
    version = (jcol(row, "versions") or {}).get("transformers")
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def low_cpu_mem(df, t):
    out = []
    for _mode, prs in by_mode(pairs(df, "low-cpu-mem-usage", "ckpt-load")).items():
        ignored = sorted({(jcol(w, "versions") or {}).get("transformers") for w, _ in prs
                          if (transformers_major(w) or 0) >= t["ignored_from_major"]})
        if ignored:
            out.append(result([p[0] for p in prs], UNMEASURABLE,
                              [f"{step(w, wo)}: transformers {(jcol(w, 'versions') or {}).get('transformers')}"
                               for w, wo in prs],
                              f"transformers {', '.join(ignored)} accepts low_cpu_mem_usage and drops it (it always "
                              "loads lazily): both cells load the same way, so the flag cannot be measured here"))
            continue
        saved, evidence = savings(prs, "load_host_peak_rss_bytes", lambda w, wo, r: (
            f"{step(w, wo)}: host peak RSS after loading {fmt_gib(wo['load_host_peak_rss_bytes'])} → "
            f"{fmt_gib(w['load_host_peak_rss_bytes'])} GiB ({lower(1 - r)})"))
        if saved:
            med = statistics.median(saved)
            out.append(result([p[0] for p in prs], band(med, t["holds"], t["partly"]), evidence,
                              f"median {lower(med / 100)} than loading the same checkpoint without it "
                              "(one process each: RSS includes the interpreter and libraries)"))
    return out


def capacities(row) -> dict[str, int]:
    """{gpu: bytes} the row's numbers are set against: the GPUs a sim cell was judged for, or
    the device a measured cell ran on (from the record, never from a GPU file)."""
    if row["mode"] == "sim":
        caps = jcol(row, "verdict_gpu_memory_bytes")
        return {g: b for g, b in caps.items() if isinstance(b, int)} if isinstance(caps, dict) else {}
    return {} if missing(row["gpu_memory_bytes"]) else {row["gpu"]: int(row["gpu_memory_bytes"])}


def model_sizes(df) -> dict[str, int]:
    """{model: parameter count}: the largest ``params_total`` of the model's ok rows. A QLoRA
    cell counts its NF4 weights as packed storage (two per byte), about half the model, so the
    model's size comes from its unquantized cells when the run has any."""
    ok = ok_rows(df)
    return {m: int(n) for m, n in ok.groupby("model")["params_total"].max().items() if not missing(n)} if len(ok) else {}


def qlora_70b(df, t):
    out = []
    big, sizes = ok_rows(df), model_sizes(df)
    if len(big):
        big = big[big.apply(lambda r: knobs(r).get("adapter") == "qlora"
                            and in_range(sizes.get(r["model"]), [b * 1e9 for b in t["params_b"]]), axis=1).astype(bool)]
    rank = {"fits": HOLDS, "tight": PARTLY, "oom": NOT}
    for mode, rows in big.groupby("mode", sort=False):
        evidence, outcomes = [], []
        for _, r in rows.iterrows():
            gpus = [g for g, b in capacities(r).items() if in_range(b / GIB, t["gpu_gib"])]
            seen = {g: v for g, v in (jcol(r, "verdicts") or {}).items() if g in gpus} if mode == "sim" \
                else dict.fromkeys(gpus, "fits")
            if not seen:
                continue
            outcomes += [rank.get(v, NOT) for v in seen.values()]
            evidence.append(f"{r['model']} {r['technique']} (batch {r['batch_size']} × seq {r['seq_len']}): peak "
                            f"{fmt_gib(r['peak_bytes'])} GiB; " + ", ".join(f"{g}: {v}" for g, v in seen.items()))
        if outcomes:
            best = HOLDS if HOLDS in outcomes else PARTLY if PARTLY in outcomes else NOT
            out.append(result([r for _, r in rows.iterrows()], best, evidence,
                              f"holds if some QLoRA combination fits a {t['gpu_gib'][0]:g}-{t['gpu_gib'][1]:g} GiB "
                              "card ('tight': only by releasing the allocator's cache, partly)"))
    return out


def zero3_linear(df, t):
    out = []
    rows = ok_rows(df)
    rows = rows[rows.apply(lambda r: knobs(r).get("dist") == "zero3", axis=1).astype(bool)] if len(rows) else rows
    for _mode, mrows in rows.groupby("mode", sort=False):
        evidence, outcomes, analytic, used = [], [], [], []
        for (model, _gpu, rest), g in mrows.groupby(
                [mrows["model"], mrows["gpu"], mrows["technique"].map(lambda x: without_knob(x, "world_size"))]):
            by_n = {int(r["world_size"]): r for _, r in g.iterrows()}
            if 1 not in by_n or len(by_n) < 2:
                continue
            one = by_n[1]
            found = []
            for n in sorted(k for k in by_n if k > 1):
                r = by_n[n]
                peak_x = ratio(per_gpu_peak(r), per_gpu_peak(one))
                states_x = ratio(states(r), states(one))
                if peak_x is None or states_x is None:
                    continue
                found.append((n, peak_x, states_x))
                evidence.append(f"{model} {rest} w1 → w{n}: per-GPU peak {fmt_gib(per_gpu_peak(one))} → "
                                f"{fmt_gib(per_gpu_peak(r))} GiB (×{peak_x:.2f}, linear ×{1 / n:.2f}); "
                                f"model states ×{states_x:.2f}" + (" [analytic]" if analytic_note(r) else ""))
            if not found:
                continue
            used += list(by_n.values())
            if any(analytic_note(r) for r in by_n.values()):
                analytic.append(model)
                continue
            outcomes.append(zero3_outcome(found, t))
        if not used:
            continue
        if outcomes:
            why = "model states (parameters + gradients + optimizer) shard by N; activations and temporaries do not"
            out.append(result(used, overall(outcomes), evidence, why))
        else:
            out.append(result(used, UNMEASURED, evidence,
                              "analytic: this mode divides model states by N by formula (details.zero_partitioning), "
                              "so agreement is by construction; cpu/cuda cells at several world sizes measure it"))
    return out


def zero3_outcome(found: list[tuple[int, float, float]], t: dict) -> str:
    """From (N, peak ratio, model-states ratio) against N=1: linear means ratio × N within t["linear"]."""
    linear = lambda x, n: t["linear"][0] <= x * n <= t["linear"][1]  # noqa: E731
    if all(linear(peak, n) for n, peak, _ in found):
        return HOLDS
    if all(linear(st, n) for n, _, st in found) or all(peak < t["falls"] for _, peak, _ in found):
        return PARTLY
    return NOT


def per_gpu_peak(r):
    ranks = details(r).get("ranks")
    peaks = [x.get("peak_bytes") for x in ranks if isinstance(x, dict)] if isinstance(ranks, list) else []
    peaks = [p for p in peaks if isinstance(p, (int, float))]
    return max(peaks) if peaks else r["peak_bytes"]


def states(r):
    vals = [r[f"{c}_bytes"] for c in record.MODEL_STATES]
    return None if any(missing(v) for v in vals) else sum(int(v) for v in vals)


def spread(peaks: list) -> tuple[float, int]:
    """(max/min - 1 over the steps after the first, times the running max rose after step 2)."""
    tail = peaks[1:] if len(peaks) > 2 else peaks
    rises = sum(1 for i in range(1, len(tail)) if tail[i] > max(tail[:i]))
    return max(tail) / min(tail) - 1, rises


def padding_steps(df, t):
    out = []
    partner = {w["cell"]: wo for w, wo in pairs(df, "padding", "packing")}
    rows = ok_rows(df)
    rows = rows[rows.apply(lambda r: knobs(r).get("batching") == "padding", axis=1).astype(bool)] if len(rows) else rows
    for _mode, mrows in rows.groupby("mode", sort=False):
        evidence, outcomes, used = [], [], []
        for _, r in mrows.iterrows():
            peaks = [p for p in (jcol(r, "step_peak_bytes") or []) if isinstance(p, (int, float)) and p > 0]
            if len(peaks) < 2:
                continue
            s, rises = spread(peaks)
            line = f"{r['model']} {r['technique']}: per-step peaks {', '.join(fmt_gib(p) for p in peaks)} GiB " \
                   f"(spread {s * 100:.1f}%, running max rose {rises}× after step 2)"
            outcome = NOT if s < t["spread"] else HOLDS if rises else PARTLY
            other = partner.get(r["cell"])
            other_peaks = [p for p in (jcol(other, "step_peak_bytes") or []) if p] if other is not None else []
            if len(other_peaks) >= 2:
                s2, _ = spread(other_peaks)
                line += f"; {other['technique']}: {', '.join(fmt_gib(p) for p in other_peaks)} GiB (spread {s2 * 100:.1f}%)"
                if outcome == HOLDS and s2 > s * t["packing_share"]:
                    outcome = PARTLY
            outcomes.append(outcome)
            used.append(r)
            evidence.append(line)
        if used:
            out.append(result(used, overall(outcomes), evidence,
                              "each padded batch is as long as its longest sample, so a step's peak follows it; "
                              "packed rows are always full"))
    return out


def lora_states(df, t):
    out = []
    for _mode, prs in by_mode(pairs(df, "lora")).items():
        saved, evidence = [], []
        for w, wo in prs:
            a = sum(int(w[f"{c}_bytes"]) for c in ("gradients", "optimizer") if not missing(w[f"{c}_bytes"]))
            b = sum(int(wo[f"{c}_bytes"]) for c in ("gradients", "optimizer") if not missing(wo[f"{c}_bytes"]))
            if b == 0:
                continue
            saved.append((1 - a / b) * 100)
            evidence.append(f"{step(w, wo)}: gradients + optimizer {fmt_gib(b)} → {fmt_gib(a)} GiB "
                            f"({(1 - a / b) * 100:.1f}% saved)")
        if saved:
            med = statistics.median(saved)
            out.append(result([p[0] for p in prs], band(med, t["holds"], t["partly"]), evidence,
                              f"median saving {med:.1f}% of gradients + optimizer at the peak"))
    return out
