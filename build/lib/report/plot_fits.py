"""The fits grid: model x technique x GPU, each square coloured fits / tight / oom.

sim: the record's ``verdicts`` {gpu: fits|tight|oom} (the simulated peak against each GPU's
capacity, rule in the record's details.verdict_rule). cpu, cuda: what happened on the device
the cell ran on: ok is "fits" (it ran), oom is "oom", anything else "no result".
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from report import GIB
from report.fmt import jcol, missing
from report.plots import drawing

VERDICTS = ("fits", "tight", "oom", "no result")
COLOURS = ("#8fd19e", "#ffd27f", "#f4a3a3", "#e1e4e8")


def fits_long(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, gpu) of ONE mode: model, technique, gpu, verdict, capacity_gib (the
    card's memory as the record gives it, None if it does not)."""
    rows, caps = [], {}
    if len(df) and df["mode"].iloc[0] == "sim":
        # a failed cell gets "no result" on every GPU its model was judged against
        judged = {}
        for _, r in df.iterrows():
            judged.setdefault(r["model"], set()).update(jcol(r, "verdicts") or {})
        for _, r in df.iterrows():
            caps.update({g: b for g, b in (jcol(r, "verdict_gpu_memory_bytes") or {}).items() if isinstance(b, int)})
            verdicts = (jcol(r, "verdicts") or {}) if r["status"] == "ok" else dict.fromkeys(judged[r["model"]])
            for gpu, verdict in verdicts.items():
                rows.append((r["cell"], r["model"], r["technique"], gpu, verdict if verdict in VERDICTS else "no result"))
    else:
        for _, r in df.iterrows():
            verdict = {"ok": "fits", "oom": "oom"}.get(r["status"], "no result")
            if not missing(r["gpu_memory_bytes"]):
                caps[r["gpu"]] = int(r["gpu_memory_bytes"])
            rows.append((r["cell"], r["model"], r["technique"], r["gpu"], verdict))
    long = pd.DataFrame(rows, columns=["cell", "model", "technique", "gpu", "verdict"])
    long["capacity_gib"] = long["gpu"].map(lambda g: caps[g] / GIB if g in caps else None)
    if not len(long) or (long["verdict"] == "no result").all():
        return long.iloc[0:0]
    return long


def gpu_order(long: pd.DataFrame) -> list[str]:
    """GPUs by capacity, largest on the left (then with the most "fits" first, where a record
    gives no capacity)."""
    fits = long.assign(f=long["verdict"] == "fits").groupby("gpu")["f"].sum()
    cap = long.groupby("gpu")["capacity_gib"].max() if "capacity_gib" in long.columns else {}
    return sorted(fits.index, key=lambda g: (-(cap.get(g) if cap.get(g) == cap.get(g) and cap.get(g) else 0),
                                             -fits[g], g))


def gpu_label(long: pd.DataFrame, gpu: str) -> str:
    """'rtx-4090\n23.99 GiB': every GPU column says its CUDA capacity."""
    cap = long.loc[long["gpu"] == gpu, "capacity_gib"].max() if "capacity_gib" in long.columns else None
    return gpu if cap is None or cap != cap else f"{gpu}\n{cap:.2f} GiB"


def fits_figure(long: pd.DataFrame) -> Figure:
    """One grid: a block of rows per model (its name in bold, then its techniques, baseline
    first), one column per GPU; a GPU a model was not judged against stays blank."""
    gpus = gpu_order(long)
    labels, rows = [], []
    for model in sorted(long["model"].unique()):
        g = long[long["model"] == model]
        table = g.pivot_table(index="technique", columns="gpu", values="verdict", aggfunc="first")
        table = table.reindex(columns=gpus)
        labels.append((model, True))
        rows.append([None] * len(gpus))
        for tech in sorted(table.index, key=lambda t: (t != "baseline", t)):
            labels.append((tech, False))
            rows.append(table.loc[tech].tolist())
    verdicts = pd.DataFrame(rows, columns=gpus)
    codes = verdicts.map(lambda v: VERDICTS.index(v) if v in VERDICTS else np.nan).astype("float64")
    with drawing():
        # width: the columns, the longest row label (~0.065 in a character at 8 pt) and never
        # narrower than the legend's one row, else constrained layout collapses the axes
        longest = max(len(t) for t, _ in labels)
        width = max(0.95 * len(gpus) + 0.065 * longest + 0.8, 5.2)
        fig = Figure(figsize=(width, 0.28 * len(rows) + 1.3), layout="constrained")
        ax = fig.subplots()
        sns.heatmap(codes, cmap=ListedColormap(COLOURS), vmin=-0.5, vmax=len(VERDICTS) - 0.5, cbar=False,
                    annot=verdicts.fillna("").to_numpy(), fmt="", annot_kws={"fontsize": 7},
                    linewidths=1, linecolor="white", mask=codes.isna(), yticklabels=[t for t, _ in labels], ax=ax)
        ax.set(xlabel="", ylabel="")
        ax.grid(False)
        ax.xaxis.tick_top()
        ax.set_xticklabels([gpu_label(long, g) for g in gpus])
        ax.tick_params(axis="x", labelrotation=30, labelsize=8, length=0)
        ax.tick_params(axis="y", labelrotation=0, labelsize=8, length=0)
        for tick, (_, heading) in zip(ax.get_yticklabels(), labels):
            if heading:
                tick.set_fontweight("bold")
        fig.legend(handles=[Patch(color=c, label=v) for v, c in zip(VERDICTS, COLOURS)],
                   loc="outside lower center", ncols=len(VERDICTS), frameon=False)
    return fig
