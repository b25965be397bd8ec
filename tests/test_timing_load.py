"""Timing beside other work is marked: bench/worker/cpuload.py measures what else the machine
did while a cell's steps were timed, and multi-rank cells take their own ranks back out."""
import subprocess
import sys
import time

from bench.runner import ranks
from bench.worker import cpuload

BURN = "import time\nt = time.time() + 20\nwhile time.time() < t: pass"


def test_other_processes_busy_during_the_window_are_seen_as_contention():
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(2)]
    try:
        time.sleep(0.5)  # let them start spinning
        with cpuload.Window() as window:
            time.sleep(1.5)  # this process idles; two others spin
        facts = window.facts()
    finally:
        for b in burners:
            b.kill()
    assert facts["own_cores"] < 0.2
    assert facts["other_cores"] > 1.0 and facts["contended"] is True


def test_own_work_is_not_counted_as_other_load():
    with cpuload.Window() as window:
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            pass
    facts = window.facts()
    assert facts["own_cores"] > 0.1  # how much of a core we got depends on the machine's load
    assert facts["own_cores"] + facts["other_cores"] <= facts["cpu_count"] + 0.2  # ours is not counted twice


def test_ranks_take_their_siblings_back_out():
    rank = {"own_cores": 0.9, "other_cores": 1.0, "contended_above_cores": 0.25, "cpu_count": 2, "wall_s": 1.0}
    merged = ranks.timing_load([rank, dict(rank, other_cores=0.95)])
    assert merged["other_cores"] == 0.05 and merged["contended"] is False and merged["own_cores"] == 1.8
    busy = ranks.timing_load([rank, dict(rank, other_cores=2.0)])
    assert busy["other_cores"] == 0.1  # the least any rank saw beyond its siblings
    assert ranks.timing_load([rank, None]) is None  # unknown stays unknown
