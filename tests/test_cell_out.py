"""--cell-out into a missing folder creates it: pytest-benchmark's JSON is written
beside the record first, and a missing folder cost the record. A cell job started from inside
an xdist worker (a test under ``pytest -n``) still gets its record: the worker's environment
variables, which it inherits, do not switch pytest-benchmark off."""
import json
import os
import subprocess
import sys
import types

import pytest

from bench import conftest as cells_conftest
from tests.helpers import REPO, write_matrix


@pytest.fixture(autouse=True)
def xdist_env_restored(monkeypatch):
    """pytest_configure drops the xdist worker variables from os.environ: give them back after."""
    for name in cells_conftest.XDIST_WORKER_ENV:
        monkeypatch.delenv(name, raising=False)


def _config(out, cell="c"):
    opts = {"cell_out": str(out), "cell": cell, "benchmark_json": None}
    return types.SimpleNamespace(getoption=opts.get, option=types.SimpleNamespace(benchmark_json=None))


def test_a_missing_cell_out_folder_is_created(tmp_path, monkeypatch):
    monkeypatch.setattr(cells_conftest.lifeline, "watch_parent", lambda: None)
    out = tmp_path / "new" / "deeper" / "c.json"
    config = _config(out)
    cells_conftest.pytest_configure(config)
    assert out.parent.is_dir() and str(config.option.benchmark_json) == os.devnull


def test_an_uncreatable_cell_out_folder_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cells_conftest.lifeline, "watch_parent", lambda: None)
    (tmp_path / "file").write_text("x")
    with pytest.raises(pytest.UsageError, match="--cell-out .*file/c.json: cannot create its folder"):
        cells_conftest.pytest_configure(_config(tmp_path / "file" / "c.json"))


def test_xdist_worker_variables_are_dropped_only_where_the_session_is_no_worker(monkeypatch):
    for name in cells_conftest.XDIST_WORKER_ENV:
        monkeypatch.setenv(name, "1")
    cells_conftest.drop_inherited_xdist_worker_env(types.SimpleNamespace(workerinput={"workerid": "gw0"}))
    assert all(os.environ.get(name) == "1" for name in cells_conftest.XDIST_WORKER_ENV)
    cells_conftest.drop_inherited_xdist_worker_env(types.SimpleNamespace())
    assert not any(name in os.environ for name in cells_conftest.XDIST_WORKER_ENV)


@pytest.mark.slow
def test_a_cell_job_started_from_an_xdist_worker_writes_its_record(tmp_path):
    """What Snakemake runs for a cell, with the variables an xdist worker hands its children."""
    path = write_matrix(tmp_path, {"s": {"mode": "sim", "models": ["tiny-llama"], "gpus": ["rtx-4090"],
                                         "techniques": ["lora"]}})
    cell, out = "tiny-llama__sim__lora", tmp_path / "cells" / "c.json"
    env = {**os.environ, "PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2", "PYTEST_XDIST_TESTRUNUID": "x"}
    env.pop(cells_conftest.simengine.ENV, None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "bench/test_cells.py", "--matrix", str(path), "--cell", cell,
                           "--cell-out", str(out), "--worker-logs", str(tmp_path / "logs"), "-p", "no:cacheprovider", "-q"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rec = json.loads(out.read_text())["benchmarks"][0]["extra_info"]
    assert rec["cell"] == cell and rec["status"] == "ok", rec.get("reason")
