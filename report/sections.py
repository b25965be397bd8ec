"""The sections of the report. Each function takes the long-form table (and a mode, for the
sections drawn once per mode) and returns a dict whose ``kind`` names the template macro that
draws it, or None to draw nothing. Rows carry ``models`` / ``gpus`` / ``mode`` for the page's
filters.
"""
from __future__ import annotations

import pandas as pd

from bench.cells import catalogue
from report import GIB, effects, plot_fits, plot_pareto, plot_steps, plots
from report.compare import baseline_of, main_saving, technique_meta
from report.fmt import (DASH, analytic_note, change_pct, contended, details, dtypes_text, fmt_gib, fmt_pct, jcol,
                        missing, noise_text, provenance, row_gpus, sort_key, tone,
                        within_cpu_noise)
from report.plot_fits import VERDICTS


# ---- summary: technique | main saving target | saving effect | difficulty | extra overhead ----

def verdict_text(row) -> str:
    """'fits: a100-80gb, h100-80gb · oom: t4' from a sim record's verdicts."""
    verdicts = jcol(row, "verdicts") or {}
    caps = jcol(row, "verdict_gpu_memory_bytes") or {}
    name = lambda g: f"{g} ({fmt_gib(caps[g])} GiB)" if isinstance(caps.get(g), int) else g  # noqa: E731
    said = [f"{v}: {', '.join(name(g) for g, x in verdicts.items() if x == v)}" for v in VERDICTS if v in verdicts.values()]
    return " · ".join(said) or DASH


def summary_row(row: pd.Series, df: pd.DataFrame) -> dict:
    """One line of a summary table: the catalogue's claims next to what this cell measured."""
    ok = row["status"] == "ok"
    is_ref = ok and row["technique"] == "baseline"
    base = baseline_of(row, df)
    comparable = ok and not is_ref and base is not None and base["status"] == "ok"
    saved = saved_pct = speed = None
    if comparable and not (missing(base["peak_bytes"]) or missing(row["peak_bytes"])):
        saved = int(base["peak_bytes"]) - int(row["peak_bytes"])
        pct = change_pct(row["peak_bytes"], base["peak_bytes"])
        saved_pct = None if pct is None else -pct
    # sim steps are not timed: there the cost is the speed model's step time against the baseline's
    # (modelled, median over the GPUs both have an estimate for; going up is a cost), never FLOPs;
    # elsewhere the measured tokens/s.
    if row["mode"] == "sim":
        speed_text, speed = ("reference", None) if is_ref else effects.overhead(row, base) if comparable else (DASH, None)
    else:
        if comparable:
            speed = change_pct(row["tokens_per_s"], base["tokens_per_s"])
        speed_text = "reference" if is_ref else fmt_pct(speed, signed=True)
        if not is_ref and within_cpu_noise(row, speed):
            speed_text, speed = noise_text(speed), None   # inside the repeat-run spread: no tone, no evidence
    if row["mode"] != "sim" and ok and (contended(row) or (base is not None and contended(base))):
        speed_text += " (timed beside other load)"  # measured, but not the cell's own speed
        speed = None  # no tone, no sort: a contended timing is no evidence of a cost
    meta = technique_meta(row["technique"])
    return {
        "cell": row["cell"], "technique": row["technique"] or DASH, **meta, "dtypes": dtypes_text(row),
        "phase": effects.phase_note(row, base, saved) if comparable and saved is not None else "",
        "measured": "reference" if is_ref else main_saving(row, base) if comparable else DASH,
        "peak": fmt_gib(row["peak_bytes"]) if ok else DASH, "peak_sort": sort_key(row["peak_bytes"] if ok else None),
        "reserved": fmt_gib(row["reserved_peak_bytes"]) if ok else DASH,
        "saved": "reference" if is_ref else fmt_gib(saved), "saved_sort": sort_key(saved),
        "saved_pct": "" if is_ref else fmt_pct(saved_pct), "saved_pct_sort": sort_key(saved_pct),
        "saved_tone": tone(saved),
        "speed": speed_text, "speed_sort": sort_key(speed),
        "speed_tone": tone(speed, higher_is_better=row["mode"] != "sim"),
        "difficulty_sort": str(catalogue.DIFFICULTIES.index(meta["difficulty"]))
        if meta["difficulty"] in catalogue.DIFFICULTIES else "",
        "verdicts": verdict_text(row) if ok else DASH,
        "status": row["status"] or "error", "reason": row["reason"],
        "provenance": provenance(row), "analytic": analytic_note(row),
        "is_baseline": row["technique"] == "baseline",
        "models": [row["model"]], "gpus": row_gpus(row),
    }


