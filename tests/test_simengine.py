"""The workflow's warm sim engine (bench/runner/simengine.py): a sim cell that Snakemake runs through
it has the record of the same cell run alone in a fresh process, and the engine ends with
the run, whether the run ends or Snakemake is killed."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench.records import identical
from bench.runner import launch, simengine
from bench.cells import matrix
from tests.helpers import REPO
from tests.test_lifeline import procs_with, wait_for

pytestmark = pytest.mark.slow
SIM = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["rtx-4090"], "techniques": ["lora"]}
CELL = "tiny-llama__sim__lora"


@pytest.fixture
def short_tmpdir():
    """A private TMPDIR short enough that the engine's socket lies inside it (unix socket paths
    have at most 107 bytes): every process of the run names it, and a socket left behind shows."""
    folder = Path(tempfile.mkdtemp(prefix="ftmbt-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def snakemake(work: Path, matrix_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--cores", "1",
            "--directory", str(work), f"results/cells/{CELL}.json", "--config", f"matrix={matrix_path}", *extra]


def engines(marker: str) -> list[int]:
    return [p for p in procs_with(marker) if Path(f"/proc/{p}").exists()
            and b"bench.runner.simengine" in Path(f"/proc/{p}/cmdline").read_bytes()]


def test_workflow_sim_cell_from_the_engine_is_the_fresh_process_record(tmp_path, matrix_file, short_tmpdir):
    path = matrix_file({"s": SIM})
    work = tmp_path / "work"
    marker = short_tmpdir
    out = subprocess.run(snakemake(work, path), capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TMPDIR": str(marker)})
    assert out.returncode == 0, out.stderr[-3000:]
    log = (work / "results" / "logs" / f"{CELL}.log").read_text()
    assert "from the warm sim engine" in log, log[-3000:]  # it did go through the engine
    warm = json.loads((work / "results" / "cells" / f"{CELL}.json").read_text())["benchmarks"][0]["extra_info"]
    fresh = launch.run_cell(matrix.load(path)[CELL], tmp_path / "fresh.log")
    assert fresh["status"] == "ok"
    assert identical.compare(fresh, warm) == []
    assert Path(warm["details"]["trace_file"]).is_file()  # kept beside the logs, as the launcher keeps it
    # the run is over: no engine, no socket folder
    assert engines(str(marker)) == []
    assert list(marker.glob("ftmb-sim-engine-*")) == []


def test_sigkill_of_snakemake_ends_the_engine(tmp_path, matrix_file, short_tmpdir):
    path = matrix_file({"s": SIM})
    work = tmp_path / "work"
    work.mkdir()
    marker = str(short_tmpdir)
    snake = subprocess.Popen(snakemake(work, path), cwd=work, env=dict(os.environ, TMPDIR=marker),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: engines(marker), 120), "the engine never started"
        snake.send_signal(signal.SIGKILL)
        snake.wait()
        assert wait_for(lambda: not procs_with(marker), 20), f"left running: {procs_with(marker)}"
        assert list(Path(marker).glob("ftmb-sim-engine-*")) == []
    finally:
        for pid in procs_with(marker):
            os.kill(pid, signal.SIGKILL)


PARENT_GONE_BEFORE_ARMING = """
import os, sys, types
from bench.runner import lifeline, simengine
ppids = iter([os.getppid()])  # die_with_parent's first look sees the parent; its second, the reaper
fake = types.ModuleType("os")
fake.__dict__.update(os.__dict__)
fake.getppid = lambda: next(ppids, 1)
lifeline.os = fake
simengine.serve(sys.argv[1], watch_pid=os.getpid(), jobs=1)
"""


def test_snakemake_gone_before_the_parent_death_signal_is_armed_still_cleans_up(short_tmpdir):
    """Snakemake killed while the engine is still starting: the engine's SIGTERM to itself
    (bench/runner/lifeline.py) must end in its clean-up, not in the default action that leaves the
    socket folder behind (a CI failure of test_sigkill_of_snakemake_ends_the_engine)."""
    folder = short_tmpdir / "ftmb-sim-engine-x"
    folder.mkdir()
    out = subprocess.run([sys.executable, "-c", PARENT_GONE_BEFORE_ARMING, str(folder / "engine.sock")],
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert not folder.exists()


def test_an_engine_of_other_code_or_libraries_refuses_and_the_cell_runs_fresh(tmp_path, monkeypatch):
    sock = simengine.start(watch_pid=os.getpid(), jobs=1, env_var="FTMB_TEST_ENGINE")
    try:
        spec = matrix.load(REPO / "matrix" / "default.yaml")["qwen2.5-7b__sim__lora+gc+bf16"]
        monkeypatch.setattr(simengine, "key", lambda: "another-key")
        assert simengine.run_cell(spec, tmp_path / "w.log", sock) is None
        assert not (tmp_path / "w.log").exists()  # refused before anything ran
    finally:
        simengine.stop(sock)
        os.environ.pop("FTMB_TEST_ENGINE", None)
    assert not Path(sock).parent.exists()


def test_a_search_through_the_engine_has_the_answers_of_its_own_pool(tmp_path):
    """bench.fits inside a workflow run: the engine's samples (with their traces) give the rows a
    search with its own warm servers gives."""
    from bench.search import fits
    from bench.search.simpool import SimPool
    from tests.test_fits import tiny_spec
    spec = tiny_spec()
    with SimPool(1) as pool:  # one server each side: the imports are the test's cost on 2 cores
        own = fits.search(spec, pool.run_cell, simulate_many=pool.run_many)
    sock = simengine.start(watch_pid=os.getpid(), jobs=1, env_var="FTMB_TEST_ENGINE")
    try:
        with simengine.EnginePool(sock, 2, fallback=lambda: pytest.fail("the engine refused")) as pool:
            warm = fits.search(spec, pool.run_cell, log_dir=tmp_path, simulate_many=pool.run_many)
    finally:
        simengine.stop(sock)
        os.environ.pop("FTMB_TEST_ENGINE", None)
    assert warm["rows"] == own["rows"] and len(warm["simulated"]) == len(own["simulated"]) > 3
    assert [(e["batch"], e["seq"], e["reserved_peak_bytes"]) for e in warm["simulated"]] == \
        [(e["batch"], e["seq"], e["reserved_peak_bytes"]) for e in own["simulated"]]
