"""The report's memory-timeline section (report/plot_timeline.py draws it)."""
from __future__ import annotations

import pandas as pd

from report import plot_timeline
from report.sections import chart


def timeline_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    long = plot_timeline.timeline_long(rows)
    if not len(long):
        return None
    return chart(rows, long, plot_timeline.timeline_figure, "Memory timeline: allocated, reserved, capacity",
                 "Allocated memory by category, stacked, over each cell's allocation events (step starts "
                 "marked s1, s2...; the first steps are warm-up), the modelled reserved memory of the CUDA "
                 "caching allocator (black: the trace replayed through bench/allocator.py, torch 2.13's rules) "
                 "and each GPU's capacity for the allocator (dashed: memory minus the 576 MiB context reserve). "
                 "Reserved above allocated is fragmentation: cached blocks no request of the next shapes fits. "
                 "Each cell's trace opens in PyTorch's memory visualizer: python -m bench.replay "
                 "results/traces/CELL.json.gz --snapshot CELL.pickle.",
                 f"stacked area chart of allocated memory by category with a reserved-memory line, {mode} mode",
                 "")