def group_title(rows: pd.DataFrame) -> tuple[str, str]:
    """('model · gpu', 'batch 4 × seq 512 · device capacity 80.00 GiB') for one group,
    read from its first row (the baseline, when there is one)."""
    first = rows.iloc[0]
    title = first["model"] if first["mode"] == "sim" else f"{first['model']} · {first['gpu']}"
    facts = []
    if not missing(first["batch_size"]) and not missing(first["seq_len"]):
        facts.append(f"batch {first['batch_size']} × seq {first['seq_len']}")
    if not missing(first["gpu_memory_bytes"]):
        facts.append(f"device capacity {fmt_gib(first['gpu_memory_bytes'])} GiB")
    device = details(first).get("device_name")
    if isinstance(device, str) and device:
        facts.append(f"device: {device}")
    return title, " · ".join(facts)


def summary_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    groups = []
    for (_model, _gpu), g in rows.groupby(["model", "gpu"], sort=True):
        g = g.sort_values("technique", key=lambda s: s != "baseline", kind="stable")
        title, facts = group_title(g)
        groups.append({"title": title, "facts": facts, "model": _model,
                       "rows": [summary_row(r, df) for _, r in g.iterrows()]})
    speed = "step time vs baseline (modelled)" if mode == "sim" else "throughput vs baseline"
    return {"kind": "summary", "title": "Summary", "speed_header": speed, "groups": groups, "mode": mode,
            "word": "simulated" if mode == "sim" else "measured",
            "extra_header": {"sim": "simulated verdict per GPU", "cuda": "reserved peak GiB"}.get(mode)}


# ---- pictures ----

def chart(df_mode: pd.DataFrame, long: pd.DataFrame, draw, title: str, caption: str, alt: str, empty: str) -> dict:
    """A chart section: the picture drawn from ``long``, or the note ``empty`` when it has no rows."""
    cells = set(long["cell"]) if len(long) else set()
    used = df_mode[df_mode["cell"].isin(cells)]
    section = {"kind": "chart", "title": title, "caption": caption, "alt": alt, "image": None, "empty": empty,
               "provenance": ", ".join(dict.fromkeys(provenance(r) for _, r in used.iterrows())) or DASH}
    if len(long):
        # one figure per model, each filterable: a model filter hides the others' pictures
        by_model = list(long.groupby("model", sort=True)) if "model" in long.columns else [(None, long)]
        section["figures"] = [{"models": [m] if m is not None else [], "image": plots.data_uri(plots.png(draw(part)))}
                              for m, part in by_model]
        section["image"] = section["figures"][0]["image"]
    return section


def capacities_gib(rows: pd.DataFrame) -> dict:
    """{gpu: GiB} the mode's cells were judged against (sim) or ran on (cuda); {} for cpu, whose
    'device' is host memory with a profile's limit, not a card."""
    caps = {}
    for _, r in rows.iterrows():
        if r["mode"] == "sim":
            caps.update({g: b / GIB for g, b in (jcol(r, "verdict_gpu_memory_bytes") or {}).items() if isinstance(b, int)})
        elif r["mode"] == "cuda" and not missing(r["gpu_memory_bytes"]):
            caps[r["gpu"]] = float(r["gpu_memory_bytes"]) / GIB
    return caps


CAPACITY_NOTE = ("Dashed lines: each card's CUDA capacity in GiB (cards a few GiB apart share a line, the label "
                 "gives the range; cards far above the largest peak are named at the top, not drawn).")


def breakdown_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    caps = capacities_gib(rows)
    return chart(rows, plots.breakdown_long(rows), lambda long: plots.breakdown_figure(long, capacities=caps),
                 "Peak memory by category",
                 "Peak GiB per technique, the six breakdown categories stacked; one figure per model. "
                 + ("Dashed lines: each card's CUDA capacity in GiB (cards a few GiB apart share a line, "
                    "the label gives the range). " if caps else "") + "Cells that did not finish have no bar.",
                 f"stacked bar chart of peak memory per technique, {mode} mode",
                 "No cell of this mode finished with a memory breakdown: nothing to draw.")


