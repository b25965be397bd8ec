"""One pytest-benchmark benchmark per matrix cell: the cell runs in its own worker process
(a sim cell in a fork of the workflow's warm engine when there is one: bench/conftest.py ``cell_runner``).

The run record goes into ``benchmark.extra_info`` (so ``--benchmark-json`` carries it).
ok and oom are results; a skipped record skips the test; error and timeout fail it, after
the record has been saved (pytest-benchmark keeps a benchmark whose target returned).
"""
import pytest

from bench.records import checks
from bench.runner import ranks


def test_cell(cell_spec, worker_log, cell_runner, benchmark, cell_records):
    rec = benchmark.pedantic(cell_runner, args=(cell_spec, worker_log), rounds=1, iterations=1)
    benchmark.extra_info.update(rec)
    cell_records.append(rec)  # the terminal summary's memory table (bench/conftest.py)
    benchmark.group = cell_spec["study"]
    if rec["status"] == "skipped":
        pytest.skip(rec["reason"])
    assert rec["status"] in ("ok", "oom"), f"{rec['status']}: {rec['reason']}\n{rec['log_tail']}"
    assert checks.problems(rec) == []
    if ranks.multirank(cell_spec):  # one record for the cell, every rank's peak inside it
        assert [r["rank"] for r in rec["details"]["ranks"]] == list(range(cell_spec["world_size"]))
