"""A full disk on the workflow's own paths: the cell job (--cell-out), report.build.
Each leaves no temporary file, ends in one line naming the path and ENOSPC (no traceback), and says
a record where one still fits. A real small tmpfs where this user may mount one (root), else skipped
with the reason; the same paths with a monkeypatched ENOSPC run everywhere."""
import errno
import json
import os
import subprocess
import types
from pathlib import Path

import pytest

from bench import conftest as cells
from bench.records import atomic

CELL = "tiny-llama__cpu__baseline"


@pytest.fixture
def small_disk(tmp_path):
    """``fill(free_bytes) -> folder``: a 64 KiB tmpfs, filled until about ``free_bytes`` are left."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {proc.stderr.strip() or proc.returncode}")

    def fill(free: int) -> Path:
        st = os.statvfs(mnt)
        (mnt / "filler").write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - free))
        return mnt
    yield fill
    subprocess.run(["umount", str(mnt)], check=True)


def _session(cell_out, doc=None, cell=CELL):
    opts = {"cell_out": str(cell_out), "cell": cell}
    stash = {cells.CELLS: {}}
    if doc is not None:
        stash[cells.DOC] = doc
    config = types.SimpleNamespace(getoption=opts.get, stash=stash, option=types.SimpleNamespace())
    return types.SimpleNamespace(config=config, exitstatus=0)


def _doc(size):
    rec = {"cell": CELL, "status": "ok", "notes": "x" * size}
    return {"benchmarks": [{"name": f"test_cell[{CELL}]", "extra_info": rec}]}


def _full(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_the_cell_job_keeps_no_benchmark_file_beside_its_record(tmp_path, monkeypatch):
    monkeypatch.setattr(cells.lifeline, "watch_parent", lambda: None)
    opts = {"cell_out": str(tmp_path / "c.json"), "cell": CELL, "benchmark_json": None}
    config = types.SimpleNamespace(getoption=opts.get, option=types.SimpleNamespace(benchmark_json=None))
    cells.pytest_configure(config)
    assert str(config.option.benchmark_json) == os.devnull   # was <out>.bench.tmp, left on a full disk
    stashed = types.SimpleNamespace(stash={})
    cells.pytest_benchmark_update_json(stashed, [], _doc(1))
    assert stashed.stash[cells.DOC] == _doc(1)


def test_a_record_too_big_for_the_disk_becomes_a_failure_record(small_disk, capsys):
    disk = small_disk(16 * 1024)
    session = _session(disk / "c.json", _doc(200_000))
    cells.pytest_sessionfinish(session, 0)
    rec = json.loads((disk / "c.json").read_text())["benchmarks"][0]["extra_info"]
    assert rec["status"] == "error" and rec["cell"] == CELL
    assert rec["reason"] == f"the cell's ok record could not be written: cannot write {disk}/c.json: No space left on device"
    assert session.exitstatus == 0 and sorted(p.name for p in disk.iterdir()) == ["c.json", "filler"]
    assert capsys.readouterr().err.strip().splitlines() == [
        f"bench: cannot write {disk}/c.json: No space left on device; a failure record saying so was written instead"]


def test_a_full_disk_with_no_room_for_any_record_is_one_line_and_exit_1(small_disk, capsys):
    disk = small_disk(0)
    session = _session(disk / "c.json", _doc(10))
    cells.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 1 and sorted(p.name for p in disk.iterdir()) == ["filler"]
    assert capsys.readouterr().err.strip().splitlines() == [
        f"bench: cannot write {disk}/c.json: No space left on device; cell {CELL} has no record"]


def test_the_cell_job_on_enospc_everywhere(tmp_path, monkeypatch, capsys):
    """The same without mounting: every fsync fails as a full disk's would."""
    monkeypatch.setattr(os, "fsync", _full)
    session = _session(tmp_path / "c.json", _doc(10))
    cells.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 1 and list(tmp_path.iterdir()) == []
    assert capsys.readouterr().err.strip() == \
        f"bench: cannot write {tmp_path}/c.json: No space left on device; cell {CELL} has no record"


def test_the_cell_job_writes_a_failure_record_when_only_the_big_one_fails(tmp_path, monkeypatch):
    real = atomic.write_json
    monkeypatch.setattr(cells.atomic, "write_json",
                        lambda path, obj: _full() if len(json.dumps(obj)) > 10_000 else real(path, obj))
    session = _session(tmp_path / "c.json", _doc(50_000))
    cells.pytest_sessionfinish(session, 0)
    rec = json.loads((tmp_path / "c.json").read_text())["benchmarks"][0]["extra_info"]
    assert session.exitstatus == 0 and rec["status"] == "error" and "No space left on device" in rec["reason"]