def pareto_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    axis = plot_pareto.axis_of(mode, plot_pareto.speed_card(rows) if mode == "sim" else None)
    caps = capacities_gib(rows)
    return chart(rows, plot_pareto.pareto_long(rows), lambda long: plot_pareto.pareto_figure(long, mode, caps),
                 "Peak memory against " + ("modelled step time" if mode == "sim" else "throughput"),
                 f"Each point a cell: peak GiB against {axis['label']}; one panel per model. Orange points "
                 "are on the Pareto frontier: no other cell of the panel is both lighter and faster"
                 + (" (the speed model's estimate for one card, modelled: a simulated step is not timed). "
                    if mode == "sim" else ". ") + CAPACITY_NOTE * bool(caps),
                 f"scatter plot of peak memory against {axis['label']} with the Pareto frontier, {mode} mode",
                 "No cell of this mode has both a peak and a " + ("speed-model estimate." if mode == "sim" else "throughput."))


def fits_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    source = ("the simulated verdict per GPU (rule below)" if mode == "sim" else
              "what happened on the device the cell ran on: ran to the end = fits, out of memory = oom")
    return chart(rows, plot_fits.fits_long(rows), plot_fits.fits_figure, "Fits grid",
                 f"Model × technique × GPU, coloured by {source}; 'no result' where the cell failed "
                 "for another reason or was skipped; blank where there is no such cell on that GPU.",
                 f"grid of fits, tight and oom per model, technique and GPU, {mode} mode",
                 "No cell of this mode has a verdict or a result on a device.")


def steps_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    return chart(rows, plot_steps.steps_long(rows), plot_steps.steps_figure, "Per-step peak: padding against packing",
                 "The peak of each training step for cells that pad variable-length batches and cells that "
                 "pack them into full rows; warm-up steps shaded (the first allocates the optimizer state).",
                 f"line chart of per-step peak memory, padding against packing, {mode} mode",
                 "No padding/packing cells in this run.")


def seqlen_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    caps = capacities_gib(rows)
    return chart(rows, plot_steps.seqlen_long(rows), lambda long: plot_steps.seqlen_figure(long, caps),
                 "Peak memory against sequence length",
                 "Peak GiB at each sequence length the cells ran at (s<N> techniques), one line per "
                 "combination of the other techniques; log-2 length axis. Cells without a result have no point. "
                 + CAPACITY_NOTE * bool(caps),
                 f"line chart of peak memory against sequence length, {mode} mode",
                 "No sequence-length (s<N>) cells in this run.")


# ---- how the numbers were obtained; the sim's peers ----

def notes_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    items = {
        "cpu": ["cpu-measured: exact live tensor bytes at the step's peak (a TorchDispatchMode counting each "
                "storage once), classified by category; the device profile's capacity is enforced, so a cell "
                "beyond it is an oom record. Throughput includes the tracker's per-op overhead in every cell alike."],
        "cuda": ["cuda-measured: peak = torch.cuda.max_memory_allocated over the step, reserved peak beside it; "
                 "throughput from the timed steps after warm-up."],
        "sim": ["simulated: the same training step run under PyTorch fake tensors, counted by the same tracker; "
                "nothing is allocated. Time is the speed model's step time per GPU (modelled), never FLOPs."],
    }.get(mode, [])
    rules = {}
    for _, r in rows.iterrows():
        rule, reserve = details(r).get("verdict_rule"), details(r).get("verdict_reserve_bytes")
        if isinstance(rule, str):
            rules[rule + (f" (reserve {fmt_gib(reserve)} GiB)" if isinstance(reserve, (int, float)) else "")] = None
    items += [f"Verdict rule: {rule}" for rule in rules]
    blas = {str((details(r).get("blas_workspaces") or {}).get("label")) for _, r in rows.iterrows()
            if isinstance(details(r).get("blas_workspaces"), dict)}
    items += [f"cuBLAS workspaces beside the trace: {label}" for label in sorted(blas)]
    caveats: dict[tuple, int] = {}
    for _, r in rows.iterrows():
        for gpu, note in (details(r).get("verdict_notes") or {}).items():
            caveats[(gpu, str(note))] = caveats.get((gpu, str(note)), 0) + 1
    items += [f"Verdict caveat for {gpu} ({n} cell{'s' if n > 1 else ''}): {note}" for (gpu, note), n in caveats.items()]
    analytic = {analytic_note(r) for _, r in rows.iterrows()} - {""}
    items += [f"simulated + analytic: {a}" for a in sorted(analytic)]
    return {"kind": "notes", "title": "How these numbers were obtained", "lines": items} if items else None


