"""Claims checked: the quantitative statements of common fine-tuning advice, set against this run.

Each claim is one entry of ``CLAIMS``: the statement, the thresholds its check applies (shown
on the page), the cells that would measure it, and a check function over the long-form table.
A check returns one result per mode that has evidence (modes are never pooled: a simulated
number does not vote with a measured one); each result holds the evidence lines, a verdict
(holds | partly | does not hold | not measured here) and why. A claim with no evidence in any
mode gets one "not measured here" row naming the cells that would measure it.
"""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from report import GIB
from report.compare import WORLD, knobs_of, number_in, ok_rows, pairs, parts, without
from report.fmt import DASH, analytic_note, details, fmt_gib, jcol, missing, provenance

HOLDS, PARTLY, NOT, UNMEASURED = "holds", "partly", "does not hold", "not measured here"
GPUS_YAML = Path(__file__).resolve().parents[1] / "matrix" / "gpus.yaml"
MAX_LINES = 8


@dataclass(frozen=True)
class Claim:
    key: str
    statement: str
    thresholds: str
    needs: str
    check: Callable[[pd.DataFrame], list]


# ---- helpers ----

def result(rows, verdict: str, evidence: list[str], why: str) -> dict:
    rows = list(rows)
    return {"mode": rows[0]["mode"], "provenance": ", ".join(dict.fromkeys(provenance(r) for r in rows)),
            "verdict": verdict, "evidence": capped(evidence), "why": why,
            "models": sorted({r["model"] for r in rows}), "cells": [r["cell"] for r in rows]}


def capped(lines: list[str]) -> list[str]:
    return lines if len(lines) <= MAX_LINES else lines[:MAX_LINES] + [f"… and {len(lines) - MAX_LINES} more"]


def by_mode(pair_list):
    """{mode: [(with, without), ...]} in the record's mode order."""
    out: dict[str, list] = {}
    for w, wo in pair_list:
        out.setdefault(w["mode"], []).append((w, wo))
    return out


def band(value: float, holds: tuple, partly: tuple) -> str:
    """HOLDS if value is in the closed range ``holds``, PARTLY if in ``partly``, else NOT."""
    if holds[0] <= value <= holds[1]:
        return HOLDS
    return PARTLY if partly[0] <= value <= partly[1] else NOT


def overall(outcomes: list[str]) -> str:
    """All hold: holds; none holds or partly: does not hold; anything between: partly."""
    if outcomes and all(o == HOLDS for o in outcomes):
        return HOLDS
    return NOT if all(o == NOT for o in outcomes) else PARTLY


def ratio(a, b):
    return None if missing(a) or missing(b) or float(b) == 0 else float(a) / float(b)


def lower(fraction: float) -> str:
    return f"{fraction * 100:.1f}% lower" if fraction >= 0 else f"{-fraction * 100:.1f}% higher"


def step(w, wo) -> str:
    return f"{w['model']}: {wo['technique']} → {w['technique']}"


def per_technique(items: list[tuple[str, str]]) -> str:
    """'bf16: holds; amp-bf16: does not hold' from (technique, outcome) pairs."""
    seen: dict[str, list] = {}
    for tech, outcome in items:
        seen.setdefault(tech, [])
        if outcome not in seen[tech]:
            seen[tech].append(outcome)
    return "; ".join(f"{t}: {' / '.join(o)}" for t, o in seen.items())


# ---- the checks ----

