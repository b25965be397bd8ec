"""Memory timelines: allocated memory by category, stacked over the run's allocation events,
the modelled reserved memory as a line, and each GPU's capacity for the allocator. Each
sample is a stretch of events: its reserved and allocated peaks, the categories at the latter.

The data is the record's ``allocator_model.timeline`` (bench/worker/alloctrace.py: samples of
the allocator-model replay of the cell's trace; each sample's reserved line is the most
reserved within its stretch of events) and ``allocator_model.capacity_bytes_by_gpu`` (GPU
memory minus the context reserve, bench/estimate/verdicts.py). Cells that tell a story are drawn:
those whose techniques touch the allocator or the batch shapes (``STORY``).
"""
from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from bench.records.record import CATEGORIES
from report import GIB
from report.compare import parts
from report.fmt import jcol
from report.plots import PALETTE, drawing, grid

STORY = ("padding", "padding-growing", "packing", "expandable-segments")


def timeline_long(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (story cell, timeline sample): cell, technique, event, step, reserved_gib,
    allocated_gib, the categories' GiB, capacities (JSON text: {gpu: GiB})."""
    rows = []
    for _, r in df[df["status"] == "ok"].iterrows():
        model = jcol(r, "allocator_model")
        if not isinstance(model, dict) or not model.get("timeline") or not set(parts(r["technique"])) & set(STORY):
            continue
        cols = model["timeline"]["columns"]
        caps = {g: c / GIB for g, c in (model.get("capacity_bytes_by_gpu") or {}).items()}
        for sample in model["timeline"]["rows"]:
            s = dict(zip(cols, sample))
            rows.append({"cell": r["cell"], "mode": r["mode"], "model": r["model"], "gpu": r["gpu"],
                         "technique": r["technique"], "event": s["event"], "step": s["step"],
                         "reserved_gib": s["reserved_max"] / GIB,
                         "allocated_gib": s.get("allocated_max", s["allocated"]) / GIB,
                         **{c: s.get(c, 0) / GIB for c in CATEGORIES}, "capacities": caps})
    return pd.DataFrame(rows, columns=["cell", "mode", "model", "gpu", "technique", "event", "step",
                                       "reserved_gib", "allocated_gib", *CATEGORIES, "capacities"])


def timeline_figure(long: pd.DataFrame) -> Figure:
    cells = list(dict.fromkeys(long["cell"]))
    top = long["reserved_gib"].max() * 1.25
    with drawing():
        fig, axes = grid(len(cells), wrap=2, width=6.0, height=3.6)
        for ax, cell in zip(axes, cells):
            g = long[long["cell"] == cell]
            ax.stackplot(g["event"], *[g[c] for c in CATEGORIES], labels=CATEGORIES,
                         colors=[PALETTE[c] for c in CATEGORIES], alpha=0.85, linewidth=0)
            ax.plot(g["event"], g["reserved_gib"], color="black", linewidth=1.4, label="reserved (modelled)")
            for gpu, cap in g["capacities"].iloc[0].items():
                if cap <= top:
                    ax.axhline(cap, color="firebrick", linestyle="--", linewidth=0.8)
                    ax.text(g["event"].iloc[0], cap, f" {gpu}", color="firebrick", fontsize=7, va="bottom")
            starts = g[g["step"] != g["step"].shift()]
            for _, s in starts[starts["step"] >= 0].iterrows():
                ax.axvline(s["event"], color="grey", linewidth=0.5, alpha=0.6)
            ax.set_xticks(starts[starts["step"] >= 0]["event"],
                          [f"s{int(k) + 1}" for k in starts[starts["step"] >= 0]["step"]], fontsize=7)
            ax.set(title=f"{g['model'].iloc[0]} · {g['technique'].iloc[0]}", ylim=(0, top),
                   xlabel="allocation events (step starts marked)", ylabel="GiB")
            ax.title.set_fontsize(9)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=7)
    return fig
