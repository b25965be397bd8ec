"""A worker that is killed (here: by its time limit) leaves no temp folder behind: its temp files
go in the cell's own folder, which the launcher removes however the worker ends
(no ``$TMPDIR/ftmb-inputs-*`` left by a killed worker)."""
import sys
import tempfile

from bench.runner import launch
from bench.cells import matrix
from tests.helpers import write_matrix

STUDY = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["gc"]}

LINGER = ("import tempfile, time; tempfile.mkdtemp(prefix='ftmb-inputs-'); print('pinned', flush=True); "
          "time.sleep(60)")


def test_a_worker_killed_at_its_time_limit_leaves_no_temp_folder(tmp_path, monkeypatch):
    spec = dict(matrix.load(write_matrix(tmp_path, {"c": STUDY}))["tiny-llama__cpu__gc"], timeout_s=3)
    outside = tmp_path / "tmp"
    outside.mkdir()
    monkeypatch.setenv("TMPDIR", str(outside))
    monkeypatch.setattr(tempfile, "tempdir", str(outside))
    monkeypatch.setattr(launch, "worker_command", lambda *a: [sys.executable, "-c", LINGER])
    rec = launch.run_cell(spec, tmp_path / "w.log")
    assert rec["status"] == "timeout" and "pinned" in (tmp_path / "w.log").read_text()
    assert [p.name for p in outside.iterdir() if p.name.startswith("ftmb-")] == []