def mixed_precision(df):
    found = by_mode([p for name in ("bf16", "amp-bf16", "amp-fp16") for p in pairs(df, name)])
    out = []
    for mode, prs in found.items():
        evidence, outcomes, per = [], [], []
        for w, wo in prs:
            said, halved = [], []
            for cat, label in (("parameters", "weights"), ("gradients", "gradients")):
                r = ratio(w[f"{cat}_bytes"], wo[f"{cat}_bytes"])
                if r is None:
                    said.append(f"{label}: none live at the peak, not compared")
                    continue
                halved.append(0.4 <= r <= 0.6)
                said.append(f"{label} {fmt_gib(wo[f'{cat}_bytes'])} → {fmt_gib(w[f'{cat}_bytes'])} GiB (×{r:.2f})")
            if not halved:
                continue
            outcome = HOLDS if len(halved) == 2 and all(halved) else PARTLY if any(halved) else NOT
            outcomes.append(outcome)
            per.append((w["technique"], outcome))
            evidence.append(f"{step(w, wo)}: {'; '.join(said)}")
        if outcomes:
            why = per_technique(per) + "."
            if any(t.startswith("amp-") or "+amp-" in t for t, _ in per):
                why += " Autocast (amp-*) keeps fp32 weights and gradients and casts the compute."
            why += " Gradients count only where live at the peak."
            out.append(result([p[0] for p in prs], overall(outcomes), evidence, why))
    return out


def gc_time(df):
    out = []
    for mode, prs in by_mode(pairs(df, "gc")).items():
        col, noun = ("flops_per_step", "FLOPs per step") if mode == "sim" else ("tokens_per_s", "step time")
        costs, evidence = [], []
        for w, wo in prs:
            r = ratio(w[col], wo[col]) if mode == "sim" else ratio(wo[col], w[col])
            if r is None:
                continue
            costs.append((r - 1) * 100)
            evidence.append(f"{step(w, wo)}: {noun} {(r - 1) * 100:+.1f}%")
        if costs:
            med = statistics.median(costs)
            why = f"median {noun} change {med:+.1f}%"
            why += (" (FLOPs stand in for time: one extra forward per step)" if mode == "sim" else
                    " (cpu: small models, and every step carries the memory tracker's overhead)" if mode == "cpu" else "")
            out.append(result([p[0] for p in prs], band(med, (15, 35), (5, 50)), evidence, why))
    return out


def adam8bit(df):
    found = by_mode([p for name in ("adamw8bit", "paged-adamw8bit") for p in pairs(df, name)])
    out = []
    for mode, prs in found.items():
        saved, evidence = [], []
        for w, wo in prs:
            r = ratio(w["optimizer_bytes"], wo["optimizer_bytes"])
            if r is None:
                continue
            saved.append((1 - r) * 100)
            evidence.append(f"{step(w, wo)}: optimizer {fmt_gib(wo['optimizer_bytes'])} → "
                            f"{fmt_gib(w['optimizer_bytes'])} GiB ({(1 - r) * 100:.1f}% saved)")
        if saved:
            med = statistics.median(saved)
            out.append(result([p[0] for p in prs], band(med, (65, 85), (50, 95)), evidence,
                              f"median saving {med:.1f}% of the optimizer category at the peak"))
    return out


PRECISION_ONLY = {"baseline", "fp32", "bf16", "amp-bf16", "amp-fp16"}


def adam_vs_fp16(df):
    out = []
    for mode, rows in ok_rows(df).groupby("mode", sort=False):
        evidence, outcomes, used = [], [], []
        for _, r in rows.iterrows():
            k = knobs_of(r["technique"])
            if not k or not set(parts(r["technique"])) <= PRECISION_ONLY or k["optimizer"] != "adamw" or k["dist"]:
                continue
            n = r["params_trainable"] if not missing(r["params_trainable"]) and r["params_trainable"] > 0 else r["params_total"]
            x = ratio(r["optimizer_bytes"], None if missing(n) else 2 * n)
            if x is None or r["optimizer_bytes"] == 0:
                continue
            dtypes = "/".join(details(r).get("optimizer_state_dtypes") or []) or "dtype not recorded"
            outcomes.append(HOLDS if 1.6 <= x <= 2.4 else NOT)
            used.append(r)
            evidence.append(f"{r['model']} {r['technique']} (states {dtypes}): optimizer {fmt_gib(r['optimizer_bytes'])} GiB"
                            f" = {x:.2f} × fp16 weights ({n / 1e6:,.1f} M params × 2 bytes)")
        if used:
            out.append(result(used, overall(outcomes), evidence,
                              "AdamW keeps two states per parameter in the states' dtype: 2 × 4 bytes in fp32 "
                              "(4× the fp16 weights), 2 × 2 bytes in bf16 (2×)"))
    return out


