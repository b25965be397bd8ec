"""What else the machine was doing while a cell's steps were timed. Plain Python (Linux /proc).

Throughput measured beside other work is not the cell's own: two cells sharing 2 cores
(``snakemake --cores 2``) measured 213 tokens/s for a baseline that runs at 319 alone, with
identical peaks. ``Window`` reads the machine's busy CPU time (/proc/stat) and this process's
own (``os.times``, all threads) at the start and end of the timed steps; what the machine was
busy with beyond this process is other load:

    other_cores = (machine busy seconds - own busy seconds) / wall seconds

A cell is ``contended`` when ``other_cores`` exceeds ``CONTENDED_CORES``; its record says so
(``details.timing_load``), and the report marks its throughput. Multi-rank cells subtract
their own ranks (bench/runner/ranks.py). Where /proc/stat cannot be read, the load is None (unknown),
never 0.
"""
from __future__ import annotations

import os
import time

CONTENDED_CORES = 0.25  # other work worth a quarter of a core or more: timing not the cell's own
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_busy_s() -> float | None:
    """Seconds of busy CPU time, all cores, since boot (/proc/stat: all but idle and iowait)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    guest = sum(fields[8:10]) if len(fields) > 9 else 0  # already counted in user and nice
    return (sum(fields) - idle - guest) / _TICK


def own_busy_s() -> float:
    t = os.times()
    return t.user + t.system


class Window:
    def __enter__(self):
        self.machine0, self.own0, self.wall0 = machine_busy_s(), own_busy_s(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.machine1, self.own1, self.wall1 = machine_busy_s(), own_busy_s(), time.perf_counter()
        return False

    def facts(self) -> dict:
        wall = self.wall1 - self.wall0
        own = (self.own1 - self.own0) / wall if wall > 0 else None
        if self.machine0 is None or self.machine1 is None or wall <= 0:
            other = None
        else:
            other = max(0.0, (self.machine1 - self.machine0) / wall - own)
        return {"wall_s": round(wall, 4), "own_cores": _r(own), "other_cores": _r(other),
                "cpu_count": os.cpu_count(), "contended": None if other is None else other > CONTENDED_CORES,
                "contended_above_cores": CONTENDED_CORES}


def _r(x):
    return None if x is None else round(x, 3)
