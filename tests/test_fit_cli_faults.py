"""ft-membench fit under faults: a simulation that ends in an error prints its reason
and exits nonzero; an unwritable --results folder is a one-line warning, the answer printed."""
import pytest

from bench import cli
from bench.records import record


class FakePool:
    """Stands in for bench.search.simpool.SimPool: every simulation ends in an error with a reason."""
    def __init__(self, jobs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run_cell(self, spec, log_path=None):
        return record.failure(spec, "error", "RuntimeError: the simulated step failed here")


@pytest.fixture
def fake_pool(monkeypatch):
    import bench.search.simpool
    monkeypatch.setattr(bench.search.simpool, "SimPool", FakePool)


ARGS = ["fit", "tiny-llama", "--gpu", "rtx-4090", "--techniques", "lora", "--no-search", "--seq", "96"]


def test_an_error_prints_its_reason_and_exits_nonzero(tmp_path, fake_pool, capsys):
    assert cli.main([*ARGS, "--results", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "the simulated step failed here" in out.out
    assert "ft-membench: lora: error: RuntimeError: the simulated step failed here" in out.err


def test_an_unwritable_results_folder_is_a_warning_and_the_answer_is_printed(tmp_path, fake_pool, capsys):
    results = tmp_path / "a-file"
    results.write_text("not a folder")
    assert cli.main([*ARGS, "--results", str(results)]) == 1
    out = capsys.readouterr()
    assert "lora" in out.out and "simulated now (not kept)" in out.out
    warnings = [ln for ln in out.err.splitlines() if ln.startswith("ft-membench: warning: ")]
    assert warnings and all(str(results) in w for w in warnings)