def low_cpu_mem(df):
    out = []
    for mode, prs in by_mode(pairs(df, "low-cpu-mem-usage", "ckpt-load")).items():
        saved, evidence = [], []
        for w, wo in prs:
            r = ratio(w["load_host_peak_rss_bytes"], wo["load_host_peak_rss_bytes"])
            if r is None:
                continue
            saved.append((1 - r) * 100)
            evidence.append(f"{step(w, wo)}: host peak RSS after loading {fmt_gib(wo['load_host_peak_rss_bytes'])} → "
                            f"{fmt_gib(w['load_host_peak_rss_bytes'])} GiB ({lower(1 - r)})")
        if saved:
            med = statistics.median(saved)
            out.append(result([p[0] for p in prs], band(med, (10, 100), (2, 10)), evidence,
                              f"median {lower(med / 100)} than loading the same checkpoint without it "
                              "(one process each: RSS includes the interpreter and libraries)"))
    return out


def forty_eight_gb() -> dict[str, int]:
    """GPU profiles with 44-48 GiB (marketed as 48 GB), name -> bytes, from matrix/gpus.yaml."""
    try:
        doc = yaml.safe_load(GPUS_YAML.read_text()) or {}
    except (OSError, yaml.YAMLError):
        doc = {}
    found = {n: p["memory_bytes"] for n, p in doc.items()
             if isinstance(p, dict) and isinstance(p.get("memory_bytes"), int) and 44 <= p["memory_bytes"] / GIB <= 48}
    return found or {"l40s": 47576711168, "rtx-a6000": 51160023040}


def is_65_70b(row) -> bool:
    n = row["params_total"]
    if not missing(n) and 60e9 <= float(n) <= 80e9:
        return True
    return bool(re.search(r"(^|[^0-9.])(6[5-9]|70)b($|[^a-z0-9])", str(row["model"]).lower()))


def qlora_70b(df):
    gpus = forty_eight_gb()
    out = []
    big = ok_rows(df)
    big = big[big["technique"].map(lambda t: "qlora" in parts(t)) & big.apply(is_65_70b, axis=1)] if len(big) else big
    rank = {"fits": HOLDS, "tight": PARTLY, "oom": NOT}
    for mode, rows in big.groupby("mode", sort=False):
        evidence, outcomes = [], []
        for _, r in rows.iterrows():
            seen = {g: v for g, v in (jcol(r, "verdicts") or {}).items() if g in gpus} if mode == "sim" \
                else ({r["gpu"]: "fits"} if r["gpu"] in gpus else {})
            if not seen:
                continue
            outcomes += [rank.get(v, NOT) for v in seen.values()]
            evidence.append(f"{r['model']} {r['technique']} (batch {r['batch_size']} × seq {r['seq_len']}): peak "
                            f"{fmt_gib(r['peak_bytes'])} GiB; " + ", ".join(f"{g}: {v}" for g, v in seen.items()))
        if outcomes:
            best = HOLDS if HOLDS in outcomes else PARTLY if PARTLY in outcomes else NOT
            out.append(result([r for _, r in rows.iterrows()], best, evidence,
                              "holds if some QLoRA combination fits a 48 GB card ('tight': within the verdict's "
                              "reserve, partly)"))
    return out


