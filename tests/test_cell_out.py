"""--cell-out into a missing folder creates it (issue 25): pytest-benchmark's JSON is written
beside the record first, and a missing folder cost the record."""
import types

import pytest

from bench import conftest as cells_conftest


def _config(out, cell="c"):
    opts = {"cell_out": str(out), "cell": cell, "benchmark_json": None}
    return types.SimpleNamespace(getoption=opts.get, option=types.SimpleNamespace(benchmark_json=None))


def test_a_missing_cell_out_folder_is_created(tmp_path, monkeypatch):
    monkeypatch.setattr(cells_conftest.lifeline, "watch_parent", lambda: None)
    out = tmp_path / "new" / "deeper" / "c.json"
    config = _config(out)
    cells_conftest.pytest_configure(config)
    assert out.parent.is_dir() and str(config.option.benchmark_json) == f"{out}.bench.tmp"


def test_an_uncreatable_cell_out_folder_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cells_conftest.lifeline, "watch_parent", lambda: None)
    (tmp_path / "file").write_text("x")
    with pytest.raises(pytest.UsageError, match="--cell-out .*file/c.json: cannot create its folder"):
        cells_conftest.pytest_configure(_config(tmp_path / "file" / "c.json"))
