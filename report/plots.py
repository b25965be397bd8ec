"""Charts for the report, drawn with seaborn from long-form frames, returned as PNG bytes.

Figures are plain ``matplotlib.figure.Figure`` objects rendered by Agg: no pyplot state, no
display needed, nothing left open between charts.
"""
from __future__ import annotations

import base64
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


def breakdown_long(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (ok cell, category): mode, model, gpu, panel, technique, category, gib."""
    ok = df[(df["status"] == "ok") & df[[f"{c}_bytes" for c in record.CATEGORIES]].notna().all(axis=1)]
    ok = ok.sort_values("technique", key=lambda s: s != "baseline", kind="stable")  # baseline on top
    long = ok.melt(id_vars=["cell", "mode", "model", "gpu", "technique"],
                   value_vars=[f"{c}_bytes" for c in record.CATEGORIES],
                   var_name="category", value_name="bytes")
    long["category"] = long["category"].str.removesuffix("_bytes")
    long["gib"] = long["bytes"].astype("float64") / GIB
    # One panel per model (and device, where a mode has several); sim cells have gpu "sim".
    long["panel"] = long["model"].where(long["mode"] == "sim", long["model"] + " · " + long["gpu"])
    return long.drop(columns="bytes")


def breakdown_figure(long: pd.DataFrame, wrap: int = 3) -> Figure:
    """Peak GiB per technique, categories stacked, one facet per panel (call once per mode)."""
    n_panels = long["panel"].nunique()
    n_rows = max(long.groupby("panel")["technique"].nunique().max(), 1)
    cols = min(n_panels, wrap)
    height = (n_panels + wrap - 1) // wrap * (0.32 * n_rows + 1.3)
    fig = Figure(figsize=(4.6 * cols, height))
    with warnings.catch_warnings():   # seaborn 0.13 passes pandas 3 a deprecated copy= keyword
        warnings.filterwarnings("ignore", message="The copy keyword is deprecated")
        _breakdown_plot(long, wrap).on(fig).plot()
    return fig


def _breakdown_plot(long: pd.DataFrame, wrap: int) -> so.Plot:
    return (
        so.Plot(long, x="gib", y="technique", color="category")
        .add(so.Bar(edgewidth=0, alpha=1), so.Stack())
        .facet(col="panel", wrap=wrap)
        .share(x=False, y=False)       # models differ by orders of magnitude
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