def zero3_linear(df):
    out = []
    rows = ok_rows(df)
    rows = rows[rows["technique"].map(lambda t: "zero3" in parts(t))] if len(rows) else rows
    for mode, mrows in rows.groupby("mode", sort=False):
        evidence, outcomes, analytic, used = [], [], [], []
        for (model, gpu, rest), g in mrows.groupby(
                [mrows["model"], mrows["gpu"], mrows["technique"].map(lambda t: without(t, WORLD))]):
            by_n = {(number_in(r["technique"], WORLD) or 1): r for _, r in g.iterrows()}
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
            outcomes.append(zero3_outcome(found))
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


def zero3_outcome(found: list[tuple[int, float, float]]) -> str:
    """From (N, peak ratio, model-states ratio) against N=1: linear means ratio × N within 0.75-1.33."""
    linear = lambda x, n: 0.75 <= x * n <= 1.33  # noqa: E731
    if all(linear(peak, n) for n, peak, _ in found):
        return HOLDS
    if all(linear(st, n) for n, _, st in found) or all(peak < 0.9 for _, peak, _ in found):
        return PARTLY
    return NOT


def per_gpu_peak(r):
    ranks = details(r).get("ranks")
    peaks = [x.get("peak_bytes") for x in ranks if isinstance(x, dict)] if isinstance(ranks, list) else []
    peaks = [p for p in peaks if isinstance(p, (int, float))]
    return max(peaks) if peaks else r["peak_bytes"]


def states(r):
    vals = [r[f"{c}_bytes"] for c in ("parameters", "gradients", "optimizer")]
    return None if any(missing(v) for v in vals) else sum(int(v) for v in vals)


def spread(peaks: list) -> tuple[float, int]:
    """(max/min - 1 over the steps after the first, times the running max rose after step 2)."""
    tail = peaks[1:] if len(peaks) > 2 else peaks
    rises = sum(1 for i in range(1, len(tail)) if tail[i] > max(tail[:i]))
    return max(tail) / min(tail) - 1, rises


def padding_steps(df):
    out = []
    partner = {w["cell"]: wo for w, wo in pairs(df, "padding", "packing")}
    rows = ok_rows(df)
    rows = rows[rows["technique"].map(lambda t: "padding" in parts(t))] if len(rows) else rows
    for mode, mrows in rows.groupby("mode", sort=False):
        evidence, outcomes, used = [], [], []
        for _, r in mrows.iterrows():
            peaks = [p for p in (jcol(r, "step_peak_bytes") or []) if isinstance(p, (int, float)) and p > 0]
            if len(peaks) < 2:
                continue
            s, rises = spread(peaks)
            line = f"{r['model']} {r['technique']}: per-step peaks {', '.join(fmt_gib(p) for p in peaks)} GiB " \
                   f"(spread {s * 100:.1f}%, running max rose {rises}× after step 2)"
            outcome = NOT if s < 0.05 else HOLDS if rises else PARTLY
            other = partner.get(r["cell"])
            other_peaks = [p for p in (jcol(other, "step_peak_bytes") or []) if p] if other is not None else []
            if len(other_peaks) >= 2:
                s2, _ = spread(other_peaks)
                line += f"; {other['technique']}: {', '.join(fmt_gib(p) for p in other_peaks)} GiB (spread {s2 * 100:.1f}%)"
                if outcome == HOLDS and s2 > s / 2:
                    outcome = PARTLY
            outcomes.append(outcome)
            used.append(r)
            evidence.append(line)
        if used:
            out.append(result(used, overall(outcomes), evidence,
                              "each padded batch is as long as its longest sample, so a step's peak follows it; "
                              "packed rows are always full"))
    return out


def lora_states(df):
    out = []
    for mode, prs in by_mode(pairs(df, "lora")).items():
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
            out.append(result([p[0] for p in prs], band(med, (90, 100), (70, 90)), evidence,
                              f"median saving {med:.1f}% of gradients + optimizer at the peak"))
    return out


