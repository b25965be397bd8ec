"""The report's memory-timeline section (report/plot_timeline.py draws it)."""
from __future__ import annotations

import pandas as pd

from bench.estimate import verdicts
from report import plot_timeline
from report.fmt import jcol
from report.sections import chart


def runs_out(df: pd.DataFrame, cells) -> str:
    """'technique: rtx-4090 at s2 (forward, aten.mm.default; 2 cache flushes before), ...; ...' from
    allocator_model.first_oom (steps 1-based as on the picture; the model build before them is
    'the build'). A flush is the allocator releasing its cached segments and retrying, which
    succeeded each time but the last (``alloc_retries_by_gpu`` counts the failing one too)."""
    said = []
    for _, r in df[df["cell"].isin(cells)].iterrows():
        model = jcol(r, "allocator_model") or {}
        fails = {g: o for g, o in (model.get("first_oom") or {}).items() if o}
        if not model.get("first_oom"):
            continue
        flushes = model.get("alloc_retries_by_gpu") or {}
        where = [f"{g} at {'the build' if o['step'] < 0 else 's' + str(o['step'] + 1)} ({o['phase']}, {o['op']}"
                 + (f"; {flushes[g] - 1} cache flush{'es' if flushes[g] > 2 else ''} before" if flushes.get(g, 0) > 1 else "")
                 + ")"
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
                 "caching allocator (black: the trace replayed through bench/estimate/allocator.py, torch 2.13's rules) "
                 f"and each GPU's capacity for the allocator (dashed: memory minus the {verdicts.RESERVE_BYTES // 2**20} MiB "
                 "reserve for what a process holds outside the allocator and cuBLAS's workspaces on that card). "
                 "Reserved above allocated is fragmentation: cached blocks no request of the next shapes fits. "
                 + (f"Where each GPU runs out (first allocation that fails in the replay): {out}. " if out else "")
                 + "Each cell's trace opens in PyTorch's memory visualizer: python -m bench.estimate.replay "
                 "results/traces/CELL.json.gz --snapshot CELL.pickle.",
                 f"stacked area chart of allocated memory by category with a reserved-memory line, {mode} mode",
                 "")
