"""Two line charts of how the peak moves: per step (padding against packing) and with the
sequence length (the main techniques at each s<N>).

- steps: cells whose knobs batch with ``padding`` or ``packing``; y is each step's peak
  (``step_peak_bytes``, warm-up steps included and shaded).
- seq_len: cells whose knobs set the sequence length (``s<N>``), grouped by their techniques
  without the part that sets it; a group's cell without one (at the study's own length) is
  drawn with it. The record's ``seq_len`` is the length the step really ran at.
"""
from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from report import GIB
from report.compare import without_knob
from report.fmt import jcol, knobs, missing
from report.plots import capacity_lines, drawing, grid, panel_capacities, with_panel

BATCHING = ("padding", "padding-growing", "packing")   # the knob's values (bench/cells/techniques.py)


def steps_long(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (padding/packing cell, step): panel, technique, batching, step (1-based), gib, warmup."""
    rows = []
    for _, r in df[df["status"] == "ok"].iterrows():
        kind = knobs(r).get("batching")
        peaks = jcol(r, "step_peak_bytes")
        if kind not in BATCHING or not isinstance(peaks, list):
            continue
        warm = 0 if missing(r["warmup_steps"]) else int(r["warmup_steps"])
        for i, b in enumerate(peaks, start=1):
            if b is not None:
                rows.append({"cell": r["cell"], "mode": r["mode"], "model": r["model"], "gpu": r["gpu"],
                             "technique": r["technique"], "batching": kind, "step": i,
                             "gib": b / GIB, "warmup": i <= warm})
    long = pd.DataFrame(rows, columns=["cell", "mode", "model", "gpu", "technique", "batching", "step", "gib", "warmup"])
    return with_panel(long) if len(long) else long.assign(panel=[])


def steps_figure(long: pd.DataFrame) -> Figure:
    panels = sorted(long["panel"].unique())
    with drawing():
        fig, axes = grid(len(panels), wrap=3, width=4.8, height=3.4)
        for ax, panel in zip(axes, panels):
            g = long[long["panel"] == panel]
            warm = g.loc[g["warmup"], "step"]
            if len(warm):
                ax.axvspan(0.5, warm.max() + 0.5, color="#eeeeee", zorder=0, label="warm-up")
            sns.lineplot(data=g, x="step", y="gib", hue="technique", style="technique", markers=True,
                         dashes=False, errorbar=None, ax=ax)
            ax.set(title=panel, xlabel="step", ylabel="peak memory of the step (GiB)")
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.legend(fontsize=7, title=None)
    return fig


def seqlen_long(df: pd.DataFrame) -> pd.DataFrame:
    """One row per ok cell in a group that has s<N> cells: panel, group, seq_len, gib, technique."""
    ok = df[(df["status"] == "ok") & df["peak_bytes"].notna() & df["seq_len"].notna()].copy()
    cols = ["cell", "mode", "model", "gpu", "technique", "group", "seq_len", "gib", "panel"]
    if not len(ok):
        return pd.DataFrame(columns=cols)
    ok["group"] = ok["technique"].map(lambda t: without_knob(t, "seq_len"))
    ok["has_s"] = ok.apply(lambda r: knobs(r).get("seq_len") is not None, axis=1)
    swept = ok[ok["has_s"]].groupby(["model", "gpu", "group"]).size()
    keep = ok.apply(lambda r: (r["model"], r["gpu"], r["group"]) in swept.index, axis=1) if len(swept) else ok["has_s"]
    ok = ok[keep]
    if not len(ok):
        return pd.DataFrame(columns=cols)
    # the group's own cell at the study's length and an s<N> cell at that same length are one point
    ok = ok.sort_values("has_s", ascending=False).drop_duplicates(["model", "gpu", "group", "seq_len"])
    ok["seq_len"] = ok["seq_len"].astype("int64")
    ok["gib"] = ok["peak_bytes"].astype("float64") / GIB
    return with_panel(ok)[cols].sort_values(["panel", "group", "seq_len"]).reset_index(drop=True)


def seqlen_figure(long: pd.DataFrame, capacities: dict | None = None) -> Figure:
    """Peak against length, one line per group; ``capacities`` ({gpu: GiB}, sim and cuda) are
    drawn as labelled horizontal lines."""
    panels = sorted(long["panel"].unique())
    with drawing():
        fig, axes = grid(len(panels), wrap=3, width=4.8, height=3.6)
        for ax, panel in zip(axes, panels):
            g = long[long["panel"] == panel]
            sns.lineplot(data=g, x="seq_len", y="gib", hue="group", marker="o", errorbar=None, ax=ax)
            ax.set_xscale("log", base=2)
            lengths = sorted(g["seq_len"].unique())
            ax.set_xticks(lengths, [str(n) for n in lengths])
            ax.minorticks_off()
            ax.set(title=panel, xlabel="sequence length (tokens)", ylabel="peak memory (GiB)")
            ax.legend(fontsize=7, title="techniques besides s<N>", title_fontsize=7)
            if caps := panel_capacities(capacities, g):
                capacity_lines(ax, caps, axis="y", reach="next")
    return fig