def _table(tmp_path):
    from report import table
    from tests.records import demo_records, write_cells
    paths = write_cells(tmp_path / "cells", demo_records())
    assert table.main([*map(str, paths), "--out", str(tmp_path / "table.csv")]) == 0
    return paths


def test_report_build_on_a_full_disk_is_one_line(small_disk, tmp_path, capsys):
    from report import build
    _table(tmp_path)
    disk = small_disk(2 * 1024)   # the page is far bigger than 2 KiB
    capsys.readouterr()
    assert build.main([str(tmp_path / "table.csv"), "--out", str(disk / "report.html")]) == 1
    assert capsys.readouterr().err.strip() == f"report.build: error: cannot write {disk}/report.html: No space left on device"
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]


def test_report_build_and_table_on_enospc(tmp_path, monkeypatch, capsys):
    from report import build, table
    paths = _table(tmp_path)
    monkeypatch.setattr(os, "fsync", _full)
    capsys.readouterr()
    assert build.main([str(tmp_path / "table.csv"), "--out", str(tmp_path / "out" / "r.html")]) == 1
    assert table.main([*map(str, paths), "--out", str(tmp_path / "out" / "t.csv")]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"report.build: error: cannot write {tmp_path}/out/r.html: No space left on device",
        f"report.table: error: cannot write {tmp_path}/out/t.csv: No space left on device"]
    assert list((tmp_path / "out").iterdir()) == []


def _kept(tmp_path, disk_logs):
    from bench.runner import launch
    out = tmp_path / "work" / "record.json"
    out.parent.mkdir()
    Path(f"{out}.trace.json.gz").write_bytes(os.urandom(100_000))   # bigger than the disk's room
    rec = {"details": {}}
    launch.keep_traces({"cell": CELL, "world_size": 1, "mode": "sim"}, out, rec, disk_logs / "logs" / "c.log")
    return rec


def test_a_trace_that_does_not_fit_is_not_kept_half(small_disk, tmp_path, capsys):
    disk = small_disk(16 * 1024)
    rec = _kept(tmp_path, disk)
    assert "trace_file" not in rec["details"] and list((disk / "traces").iterdir()) == []
    assert capsys.readouterr().err.strip() == (f"bench.runner: cannot keep {disk}/traces/{CELL}.json.gz: "
                                               "No space left on device; the record is kept without it")


def test_a_trace_cut_short_by_enospc_is_removed(tmp_path, monkeypatch, capsys):
    def half(src, dst):
        Path(dst).write_bytes(b"\x1f\x8b")   # the copy's first bytes, then the disk is full
        _full()
    monkeypatch.setattr("shutil.move", half)
    rec = _kept(tmp_path, tmp_path)
    assert "trace_file" not in rec["details"] and list((tmp_path / "traces").iterdir()) == []
    assert "No space left on device; the record is kept without it" in capsys.readouterr().err


def test_a_failed_run_says_the_logs_that_name_enospc(tmp_path):
    from bench.runner import fulldisk
    logs = tmp_path / "logs" / "fits"
    logs.mkdir(parents=True)
    (logs / "a.log").write_text("Traceback ...\nbench.records.atomic.WriteError: cannot write results/fits/a.json: "
                                "No space left on device\n\n")
    (logs / "b.log").write_text("fine\n")
    said = []
    assert fulldisk.explain(tmp_path, said.append) == said == [
        f"{logs}/a.log: bench.records.atomic.WriteError: cannot write results/fits/a.json: No space left on device"]


def test_a_failed_run_on_a_full_disk_says_the_disk_is_full(small_disk):
    from bench.runner import fulldisk
    disk = small_disk(0)
    (disk / "logs").mkdir()
    said = []
    fulldisk.explain(disk, said.append)
    assert len(said) == 1 and said[0].startswith(f"{disk}: ") and "No space left on device" in said[0]


def test_the_workflow_says_it_when_it_fails():
    text = (Path(__file__).resolve().parent.parent / "Snakefile").read_text()
    onerror = text.split("onerror:", 1)[1].split("\n\n", 1)[0]
    assert 'fulldisk.explain("results")' in onerror
