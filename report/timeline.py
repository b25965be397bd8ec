"""The report's memory-timeline section (report/plot_timeline.py draws it)."""
from __future__ import annotations

import pandas as pd

from report import plot_timeline
from report.fmt import jcol
from report.sections import chart


def runs_out(df: pd.DataFrame, cells) -> str:
    """'cell: rtx-4090 at s2 (forward, aten.mm.default), ...; ...' from allocator_model.first_oom
    (steps 1-based as on the picture; the model build before them is 'the build')."""
    said = []
    for _, r in df[df["cell"].isin(cells)].iterrows():
        model = jcol(r, "allocator_model") or {}
        fails = {g: o for g, o in (model.get("first_oom") or {}).items() if o}
        if not model.get("first_oom"):
            continue
        where = [f"{g} at {'the build' if o['step'] < 0 else 's' + str(o['step'] + 1)} ({o['phase']}, {o['op']})"
                 for g, o in sorted(fails.items(), key=lambda kv: (kv[1]["step"], kv[0]))]
        said.append(f"{r['technique']}: " + (", ".join(where) if where else "no GPU runs out"))
    return "; ".join(said)


def timeline_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    long = plot_timeline.timeline_long(rows)
    if not len(long):
        return None
    out = runs_out(rows, set(long["cell"]))
    return chart(rows, long, plot_timeline.timeline_figure, "Memory timeline: allocated, reserved, capacity",
                 "Allocated memory by category, stacked, over each cell's allocation events (step starts "
                 "marked s1, s2...; the first steps are warm-up), the modelled reserved memory of the CUDA "
                 "caching allocator (black: the trace replayed through bench/allocator.py, torch 2.13's rules) "
                 "and each GPU's capacity for the allocator (dashed: memory minus the 576 MiB context reserve). "
                 "Reserved above allocated is fragmentation: cached blocks no request of the next shapes fits. "
                 + (f"Where each GPU runs out (first allocation that fails in the replay): {out}. " if out else "")
                 + "Each cell's trace opens in PyTorch's memory visualizer: python -m bench.replay "
                 "results/traces/CELL.json.gz --snapshot CELL.pickle.",
                 f"stacked area chart of allocated memory by category with a reserved-memory line, {mode} mode",
                 "")
