"""The answer first: per model and GPU, which training recipe fits, what it needs of the card,
how much is left, how long a sequence or batch fits, and how fast it is estimated to run.

One row per (model, GPU, recipe) for the full-size modes (sim, cuda; the small-model CPU
evidence answers no one's 'will it fit'), grouped per (model, GPU) with the card's CUDA
capacity in the group's heading. Only single-device cells that train the study's own workload
(no b<N>/s<N>, no generation or serving) compete. What each column is:

- verdict: sim: the record's verdict for that GPU (``verdicts``); cuda: ran to the end = fits,
  out of memory = oom.
- need: what the cell asks of the card. sim: the modelled reserved peak (the caching-allocator
  replay) plus the verdict's reserve (CUDA context, cuBLAS workspaces), which is exactly what
  the verdict sets against the card's memory; where no reserved peak was modelled, the
  allocated peak plus the reserve, shown as a lower bound ("≥"). cuda: the measured reserved
  peak. Capacity: the card's memory as the record gives it (``verdict_gpu_memory_bytes`` /
  ``gpu_memory_bytes``). Headroom = capacity - need.
- largest sequence at batch 1 / largest batch at the study's sequence: the fits search
  (results/fits.csv, ``--fits``); "not searched" without it.
- step time, tokens/s: sim: the speed model's estimate for that GPU (details.speed_model,
  provenance "modelled"); "no speed model" where the record has none. cuda: measured.

Ranking: fitting recipes by the speed model's tokens/s on that GPU (fastest first: the same
order as step time where recipes train the same tokens per step, and a padded step over short
samples does not pass for a faster recipe); a fitting recipe without an estimate comes after
those with one. Where no fitting recipe has an estimate
nothing is recommended ("ranking unavailable"): FLOPs do not count dequantization, precision or
communication, so they are never used to rank. Then tight, then the common recipes that do
not fit (so "LoRA + gc with an fp32 base does not fit" is said, not left out).
"""
from __future__ import annotations

import math

import pandas as pd

from bench.corpus import answer_error
from bench.estimate import speedcv
from bench.estimate.measures import comparable_step
from bench.records.stated import need_bytes
from report.compare import other_workload, parts
from report.fmt import DASH, details, dtypes_text, fmt_count, fmt_gib, jcol, knobs, missing, provenance

# The recipes people use, named as the catalogue's parts (order does not matter). The lookup
# always shows these, fitting or not; report/effects.py takes each technique out of them.
RECIPES = {
    "full bf16 + gc + 8-bit AdamW": frozenset({"adamw8bit", "gc", "bf16"}),
    "LoRA + gc + bf16": frozenset({"lora", "gc", "bf16"}),
    "LoRA + gc, fp32 base": frozenset({"lora", "gc"}),
    "QLoRA + gc": frozenset({"qlora", "gc"}),
}
RANK = {"fits": 0, "tight": 1, "oom": 2}
UNRANKED = "ranking unavailable: no speed model for this GPU in these records"


def recipe_name(technique: str) -> str:
    names = frozenset(parts(technique)) - {"baseline"}
    return next((label for label, want in RECIPES.items() if want == names), "")


def is_training(row) -> bool:
    return knobs(row).get("workload", "train") == "train"


def speed_of(row, gpu: str) -> dict | None:
    """The speed model's estimate for ``gpu`` (a dict with step_s...), or None."""
    model = details(row).get("speed_model")
    est = model.get(gpu) if isinstance(model, dict) else None
    if isinstance(est, dict) and isinstance(est.get("step_s"), (int, float)) and est["step_s"] > 0:
        return est
    return None


def step_time_changes(w, wo) -> list[float]:
    """The speed model's step time of ``w`` against ``wo`` in %, one per GPU both rows have an
    estimate for (modelled), in GPU order; [] without one."""
    model = details(w).get("speed_model")
    out = []
    for gpu in sorted(model if isinstance(model, dict) else {}):
        a, b = speed_of(w, gpu), speed_of(wo, gpu)
        if a and b:
            out.append((a["step_s"] / b["step_s"] - 1) * 100)
    return out


