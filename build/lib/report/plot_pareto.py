"""Peak memory against speed, one panel per model, with the Pareto frontier marked.

Measured modes (cpu, cuda) plot throughput (tokens/s, higher is better); sim plots the speed
model's step time on one card (``details.speed_model``, modelled, lower is better; a simulated
step is not timed, and FLOPs are not a time): the A100-80GB, whose class the model is calibrated
on, where the records have it, else the card most of them have an estimate for. A cell is on
the frontier when no other cell of its panel is at least as good on both axes and better on one.
"""
from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from report import GIB
from report.compare import other_workload
from report.fmt import details
from report.lookup import speed_of
from report.plots import capacity_lines, drawing, grid, panel_capacities, with_panel

FRONT, OTHER = "#d55e00", "#7f8c9a"


SPEED_CARD = "a100-80gb"   # the sim axis's card: its class is the one the speed model is calibrated on


def axis_of(mode: str, card: str | None = None) -> dict:
    """What the x axis is in ``mode``: column, label, scale to apply, and which way is better."""
    if mode == "sim":
        return {"column": "modelled_step_s", "label": f"modelled step time on {card or 'one card'}, s (less is better)",
                "scale": 1.0, "maximize": False}
    return {"column": "tokens_per_s", "label": "tokens/s (more is better)", "scale": 1.0, "maximize": True}


def speed_card(df: pd.DataFrame) -> str | None:
    """The card whose modelled step time the sim axis shows: SPEED_CARD where any record has an
    estimate for it, else the card with the most estimates (None without any)."""
    counts: dict[str, int] = {}
    for _, r in df.iterrows():
        model = details(r).get("speed_model")
        for gpu in (model if isinstance(model, dict) else {}):
            if speed_of(r, gpu):
                counts[gpu] = counts.get(gpu, 0) + 1
    if SPEED_CARD in counts:
        return SPEED_CARD
    return max(sorted(counts), key=counts.get) if counts else None


def frontier(x: pd.Series, y: pd.Series, maximize_x: bool) -> pd.Series:
    """True where the point (x, y) is not dominated; y (memory) is always minimised."""
    xs = x if maximize_x else -x
    flags = []
    for i in x.index:
        dominated = ((xs >= xs[i]) & (y <= y[i]) & ((xs > xs[i]) | (y < y[i]))).any()
        flags.append(not dominated)
    return pd.Series(flags, index=x.index, dtype=bool)


def pareto_long(df: pd.DataFrame) -> pd.DataFrame:
    """One row per ok cell of ONE mode with a peak and a speed: panel, technique, x, peak_gib, frontier.
    Cells of another workload (b<N>, s<N>) are left out: their speed is not comparable."""
    cols = ["cell", "mode", "model", "gpu", "technique", "x", "peak_gib", "frontier", "panel", "x_card"]
    if not len(df):
        return pd.DataFrame(columns=cols)
    mode = df["mode"].iloc[0]
    card = speed_card(df) if mode == "sim" else None
    axis = axis_of(mode, card)
    if mode == "sim":
        df = df.assign(modelled_step_s=[(speed_of(r, card) or {}).get("step_s") if card else None
                                        for _, r in df.iterrows()])
    ok = df[(df["status"] == "ok") & df["peak_bytes"].notna() & df[axis["column"]].notna()]
    ok = ok[~ok.apply(other_workload, axis=1).astype(bool)].copy() if len(ok) else ok
    if not len(ok):
        return pd.DataFrame(columns=cols)
    ok["x"] = ok[axis["column"]].astype("float64") * axis["scale"]
    ok["x_card"] = card
    ok["peak_gib"] = ok["peak_bytes"].astype("float64") / GIB
    ok = with_panel(ok)
    ok["frontier"] = False
    for _, g in ok.groupby("panel"):
        ok.loc[g.index, "frontier"] = frontier(g["x"], g["peak_gib"], axis["maximize"])
    return ok[cols].reset_index(drop=True)


def label(names: list[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" +{len(names) - most} more" if len(names) > most else "")


def pareto_figure(long: pd.DataFrame, mode: str, capacities: dict | None = None) -> Figure:
    """One panel per model (per model and card where cells ran on one); ``capacities`` ({gpu: GiB},
    sim and cuda) are drawn as labelled horizontal lines."""
    axis = axis_of(mode, long["x_card"].iloc[0] if len(long) else None)
    panels = sorted(long["panel"].unique())
    with drawing():
        fig, axes = grid(len(panels), wrap=2, width=6.0, height=4.2)
        labels: dict = {}
        for ax, panel in zip(axes, panels):
            g = long[long["panel"] == panel]
            sns.scatterplot(data=g, x="x", y="peak_gib", hue="frontier", palette={True: FRONT, False: OTHER},
                            hue_order=[True, False], s=60, legend=False, ax=ax)
            line = g[g["frontier"]].sort_values("x")
            ax.plot(line["x"], line["peak_gib"], color=FRONT, lw=1.2, ls="--", zorder=1)
            mid = (g["x"].min() + g["x"].max()) / 2
            texts = []
            for (x, y), same in g.groupby(["x", "peak_gib"]):   # one label per spot, however many cells
                right = x > mid and g["x"].nunique() > 1        # right half: label to the left, inside the panel
                texts.append(ax.annotate(label(list(same["technique"])), (x, y), xytext=(-4 if right else 4, 3),
                                         textcoords="offset points", ha="right" if right else "left", fontsize=7,
                                         color=FRONT if same["frontier"].any() else "#333333"))
            labels[ax] = texts
            ax.set(title=panel, xlabel=axis["label"], ylabel="peak memory (GiB)")
            ax.margins(x=0.15, y=0.12)
            if caps := panel_capacities(capacities, g):
                capacity_lines(ax, caps, axis="y", reach="next")
        fig.legend(handles=[Line2D([], [], marker="o", ls="--", color=FRONT, label="Pareto frontier"),
                            Line2D([], [], marker="o", ls="", color=OTHER, label="dominated")],
                   loc="outside lower center", ncols=2, frameon=False)
        fig.draw_without_rendering()            # lay out once, so the labels' sizes are known
        for texts in labels.values():
            spread(texts, fig.dpi)
    return fig


def spread(texts: list, dpi: float, tries: int = 6) -> None:
    """Moves a point label that would overlap one placed before it (top of the panel first) a
    line up or down, nearest first, to the first place where it overlaps none; a label with no
    such place within ``tries`` lines stays where it was."""
    placed = []
    for t in sorted(texts, key=lambda t: -t.get_window_extent().y0):
        dx, dy = t.xyann
        box = t.get_window_extent()
        line = (box.height + 1) * 72 / dpi
        for step in [0] + [s for n in range(1, tries + 1) for s in (n, -n)]:
            t.xyann = (dx, dy + step * line)
            moved = t.get_window_extent()
            if not any(moved.overlaps(p) for p in placed):
                box = moved
                break
        else:
            t.xyann = (dx, dy)
        placed.append(box)
