"""Recommendations, per mode: for each model and GPU, the fastest combination that fits, and the
cheapest change that makes a non-fitting baseline fit.

What "fits" means:
- sim: the record's verdict for that GPU is "fits" (not "tight", not "oom").
- cpu, cuda: the cell ran to the end on that device (status ok); "oom" is an out-of-memory record.

Only combinations that train the same workload compete: cells that change the batch or the
sequence length (b<N>, s<N>) are left out. "Fastest" compares single-device cells (world size
1): by the speed model's step time on that GPU in sim (``details.speed_model``, modelled; a
simulated step is not timed, and FLOPs are never used to rank), by measured tokens/s in cpu and
cuda. A measured timing taken beside other load (``details.timing_load``, contended) never
ranks: it is left out and said. In cpu mode a lead inside the run-to-run noise band
(±CPU_THROUGHPUT_BAND, bench/records/noise.py) is not a lead: the cells inside it are named, none is
"fastest". "Cheapest change" ranks the fitting combinations by: single device before several, then
lowest difficulty (catalogue), then least overhead (the same speed), then lowest peak; never by
how many techniques a combination has.
"""
from __future__ import annotations

import math

import pandas as pd

from bench.estimate.measures import comparable_step
from bench.records.noise import CPU_THROUGHPUT_BAND
from report.compare import difficulty_rank, other_workload
from report.fmt import DASH, change_pct, contended, fmt_count, fmt_gib, fmt_pct, jcol, missing, provenance

MEASURED_VERDICT = {"ok": "fits", "oom": "oom"}


def candidates(df: pd.DataFrame, mode: str) -> pd.DataFrame:
    """One row per (cell, gpu) of ``mode`` with a verdict: model, gpu, technique, verdict, peak,
    speed (the modelled step seconds on that GPU in sim, tokens/s otherwise), world size, provenance."""
    rows = []
    for _, r in df[df["mode"] == mode].iterrows():
        if mode == "sim":
            verdicts = (jcol(r, "verdicts") or {}) if r["status"] == "ok" else {}
            pairs = [(g, v) for g, v in verdicts.items() if v in ("fits", "tight", "oom")]
        else:
            pairs = [(r["gpu"], MEASURED_VERDICT[r["status"]])] if r["status"] in MEASURED_VERDICT else []
        for gpu, verdict in pairs:
            # sim: seconds of a step that trains the cell's whole batch x seq tokens (bench/estimate/measures.py);
            # a shorter modelled step (padding-growing) has no comparable speed and ranks last
            speed = (comparable_step(r, gpu)[0] or {}).get("step_s") if mode == "sim" else r["tokens_per_s"]
            rows.append({"cell": r["cell"], "model": r["model"], "gpu": gpu, "technique": r["technique"],
                         "other_workload": other_workload(r), "verdict": verdict, "peak_bytes": r["peak_bytes"],
                         "speed": None if missing(speed) else float(speed),
                         "world_size": 1 if missing(r["world_size"]) else int(r["world_size"]),
                         "provenance": provenance(r), "contended": mode != "sim" and contended(r)})
    cols = ["cell", "model", "gpu", "technique", "other_workload", "verdict", "peak_bytes", "speed", "world_size",
            "provenance", "contended"]
    return pd.DataFrame(rows, columns=cols)


def _speed_key(c: dict, mode: str) -> float:
    """Smaller is better: modelled seconds per step in sim, minus tokens/s when measured; unknown sorts last."""
    if missing(c["speed"]) or c.get("contended"):   # a contended timing is not the cell's own (NaN: no speed)
        return math.inf
    return c["speed"] if mode == "sim" else -c["speed"]


def _peak_key(c: dict) -> float:
    return math.inf if missing(c["peak_bytes"]) else float(c["peak_bytes"])


def fastest(fit: list[dict], mode: str):
    return fastest_and_note(fit, mode)[0]


def fastest_and_note(fit: list[dict], mode: str) -> tuple[dict | None, str]:
    """The fastest single-device fitting cell, or None, and what to say: timings taken beside
    other load left out; in cpu mode, cells within the noise band of the best are a tie."""
    single = [c for c in fit if c["world_size"] == 1]
    busy = [c["technique"] for c in single if c.get("contended")]
    timed = [c for c in single if not c.get("contended")]
    note = f"left out, timed beside other load: {', '.join(busy)}" if busy else ""
    best = min(timed, key=lambda c: (_speed_key(c, mode), _peak_key(c)), default=None)
    if best is None:
        return None, note or "nothing fits"
    if mode == "cpu" and best["speed"]:
        tied = [c["technique"] for c in timed if c is not best and c["speed"] is not None
                and c["speed"] > 0 and best["speed"] / c["speed"] - 1 < CPU_THROUGHPUT_BAND]
        if tied:
            why = (f"no clear fastest: {', '.join([best['technique'], *tied])} within the noise band "
                   f"(±{CPU_THROUGHPUT_BAND * 100:g}% repeat-run spread)")
            return None, "; ".join(x for x in (why, note) if x)
    return best, note