def need_of(row, gpu: str | None = None) -> tuple[float | None, bool]:
    """(bytes the cell asks of the card ``gpu``, whether that is only a lower bound)."""
    if row["mode"] == "cuda":
        return (None, False) if missing(row["reserved_peak_bytes"]) else (float(row["reserved_peak_bytes"]), False)
    return need_bytes(row, gpu)   # the CLI's need too (bench/records/stated.py): a rank's NCCL buffers, the load where larger


def world_size(r) -> int:
    return 1 if missing(r["world_size"]) else int(r["world_size"])


def candidates(df: pd.DataFrame, multi: bool = False) -> list[dict]:
    """One dict per (cell, GPU) a full-size training cell was judged against or ran on: the
    single-GPU cells, or with ``multi`` the ZeRO/FSDP cells of several ranks."""
    out = []
    for _, r in df[df["mode"].isin(("sim", "cuda"))].iterrows():
        if not is_training(r) or other_workload(r) or (world_size(r) > 1) != multi:
            continue
        if r["mode"] == "sim":
            if r["status"] != "ok":
                continue
            caps = jcol(r, "verdict_gpu_memory_bytes") or {}
            pairs = [(g, v, caps.get(g)) for g, v in (jcol(r, "verdicts") or {}).items() if v in RANK]
        else:
            verdict = {"ok": "fits", "oom": "oom"}.get(r["status"])
            pairs = [(r["gpu"], verdict, None if missing(r["gpu_memory_bytes"]) else int(r["gpu_memory_bytes"]))] \
                if verdict else []
        for gpu, verdict, cap in pairs:
            need, lower = need_of(r, gpu)
            out.append({"row": r, "model": r["model"], "gpu": gpu, "verdict": verdict, "capacity": cap,
                        "need": need if verdict != "oom" or r["mode"] == "sim" else None, "lower": lower,
                        "speed": speed_of(r, gpu) if r["mode"] == "sim" else None,
                        # like for like: a modelled step of fewer tokens than batch x seq is not ranked
                        "unranked": comparable_step(r, gpu)[1] if r["mode"] == "sim" else "",
                        "recipe": recipe_name(r["technique"])})
    return out


def ranked(group: list[dict]) -> tuple[list[dict], bool]:
    """(the rows to show in order, whether a speed ranking was possible)."""
    fit = [c for c in group if c["verdict"] == "fits"]
    timed = any(c["speed"] or c["row"]["mode"] == "cuda" and not missing(c["row"]["step_s_median"]) for c in fit)

    def rate(c):  # tokens/s: a step that trains fewer tokens (padding) is not a faster recipe
        if c["row"]["mode"] == "cuda":
            return None if missing(c["row"]["tokens_per_s"]) else float(c["row"]["tokens_per_s"])
        return None if c.get("unranked") else (c["speed"] or {}).get("tokens_per_s")

    def by_speed(c):
        return -rate(c) if rate(c) else math.inf

    def headroom(c):
        return -(c["capacity"] - c["need"]) if c["capacity"] and c["need"] is not None else math.inf

    fit.sort(key=lambda c: (by_speed(c), headroom(c)) if timed else (headroom(c),))
    tight = sorted((c for c in group if c["verdict"] == "tight"), key=headroom)
    # a single-GPU group shows the ooms of the common recipes only; a multi-GPU group holds the
    # few recipes a study composed for several cards, and each oom there is an answer
    oom = sorted((c for c in group if c["verdict"] == "oom" and (c["recipe"] or world_size(c["row"]) > 1)),
                 key=lambda c: c["row"]["technique"])
    return fit + tight + oom, timed


