"""Each technique's effect where it matters: technique | main saving target | saving effect |
difficulty | extra overhead, told twice per technique.

- added to the baseline: the cell of the technique alone against the baseline;
- removed from a recipe people use (``lookup.RECIPES``: full bf16 + gc + 8-bit AdamW,
  LoRA + gc + bf16, LoRA + gc with an fp32 base, QLoRA + gc): the recipe's cell against the
  same recipe without it.

A technique that shrinks activations saves nothing against an fp32 full fine-tune whose peak
is in the optimizer step; the same technique on a LoRA run, whose peak is in the backward
pass, saves a third of it. Both are shown, and where the peak did not move the row says in
which phase the peak sits. Pairs are of one mode, model and device, the same batch and
sequence length (report.compare). Main saving target: the breakdown category that shrank most
in that pair. Extra overhead: sim: the speed model's step time, median change over the GPUs
both cells have an estimate for (modelled; FLOPs are not a time); cpu, cuda: measured tokens/s.
"""
from __future__ import annotations

import statistics

import pandas as pd

from report.compare import main_saving, other_workload, parts, same_shape, technique_meta
from report.fmt import (DASH, change_pct, contended, dtypes_text, fmt_gib, fmt_pct, missing, noise_text, provenance,
                        row_gpus, tone, within_cpu_noise)
from report.lookup import RECIPES, is_training, step_time_changes

PHASES = ("forward", "backward", "optimizer")
# Below this share of the peak a difference is no saving (allocator rounding, a few buffers).
NO_SAVING = 0.005


def peak_phase(row) -> str | None:
    peaks = {p: float(row[f"{p}_peak_bytes"]) for p in PHASES if not missing(row[f"{p}_peak_bytes"])}
    return max(peaks, key=peaks.get) if peaks else None


def phase_note(w, wo, saved) -> str:
    """Where the saving went when the peak did not move: 'peak is in the optimizer step; the
    backward peak shrank 2.1 GiB'. '' when the peak shrank."""
    if saved is None or saved > NO_SAVING * float(wo["peak_bytes"]):
        return ""
    phase = peak_phase(wo)
    if phase is None:
        return ""
    note = f"peak is in the {phase} {'step' if phase == 'optimizer' else 'pass'}"
    shrank = {p: float(wo[f"{p}_peak_bytes"]) - float(w[f"{p}_peak_bytes"]) for p in PHASES
              if p != phase and not missing(w[f"{p}_peak_bytes"]) and not missing(wo[f"{p}_peak_bytes"])}
    best = max(shrank, key=shrank.get, default=None)
    if best and shrank[best] > 0:
        note += f"; the {best} peak shrank {fmt_gib(shrank[best])} GiB"
    return note


def overhead(w, wo) -> tuple[str, float | None]:
    """(text, sortable %) of the step-time cost of having the technique."""
    if w["mode"] == "sim":
        changes = step_time_changes(w, wo)
        if not changes:
            return "no speed model", None
        med = statistics.median(changes)
        spread = f", {min(changes):+.0f}% to {max(changes):+.0f}%" if len(changes) > 1 else ""
        return f"{fmt_pct(med, signed=True)} step time (modelled, {len(changes)} GPUs{spread})", med
    if contended(w) or contended(wo):
        return "timed beside other load", None
    pct = change_pct(wo["tokens_per_s"], w["tokens_per_s"])   # time per token: without/with tokens/s
    if within_cpu_noise(w, pct):
        return f"step time {noise_text(pct)}", None
    return (DASH, None) if pct is None else (f"{fmt_pct(pct, signed=True)} step time (measured)", pct)


def effect_row(tech: str, context: str, w, wo) -> dict:
    saved = None if missing(w["peak_bytes"]) or missing(wo["peak_bytes"]) else float(wo["peak_bytes"]) - float(w["peak_bytes"])
    pct = None if saved is None or float(wo["peak_bytes"]) == 0 else saved / float(wo["peak_bytes"]) * 100
    cost, cost_sort = overhead(w, wo)
    meta = technique_meta(tech)
    return {"technique": tech, "context": context, "pair": f"{wo['technique']} → {w['technique']}",
            "expected": meta["saves"], "measured": main_saving(w, wo), "phase": phase_note(w, wo, saved),
            "saved": fmt_gib(saved, signed=False), "saved_pct": fmt_pct(pct), "saved_tone": tone(saved),
            "difficulty": meta["difficulty"], "cost": cost, "cost_tone": tone(cost_sort, higher_is_better=False),
            "advice": meta["overhead"], "dtypes": dtypes_text(w), "cell": w["cell"],
            "provenance": provenance(w), "models": [w["model"]], "gpus": row_gpus(w)}


def contexts():
    yield "added to the baseline", None
    for label, names in RECIPES.items():
        yield f"removed from {label}", names


def section(df: pd.DataFrame, mode: str):
    rows = df[(df["mode"] == mode) & (df["status"] == "ok")]
    index: dict[tuple, object] = {}
    for _, r in rows.iterrows():
        if is_training(r) and not other_workload(r) and (missing(r["world_size"]) or int(r["world_size"]) == 1):
            index.setdefault((r["model"], r["gpu"], frozenset(parts(r["technique"])) - {"baseline"}), r)
    groups = []
    for model, gpu in sorted({(k[0], k[1]) for k in index}):
        out = []
        for context, recipe in contexts():
            if recipe is None:
                pairs = [(next(iter(k[2])), index[k], index.get((model, gpu, frozenset())))
                         for k in index if k[:2] == (model, gpu) and len(k[2]) == 1]
            else:
                pairs = [(t, index.get((model, gpu, recipe)), index.get((model, gpu, recipe - {t}))) for t in sorted(recipe)]
            out += [effect_row(t, context, w, wo) for t, w, wo in pairs
                    if w is not None and wo is not None and same_shape(w, wo)]
        if out:
            out.sort(key=lambda e: e["technique"])
            groups.append({"title": model if mode == "sim" else f"{model} · {gpu}", "rows": out})
    if not groups:
        return None
    word = "simulated" if mode == "sim" else "measured"
    return {"kind": "effects", "title": "Each technique's effect where it matters", "mode": mode, "groups": groups,
            "word": word,
            "note": f"Each technique twice: added to the baseline, and taken out of the recipes people use. Saving "
                    f"effect: the {word} peak without it minus with it. Main saving target: expected (catalogue) / "
                    f"the category that shrank most in that pair. Where the peak did not move, the row says in which "
                    f"phase the peak sits. Extra overhead: "
                    + ("the speed model's step time (modelled), never FLOPs." if mode == "sim"
                       else "measured step time per token.")}
