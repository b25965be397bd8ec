"""Failures are data: each failure kind, forced for real through a real worker process,
gives a record with a status and a reason, and a row in the table."""
import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from bench.records import atomic, checks
from bench.runner import launch
from bench.cells import matrix
from report import table
from tests.helpers import MATRIX_DIR

pytestmark = pytest.mark.slow
# tiny-llama cut down, so that each failing worker is mostly its imports
TINY_DIMS = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 256, "num_hidden_layers": 2}


def _one(path, cell):
    return matrix.load(path)[cell]


def test_a_cell_that_raises_is_an_error_record_with_the_last_line(tmp_path, matrix_file):
    models = tmp_path / "models"
    models.mkdir()
    broken = json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text())
    broken["intermediate_size"] = -1  # torch refuses a negative dimension while building
    (models / "broken.json").write_text(json.dumps(broken))
    spec = _one(matrix_file({"s": {"mode": "cpu", "models": ["broken"], "gpus": ["cpu"], "techniques": ["baseline"]}},
                            models_dir=str(models)), "broken__cpu__baseline")
    rec = launch.run_cell(spec, tmp_path / "w.log")
    assert rec["status"] == "error"
    assert "negative dimension" in rec["reason"]
    # the traceback within 4000 characters (bench/worker/main.py log_tail): its header, its last frames
    # and the error, however long the paths (a fresh clone under /tmp/tmp.XXXXXXXXXX/ft makes them long)
    lines = rec["log_tail"].strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and len(rec["log_tail"]) <= 4000
    assert 'File "' in rec["log_tail"] and "negative dimension" in lines[-1]
    assert checks.problems(rec) == []


def test_over_the_device_capacity_is_an_oom_record(tmp_path, matrix_file):
    small = {"cpu-64m": {"kind": "cpu", "memory_bytes": 64 << 20}}
    spec = _one(matrix_file({"s": {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu-64m"],
                                   "techniques": ["baseline"]}}, gpus=small), "tiny-llama__cpu-64m__baseline")
    rec = launch.run_cell(spec, tmp_path / "w.log")
    assert rec["status"] == "oom", rec["reason"]
    assert str(64 << 20) in rec["reason"]
    assert checks.problems(rec) == []


def test_a_cell_over_its_time_limit_is_a_timeout_record(tmp_path, matrix_file):
    spec = _one(matrix_file({"s": {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["baseline"],
                                   "timeout_s": 1}}), "tiny-llama__cpu__baseline")
    started = time.monotonic()
    rec = launch.run_cell(spec, tmp_path / "w.log")
    assert time.monotonic() - started < 30
    assert rec["status"] == "timeout" and "limit of 1 s" in rec["reason"]
    assert "cell tiny-llama__cpu__baseline (cpu)" in rec["log_tail"], "the tail says how far the worker got"
    assert checks.problems(rec) == []


def _worker_pids(marker: str):
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"bench.worker" in cmd and any(marker.encode() in part for part in cmd):
            yield int(proc.name)


def test_a_killed_worker_is_an_error_record_with_its_log_tail(tmp_path, matrix_file):
    spec = _one(matrix_file({"s": {"mode": "cpu", "models": ["tiny-qwen2"], "gpus": ["cpu"], "techniques": ["gc"]}}),
                "tiny-qwen2__cpu__gc")
    result = {}
    runner = threading.Thread(target=lambda: result.update(launch.run_cell(spec, tmp_path / "w.log")))
    runner.start()
    deadline = time.monotonic() + 60
    while not (pids := list(_worker_pids("tiny-qwen2__cpu__gc"))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids, "worker never started"
    log = tmp_path / "w.log"
    while "step 1/" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)  # kill it inside its first step, so the tail has somewhere to point
    os.kill(pids[0], signal.SIGKILL)
    runner.join(60)
    assert result["status"] == "error"
    assert "killed by SIGKILL" in result["reason"]
    assert "step 1/2 (warm-up)" in result["log_tail"], result["log_tail"]
    assert checks.problems(result) == []


def test_every_failure_kind_is_a_row(tmp_path, matrix_file):
    """Real failures of each kind, run together through the launcher, then through the table
    command the workflow runs: every cell is a row with its status and reason."""
    models = tmp_path / "models"
    models.mkdir()
    tiny = {**json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text()), **TINY_DIMS}
    (models / "tiny.json").write_text(json.dumps(tiny))
    (models / "broken.json").write_text(json.dumps({**tiny, "intermediate_size": -1}))  # torch refuses it
    cpu = {"mode": "cpu", "models": ["tiny"], "gpus": ["cpu"]}
    path = matrix_file({
        "error": {**cpu, "models": ["broken"], "techniques": ["baseline"]},
        "oom": {**cpu, "gpus": ["cpu-64k"], "techniques": ["baseline"]},
        "timeout": {**cpu, "techniques": ["baseline"], "timeout_s": 1},
        "skipped": {**cpu, "techniques": ["fa2"], "exclude": [{"techniques": "baseline"}]},
    }, models_dir=str(models), gpus={"cpu-64k": {"kind": "cpu", "memory_bytes": 1 << 16}})
    cells = matrix.load(path)
    expected = {"broken__cpu__baseline": ("error", "negative dimension"),
                "tiny__cpu-64k__baseline": ("oom", str(1 << 16)),
                "tiny__cpu__baseline": ("timeout", "limit of 1 s"),
                "tiny__cpu__fa2": ("skipped", "fa2 does not run in cpu mode")}
    assert sorted(cells) == sorted(expected)
    with ThreadPoolExecutor(len(cells)) as pool:  # each cell is its own worker process
        recs = dict(zip(cells, pool.map(lambda c: launch.run_cell(cells[c], tmp_path / f"{c}.log"), cells)))
    files = []
    for cell, rec in recs.items():
        assert checks.problems(rec) == [], (cell, checks.problems(rec))
        files.append(str(tmp_path / "cells" / f"{cell}.json"))
        atomic.write_json(files[-1], {"benchmarks": [{"name": f"test_cell[{cell}]", "extra_info": rec}]})
    assert table.main([*files, "--out", str(tmp_path / "table.csv")]) == 0
    rows = pd.read_csv(tmp_path / "table.csv").set_index("cell")
    assert sorted(rows.index) == sorted(expected)
    for cell, (status, reason) in expected.items():
        assert rows.loc[cell, "status"] == status, (cell, rows.loc[cell, "reason"])
        assert reason in rows.loc[cell, "reason"], (cell, rows.loc[cell, "reason"])


def test_a_long_traceback_keeps_its_header_and_its_end():
    from bench.worker.main import log_tail
    tb = "Traceback (most recent call last):\n" + "".join(f'  File "/x/{i}.py", line {i}\n    f()\n'
                                                          for i in range(400)) + "ValueError: the error\n"
    out = log_tail(tb)
    assert len(out) <= 4000 and out.startswith("Traceback (most recent call last):\n  ... (")
    assert out.endswith("ValueError: the error\n") and '  File "/x/399.py", line 399' in out
    assert log_tail("short") == "short"