def _number(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _difference(peer: dict) -> tuple[str, str]:
    """(ours minus theirs as a number, the record's explanation of the gap or '')."""
    theirs, ours, diff = _number(peer.get("bytes")), _number(peer.get("ours_bytes")), peer.get("difference")
    if theirs is not None and ours is not None:
        gap = f"ours {fmt_gib(ours - theirs, signed=True)} GiB ({fmt_pct(change_pct(ours, theirs), signed=True)})"
    elif _number(diff) is not None:
        gap = f"ours {fmt_gib(diff, signed=True)} GiB"
    else:
        gap = DASH
    return gap, diff if isinstance(diff, str) else ""


PEER_TECHNIQUES = ("baseline", "bf16")  # full fine-tunes with Adam: what the peers estimate


def peers_section(df: pd.DataFrame, mode: str):
    if mode != "sim":
        return None
    rows = []
    full = df[(df["mode"] == mode) & (df["status"] == "ok") & df["technique"].isin(PEER_TECHNIQUES)]
    for _, r in full.iterrows():
        for peer in details(r).get("peers") or []:
            if isinstance(peer, dict):
                gap, why = _difference(peer)
                rows.append({"model": r["model"], "technique": r["technique"], "cell": r["cell"],
                             "source": str(peer.get("source", DASH)), "what": str(peer.get("what", DASH)),
                             "theirs": fmt_gib(_number(peer.get("bytes"))), "ours": fmt_gib(_number(peer.get("ours_bytes"))),
                             "gap": gap, "why": why, "models": [r["model"]], "gpus": row_gpus(r)})
    return {"kind": "peers", "title": "Peer estimates", "rows": rows,
            "note": "Ours (simulated) beside the estimators of DeepSpeed and accelerate (analytic formulas over "
                    "parameter counts), for the quantity each of them estimates; the difference says what one "
                    "counts that the other does not. The peers estimate a full fine-tune with Adam, so they are "
                    "shown for the full fine-tune cells (fp32 baseline and pure bf16); every sim record keeps "
                    "its own comparison in details.peers."}


def published_section(df: pd.DataFrame, mode: str):
    """Published figures beside the simulated peak of the same settings (details.published)."""
    if mode != "sim":
        return None
    rows = []
    for _, r in df[(df["mode"] == mode) & (df["status"] == "ok")].iterrows():
        pub = details(r).get("published")
        if not isinstance(pub, dict):
            continue
        err = _number(pub.get("signed_error"))
        tokens = _number(pub.get("tokens_per_s"))
        rows.append({"model": r["model"], "row": str(pub.get("row", DASH)), "technique": r["technique"],
                     "published": f"{pub['peak_gib']:.1f}", "ours": _ours(pub, r),
                     "error": DASH if err is None else f"{err:+.1%}",
                     "tokens": DASH if tokens is None else f"{tokens:.0f}",
                     "source": f"{pub.get('source', DASH)} ({pub.get('measure', 'peak')})",
                     "unmatched": str(pub.get("unmatched", "")), "models": [r["model"]], "gpus": row_gpus(r)})
    if not rows:
        return None
    return {"kind": "published", "title": "Published figures beside ours", "rows": rows,
            "note": "A published peak (measured on a GPU by its source, in the measure it names) beside the "
                    "simulated peak of the same settings; signed error = simulated / published - 1. Rows whose "
                    "settings cannot be matched say why. Tokens/s is the source's, kept for a speed model."}


def _ours(pub: dict, r) -> str:
    """The simulated figure the published one is compared with: the peak, or (against a figure
    of torch's allocator) the peak without what bitsandbytes pages outside it, the peak beside."""
    compared = _number(pub.get("simulated_peak_gib"))
    device = _number(r["peak_bytes"])
    if compared is None or device is None or abs(compared * 2**30 - device) < 2**20:
        return fmt_gib(device)
    return f"{compared:.1f} ({fmt_gib(device)} with paged optimizer state)"


def unreadable_section(df: pd.DataFrame):
    rows = df[df["mode"] == ""]
    if not len(rows):
        return None
    return {"kind": "failures", "title": "Results that could not be read",
            "rows": [{"cell": r["cell"], "status": r["status"], "reason": r["reason"]} for _, r in rows.iterrows()]}