def fit_columns(fits: pd.DataFrame | None, row, gpu: str) -> tuple[str, str]:
    """(largest sequence at batch 1, largest batch at the study's sequence), as text."""
    if fits is None:
        return "not searched", "not searched"
    hit = fits[(fits["cell"] == row["cell"]) & (fits["gpu"] == gpu)]
    if not len(hit):
        return "not searched", "not searched"
    f = hit.iloc[0]

    def said(answer, value, limit, unit, below=None):
        if answer == "fits":
            return f"{int(float(value)):,}{unit}"
        if answer == "beyond":
            return f"≥ {int(float(value or limit)):,}{unit} (limit searched)"
        if answer == "none":
            return "none fits"
        if answer == "bracketed":
            least = f"≥ {int(float(value)):,}{unit}"
            return f"{least}, < {int(float(below)):,}{unit}" if below else least
        # a search row with no answer: the search was not made (a multi-GPU cell judged per rank,
        # a workload with no training step) or its simulation failed; the reason says which
        return f"no answer: {f.get('reason', '') or 'no reason given'}"
    seq = said(f["seq_answer"], f["max_seq_at_batch1"], f["seq_limit"], " tokens", f.get("seq_below"))
    batch = said(f["batch_answer"], f["max_batch_at_seq"], f["batch_limit"], "", f.get("batch_below"))
    if batch == seq and seq.startswith("no answer: "):  # one reason for both axes: said once
        batch = "no answer: as for the sequence"
    return seq, batch


VERDICT_NOTES = {"fits, with paging": "fits, with paging", "oom while loading": "oom while loading",
                 "no bf16 support": "no bf16 kernels: optimistic"}


def verdict_note(r, gpu: str) -> str:
    """What a sim verdict on ``gpu`` rests on, in a few words (the record's verdict note has the
    figures): paged optimizer state paged to host memory, a load that does not fit, no bf16."""
    note = (details(r).get("verdict_notes") or {}).get(gpu, "") if r["mode"] == "sim" else ""
    return "; ".join(short for key, short in VERDICT_NOTES.items() if key in note)


def lookup_row(c: dict, fits, recommended: bool, rank: int) -> dict:
    r, cap, need = c["row"], c["capacity"], c["need"]
    share = f"{need / cap * 100:.0f}%" if cap and need is not None else DASH
    room = cap - need if cap and need is not None else None
    seq, batch = fit_columns(fits, r, c["gpu"])
    if r["mode"] == "cuda":
        step, tokens = (DASH if missing(r["step_s_median"]) else f"{float(r['step_s_median']):.2f} s",
                        fmt_count(r["tokens_per_s"]))
        how = "cuda-measured"
    elif c["speed"]:
        cal = c["speed"].get("calibration")
        step, tokens = f"{c['speed']['step_s']:.2f} s", fmt_count(c["speed"].get("tokens_per_s"))
        how = (f"modelled ({cal or 'calibration not said'}; {speedcv.note(cal)}): "
               f"{c['speed'].get('how', '')}")
    else:
        step, tokens, how = "no speed model", DASH, ""
    if c.get("unranked"):   # shown, never ranked against steps of the whole batch x sequence
        tokens += f" (not ranked: {c['unranked']})"
    note = verdict_note(r, c["gpu"])
    n = 1 if missing(r["world_size"]) else int(r["world_size"])
    band, band_how = need_band(r, need, cap, n)
    if n > 1:  # a multi-GPU cell: memory is one rank's; a measured record's tokens/s is the run's
        # (bench/runner/ranks.py), the speed model's one rank's
        measured = r["mode"] == "cuda" and not missing(r["tokens_per_s"])
        run = float(r["tokens_per_s"]) if measured else ((c["speed"] or {}).get("tokens_per_s") or 0) * n
        if run:
            tokens = f"{fmt_count(run / n)} per rank · {fmt_count(run)} for the run ({n} GPUs)"
    return {"cell": r["cell"], "technique": r["technique"], "recipe": c["recipe"], "verdict": c["verdict"],
            "verdict_note": note,
            "recommended": recommended, "rank": rank, "dtypes": dtypes_text(r),
            "need": ("≥ " if c["lower"] else "") + fmt_gib(need) + (" per rank" if n > 1 else ""), "share": share,
            "need_band": band, "need_how": band_how,
            "headroom": fmt_gib(room, signed=True), "headroom_tone": "" if room is None else "worse" if room < 0 else "better",
            "seq": seq, "batch": batch, "batch_seq": "" if missing(r["seq_len"]) else str(int(r["seq_len"])),
            "step": step, "tokens": tokens, "speed_how": how,
            "provenance": provenance(r) + (" · speed modelled" if c["speed"] else ""),
            "models": [r["model"]], "gpus": [c["gpu"]], "modes": [r["mode"]]}


