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

from bench import record  # noqa: E402
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


def breakdown_figure(long: pd.DataFrame, wrap: int = 3) -> Figure:
    """Peak GiB per technique, categories stacked, one facet per panel (call once per mode)."""
    n_panels = long["panel"].nunique()
    n_rows = max(long.groupby("panel")["technique"].nunique().max(), 1)
    cols = min(n_panels, wrap)
    height = (n_panels + wrap - 1) // wrap * (0.32 * n_rows + 1.3)
    fig = Figure(figsize=(4.6 * cols, height))
    with drawing():
        _breakdown_plot(long, wrap).on(fig).plot()
    return fig


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