def cheapest_fix(fit: list[dict], mode: str):
    changes = [c for c in fit if c["technique"] != "baseline"]
    return min(changes, key=lambda c: (c["world_size"] > 1, difficulty_rank(c["technique"]), _speed_key(c, mode),
                                       _peak_key(c)),
               default=None)


def recommend(df: pd.DataFrame, mode: str) -> list[dict]:
    """One dict per (model, gpu): baseline verdict, fastest fitting cell, cheapest fix (dicts of
    ``candidates`` rows, or None) and what to say when there is none."""
    cand = candidates(df, mode)
    cand = cand[~cand["other_workload"].astype(bool)]
    out = []
    for (model, gpu), g in cand.groupby(["model", "gpu"], sort=True):
        recs = g.to_dict("records")
        base = next((c for c in recs if c["technique"] == "baseline"), None)
        fit = [c for c in recs if c["verdict"] == "fits"]
        fix, fix_note = None, ""
        if base is None:
            fix_note = "no baseline cell for this model in this run"
        elif base["verdict"] == "fits":
            fix_note = "not needed: the baseline fits"
        else:
            fix = cheapest_fix(fit, mode)
            fix_note = "" if fix else "nothing in this run fits"
        best, best_note = fastest_and_note(fit, mode)
        out.append({"model": model, "gpu": gpu, "baseline": base, "fastest": best, "fastest_note": best_note,
                    "fix": fix, "fix_note": fix_note})
    return out


def _speed_text(c: dict, mode: str) -> str:
    if c is None:
        return DASH
    if missing(c["speed"]):  # None, or NaN from the table: never "nan s (modelled)"
        return "no speed model" if mode == "sim" else DASH
    if c.get("contended"):
        return f"{fmt_count(c['speed'])} tokens/s (timed beside other load)"
    return f"{c['speed']:.2f} s (modelled)" if mode == "sim" else f"{fmt_count(c['speed'])} tokens/s"


def section(df: pd.DataFrame, mode: str):
    """The recommendations table of one mode (None when the mode has no verdict to go on)."""
    recs = recommend(df, mode)
    if not recs:
        return None
    rows = []
    for r in recs:
        base, best, fix = r["baseline"], r["fastest"], r["fix"]
        overhead = DASH
        if fix is not None and base is not None:
            if mode == "sim":
                pct = change_pct(fix["speed"], base["speed"]) if None not in (fix["speed"], base["speed"]) else None
                overhead = "no speed model" if pct is None else fmt_pct(pct, signed=True) + " step time (modelled)"
            else:   # the baseline did not run to the end: no throughput to compare with
                overhead = _speed_text(fix, mode)
        rows.append({
            "model": r["model"], "gpu": r["gpu"],
            "baseline": base["verdict"] if base else DASH,
            "baseline_peak": fmt_gib(base["peak_bytes"]) if base else DASH,
            "fastest": (best["technique"] + (f" ({r['fastest_note']})" if r["fastest_note"] else "")) if best
            else r["fastest_note"],
            "fastest_peak": fmt_gib(best["peak_bytes"]) if best else DASH,
            "fastest_speed": _speed_text(best, mode),
            "fix": fix["technique"] if fix else r["fix_note"],
            "fix_is_note": fix is None,
            "fix_peak": fmt_gib(fix["peak_bytes"]) if fix else DASH,
            "fix_overhead": overhead,
            "provenance": ", ".join(dict.fromkeys(c["provenance"] for c in (base, best, fix) if c)) or DASH,
        })
    speed = "step time on that GPU" if mode == "sim" else "throughput"
    fits = "its simulated verdict is \"fits\"" if mode == "sim" else "it ran to the end on that device"
    return {"kind": "recommend", "title": "Recommendations", "speed_header": speed, "rows": rows,
            "note": f"A combination fits a GPU when {fits}. Fastest: the single-device combination with "
                    + ("the shortest step time the speed model gives for that GPU (modelled; a simulated step "
                       "is not timed, and FLOPs never rank)" if mode == "sim" else "the highest measured tokens/s")
                    + ". Cheapest change (only where the baseline does not fit): single device first, then "
                      "lowest difficulty, least overhead, lowest peak. Cells that change "
                      "the batch or sequence length (b<N>, s<N>) train a different workload and are left out."}