CLAIMS = (
    Claim("mixed-precision", "Mixed precision roughly halves the memory of weights and gradients.",
          "halved: new/old within ×0.40-0.60, per category; holds if weights and gradients both halve",
          "pairs X vs X+bf16 / X+amp-bf16 / X+amp-fp16 (e.g. baseline and bf16)", mixed_precision),
    Claim("gc-time", "Gradient checkpointing costs about 20-30% in time.",
          "holds: median step-time (sim: FLOPs) increase 15-35%; partly: 5-50%",
          "pairs X vs X+gc (e.g. baseline and gc)", gc_time),
    Claim("adam-8bit", "8-bit Adam saves about three quarters of the optimizer state.",
          "holds: median optimizer-category saving 65-85%; partly: 50-95%",
          "pairs X vs X+adamw8bit or X+paged-adamw8bit", adam8bit),
    Claim("adam-2x", "Adam's state is about twice the size of the fp16 weights.",
          "holds per cell: optimizer bytes / (2 bytes × trainable params) within 1.6-2.4; cells with AdamW "
          "and precision techniques only", "baseline, bf16 or amp-* cells with AdamW", adam_vs_fp16),
    Claim("low-cpu-mem-usage", "from_pretrained(low_cpu_mem_usage=True) lowers host memory while loading.",
          "holds: median load-time host peak RSS ≥10% lower than ckpt-load; partly: 2-10%",
          "pairs X+ckpt-load vs X+low-cpu-mem-usage (cpu or cuda)", low_cpu_mem),
    Claim("qlora-70b", "QLoRA lets a 65-70B model fine-tune on one 48 GB GPU.",
          "holds: a qlora cell of a 60-80B-parameter model fits a 44-48 GiB GPU (verdict 'fits'); partly: 'tight'",
          "sim cells llama-3.1-70b__sim__qlora… with verdicts for l40s / rtx-a6000", qlora_70b),
    Claim("zero3-linear", "ZeRO-3 per-GPU memory falls about linearly with the number of GPUs.",
          "holds: per-GPU peak × N / peak at N=1 within 0.75-1.33 at every N; partly: model states do, "
          "or the peak falls but slower",
          "zero3 and zero3+w<N> cells of one model at two or more N (cpu w1/w2, sim)", zero3_linear),
    Claim("padding-steps", "With padding, peak memory climbs in steps as longer batches arrive.",
          "holds: per-step peaks (after step 1) spread ≥5% and the running max rises again after step 2, "
          "and packing's spread is under half of padding's; partly: one of these fails",
          "X+padding cells (with X+packing to contrast), two or more steps", padding_steps),
    Claim("lora-states", "LoRA cuts gradient and optimizer memory by more than 90%.",
          "holds: median saving of gradients + optimizer ≥90%; partly: 70-90%",
          "pairs X vs X+lora", lora_states),
)


def evaluate(df: pd.DataFrame) -> list[dict]:
    """One row per (claim, mode with evidence), or per claim with none: the claims table."""
    rows = []
    for claim in CLAIMS:
        found = claim.check(df) if len(df) else []
        if not found:
            found = [{"mode": DASH, "provenance": DASH, "verdict": UNMEASURED, "models": [], "cells": [],
                      "evidence": [], "why": f"no comparable cells in this run; measured by: {claim.needs}"}]
        rows += [{"key": claim.key, "statement": claim.statement, "thresholds": claim.thresholds} | f for f in found]
    return rows


def section(df: pd.DataFrame):
    return {"kind": "claims", "title": "Claims checked", "rows": evaluate(df),
            "note": "Each row sets one statement of common advice against this run's cells, one mode at a "
                    "time (a simulated number never votes with a measured one). The check and its thresholds "
                    "are in report/claims.py."}


# The pipeline-stage claim lives beside its section (report/stage_claim.py, issue 14); imported
# last because it builds on the helpers above.
from report.stage_claim import CLAIM as _VLLM_UTIL_CLAIM  # noqa: E402

CLAIMS = CLAIMS + (_VLLM_UTIL_CLAIM,)
