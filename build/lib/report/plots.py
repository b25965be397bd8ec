"""Charts for the report, drawn with seaborn from long-form frames, returned as PNG bytes.

Figures are plain ``matplotlib.figure.Figure`` objects rendered by Agg: no pyplot state, no
display needed, nothing left open between charts. This module holds what every chart shares
(panels, colours, PNG/data-URI output) and the breakdown chart; the other pictures live in
plot_pareto.py, plot_fits.py and plot_steps.py. Each picture is a pair: ``<name>_long(df)``
(the long-form frame it draws, empty when the run has no such cells) and
``<name>_figure(long)``.
"""
from __future__ import annotations

import base64
import contextlib
import io
import warnings

import matplotlib

matplotlib.use("Agg")  # headless: the report is built on CI boxes and in Snakemake jobs

import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
import seaborn.objects as so  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from bench.records import record  # noqa: E402
from report import GIB  # noqa: E402

# One colour per breakdown category, the same in every chart.
PALETTE = dict(zip(record.CATEGORIES, sns.color_palette("colorblind", len(record.CATEGORIES))))


@contextlib.contextmanager
def drawing():
    """Settings every chart is drawn under. parse_math off: a model or technique name with '$'
    in it is drawn as text, never parsed as TeX (which could fail the whole build)."""
    with matplotlib.rc_context({"text.parse_math": False}), warnings.catch_warnings():
        # seaborn 0.13 passes pandas 3 a deprecated copy= keyword
        warnings.filterwarnings("ignore", message="The copy keyword is deprecated")
        with sns.axes_style("whitegrid"):
            yield


def with_panel(df: pd.DataFrame) -> pd.DataFrame:
    """Adds ``panel``: the model, plus the device where the mode measures on devices (sim cells
    have gpu "sim" and one panel per model)."""
    df = df.copy()
    df["panel"] = df["model"].where(df["mode"] == "sim", df["model"] + " · " + df["gpu"])
    return df