def need_band(r, need, cap, n: int) -> tuple[str, str]:
    """A sim need's out-of-sample error (bench/corpus/answer_error.py): (the few words under the need, the
    whole sentence for its title); ('', '') for a measured row or one without a need."""
    if r["mode"] != "sim" or need is None or not cap:
        return "", ""
    try:
        rows = answer_error.reference_rows()
    except answer_error.BoardError as exc:
        return "", f"no out-of-sample error: {exc}"
    b = answer_error.for_need(str(r["technique"]).split("+"), n, int(need), int(cap), rows)
    if b is None:
        return "", answer_error.note(None)
    worst = answer_error.at_worst(b, int(need), int(cap))
    short = f"held-out: median {b['median_abs']:.1%}, worst {b['worst_under']:+.0%}"
    if b["fits_at_worst_under"] is False and need <= cap:
        short += f" · {b.get('need_at_worst_under_bytes') / 2**30:.1f} at worst"
    return short, f"{answer_error.note(b)}; {worst}"


def shape_of(row) -> tuple[int, int]:
    """(batch, sequence) the cell's step trains: what a ranking of recipes must hold equal."""
    return (0 if missing(row["batch_size"]) else int(row["batch_size"]),
            0 if missing(row["seq_len"]) else int(row["seq_len"]))


def section(df: pd.DataFrame, fits: pd.DataFrame | None = None):
    """The lookup (None when the run has no full-size training cell)."""
    by_pair: dict[tuple, list] = {}
    # one ranking per workload: recipes at another batch or length are not rivals; multi-GPU cells
    # after the single-GPU ones, one ranking per number of GPUs (their memory and speed are per rank)
    for c in candidates(df) + candidates(df, multi=True):
        by_pair.setdefault((world_size(c["row"]), c["model"], c["gpu"], *shape_of(c["row"])), []).append(c)
    groups = []
    for (n, model, gpu, batch, seq), group in sorted(by_pair.items()):
        rows, timed = ranked(group)
        if not rows:
            continue
        cap = next((c["capacity"] for c in group if c["capacity"]), None)
        best = rows[0] if timed and rows[0]["verdict"] == "fits" else None
        if best:
            answer = f"recommended: {best['row']['technique']}"
        elif any(c["verdict"] == "fits" for c in rows):
            answer = UNRANKED + " (fitting recipes listed by headroom)"
        else:
            answer = "nothing in this run fits"
        groups.append({"model": model, "gpu": gpu if n == 1 else f"{n} x {gpu}",
                       "shape": f"batch {batch} x {seq} tokens" if n == 1 else
                       f"multi-GPU: batch {batch} per rank x {seq} tokens; need per rank, tokens/s per rank and "
                       f"for the run (x {n}, data parallel)",
                       "capacity": fmt_gib(cap), "answer": answer,
                       "rows": [lookup_row(c, fits, c is best, i + 1) for i, c in enumerate(rows)]})
    if not groups:
        return None
    return {"kind": "lookup", "title": "Will it fit, and how fast? (per model and GPU)", "groups": groups,
            "fits_source": "the fits search (results/fits.csv)" if fits is not None else "not searched in this run",
            "note": "Pick a model and a GPU above (the choice is kept in the URL to share). Need: what the step "
                    "asks of the card, the modelled reserved peak plus the CUDA context and workspace reserve, "
                    "exactly what the verdict compares with the card's memory. Ranking: highest estimated "
                    "tokens/s first (speed model, per GPU; a step that trains fewer tokens is not faster); "
                    "FLOPs are never used to rank. Recipes are ranked only against recipes training the same "
                    "batch and length on the same number of GPUs; multi-GPU groups (N x GPU) come after the "
                    "single-GPU ones, their need one rank's and their tokens/s per rank and for the run. Under each "
                    "simulated need, its out-of-sample error: the median and worst under-estimate of our figure on "
                    "held-out published runs of its kind (one GPU or FSDP or ZeRO; full, LoRA or QLoRA), and the need "
                    "at that worst where it would no longer fit (the scoreboard's held-out table; hover for the runs)."}
