"""No orphans: killing Snakemake, or the pytest job under it, with SIGKILL ends the cell's
worker too (bench/runner/lifeline.py), so no worker keeps running beside later cells."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow
LONG = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["baseline"], "steps": 500}


def procs_with(marker: str) -> list[int]:
    """Pids whose command line or environment mentions ``marker`` (our private TMPDIR)."""
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            blob = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in blob and int(proc.name) != os.getpid():
            out.append(int(proc.name))
    return out


def wait_for(pred, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def start(cmd, tmp_path, cwd):
    marker = tmp_path / "tmp-lifeline"
    marker.mkdir()
    env = dict(os.environ, TMPDIR=str(marker))
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, str(marker)


def worker_running(marker: str) -> bool:
    for p in procs_with(marker):
        try:
            if b"bench.worker" in Path(f"/proc/{p}/cmdline").read_bytes():
                return True
        except OSError:  # it ended after procs_with saw it
            continue
    return False


def test_sigkill_of_snakemake_ends_the_cell_job_and_its_worker(tmp_path, matrix_file):
    matrix = matrix_file({"s": LONG})
    work = tmp_path / "work"
    work.mkdir()
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--cores", "1",
           "--directory", str(work), "results/cells/tiny-llama__cpu__baseline.json", "--config", f"matrix={matrix}"]
    snake, marker = start(cmd, tmp_path, work)
    try:
        assert wait_for(lambda: worker_running(marker), 120), "the cell's worker never started"
        snake.send_signal(signal.SIGKILL)
        snake.wait()
        assert wait_for(lambda: not procs_with(marker), 15), f"left running: {procs_with(marker)}"
    finally:
        for pid in procs_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_sigkill_of_pytest_ends_its_worker(tmp_path, matrix_file):
    matrix = matrix_file({"s": LONG})
    cmd = [sys.executable, "-m", "pytest", "bench/test_cells.py", "--matrix", str(matrix), "-q",
           "--worker-logs", str(tmp_path / "logs"), "-k", "baseline"]
    collector, marker = start(cmd, tmp_path, REPO)
    try:
        assert wait_for(lambda: worker_running(marker), 120), "the cell's worker never started"
        collector.send_signal(signal.SIGKILL)
        collector.wait()
        assert wait_for(lambda: not procs_with(marker), 15), f"left running: {procs_with(marker)}"
    finally:
        for pid in procs_with(marker):
            os.kill(pid, signal.SIGKILL)