def grid(n: int, wrap: int = 3, width: float = 4.6, height: float = 3.4):
    """A figure of ``n`` panels, ``wrap`` per row; returns (figure, the n axes in order)."""
    cols = max(1, min(n, wrap))
    rows = max(1, (n + cols - 1) // cols)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def breakdown_long(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (ok cell, category): mode, model, gpu, panel, technique, category, gib."""
    ok = df[(df["status"] == "ok") & df[[f"{c}_bytes" for c in record.CATEGORIES]].notna().all(axis=1)]
    ok = ok.sort_values("technique", key=lambda s: s != "baseline", kind="stable")  # baseline on top
    long = ok.melt(id_vars=["cell", "mode", "model", "gpu", "technique"],
                   value_vars=[f"{c}_bytes" for c in record.CATEGORIES],
                   var_name="category", value_name="bytes")
    long["category"] = long["category"].str.removesuffix("_bytes")
    long["gib"] = long["bytes"].astype("float64") / GIB
    return with_panel(long.drop(columns="bytes"))


def breakdown_figure(long: pd.DataFrame, wrap: int = 3, capacities: dict | None = None) -> Figure:
    """Peak GiB per technique, categories stacked, one facet per panel (call once per mode);
    ``capacities`` ({gpu: GiB}) are drawn as labelled vertical lines."""
    n_panels = long["panel"].nunique()
    n_rows = max(long.groupby("panel")["technique"].nunique().max(), 1)
    cols = min(n_panels, wrap)
    height = (n_panels + wrap - 1) // wrap * (0.32 * n_rows + 1.3) + (0.6 if capacities else 0)
    fig = Figure(figsize=(max(4.6 * cols, 9 if capacities else 0), height))
    with drawing():
        _breakdown_plot(long, wrap).on(fig).plot()
        for ax in fig.axes:
            if capacities and ax.get_visible() and ax.has_data():
                capacity_lines(ax, capacities)
    return fig


def capacity_groups(capacities: dict, span: float, min_gap: float = 0.03) -> list[tuple[float, list[str]]]:
    """Capacities (GiB) merged where their lines would sit closer than ``min_gap`` of the axis
    ``span``: [(GiB of the group's smallest card, [gpus])], ascending. Merged labels cannot collide."""
    out: list[tuple[float, list[str]]] = []
    for gpu, gib in sorted(capacities.items(), key=lambda kv: (kv[1], kv[0])):
        if out and gib - out[-1][0] < min_gap * span:
            out[-1][1].append(gpu)
        else:
            out.append((gib, [gpu]))
    return out


def capacity_lines(ax, capacities: dict, axis: str = "x", reach: str = "all") -> None:
    """Each card's CUDA capacity as a dashed line across the memory ``axis`` ("x": vertical lines
    labelled above the panel; "y": horizontal lines labelled right of it) with its GiB; cards
    closer together than a label's width share one line (at the smallest) and one label that
    names the first and last card and the GiB range. ``reach`` "all" stretches the axis to the
    largest card; "next" only to the first card above the data, the cards beyond it named in
    one label at the axis' end (so small peaks are not squashed against zero)."""
    get_lim, set_lim = (ax.get_xlim, ax.set_xlim) if axis == "x" else (ax.get_ylim, ax.set_ylim)
    lo, hi = get_lim()
    lo = lo if axis == "x" else min(lo, 0.0)    # from zero: a card below the data is still on the axis
    ordered = sorted(capacities.items(), key=lambda kv: (kv[1], kv[0]))
    beyond: list[tuple[str, float]] = []
    if reach == "next":
        cut = next((i for i, (_, gib) in enumerate(ordered) if gib >= hi), len(ordered) - 1) + 1
        ordered, beyond = ordered[:cut], ordered[cut:]
    drawn = dict(ordered)
    hi = max(hi, max(drawn.values()) * (1.02 if axis == "x" else 1.06))
    set_lim(lo, hi)
    if axis == "x":
        ax.set_title(ax.get_title(), pad=40)      # room for the labels above the panel, clear of the title
        min_gap = 0.03
    else:   # a label's height against the panel's height
        min_gap = max(0.03, 9 / (ax.get_position().height * ax.figure.get_figheight() * 72))
    style = {"fontsize": 6.5, "color": "#57606a", "ha": "left"}
    for gib, gpus in capacity_groups(drawn, hi - lo, min_gap):
        top = drawn[gpus[-1]]
        said = f"{gpus[0]} {gib:.0f}" if len(gpus) == 1 else f"{gpus[0]}…{gpus[-1]} {span(gib, top)}"
        if axis == "x":
            ax.axvline(gib, color="#57606a", linestyle="--", linewidth=0.8, zorder=0)
            ax.annotate(said, xy=(gib, 1), xycoords=("data", "axes fraction"), xytext=(0, 2),
                        textcoords="offset points", rotation=60, va="bottom", **style)
        else:
            ax.axhline(gib, color="#57606a", linestyle="--", linewidth=0.8, zorder=0)
            ax.annotate(said, xy=(1, gib), xycoords=("axes fraction", "data"), xytext=(3, 0),
                        textcoords="offset points", va="center", **style)
    if beyond:
        first, last = beyond[0], beyond[-1]
        said = (f"{first[0]} {first[1]:.0f}" if len(beyond) == 1
                else f"{first[0]}…{last[0]} {span(first[1], last[1])}")
        ax.annotate(("↑ " if axis == "y" else "→ ") + said + " GiB: above the axis", xy=(1, 1),
                    xycoords="axes fraction", xytext=(3, 2), textcoords="offset points", va="bottom", **style)


def span(lo: float, hi: float) -> str:
    """'15-24' GiB, or '24' where both ends round to the same GiB."""
    return f"{lo:.0f}" if f"{lo:.0f}" == f"{hi:.0f}" else f"{lo:.0f}-{hi:.0f}"


def panel_capacities(capacities: dict | None, g: pd.DataFrame) -> dict:
    """The capacities one panel's rows are drawn against: every card a sim panel was judged
    against; the panel's own card where it ran on one (cuda); none for cpu (not passed)."""
    if not capacities:
        return {}
    if (g["mode"] == "sim").all():
        return dict(capacities)
    return {gpu: capacities[gpu] for gpu in g["gpu"].unique() if gpu in capacities}


def _breakdown_plot(long: pd.DataFrame, wrap: int) -> so.Plot:
    return (
        so.Plot(long, x="gib", y="technique", color="category")
        .add(so.Bar(edgewidth=0, alpha=1), so.Stack())
        .facet(col="panel", wrap=wrap)
        .share(x=False, y=True)        # models differ by orders of magnitude; one row per technique
                                       # across panels keeps bars the same thickness
        .scale(color=so.Nominal(PALETTE, order=list(record.CATEGORIES)))
        .label(x="peak memory (GiB)", y="", color="category")
        .layout(engine="tight")
    )


def png(fig: Figure, dpi: int = 110) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", facecolor="white")
    return buf.getvalue()


def data_uri(png_bytes: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes).decode("ascii")
