"""A full disk or an unwritable folder leaves evidence and no partial file: every
write goes through bench/records/atomic.py, whose error is one line naming the path; the worker says
it and leaves no half-written record or trace."""
import errno
import json
import os

import pytest

from bench.records import atomic
from bench.worker import main as worker


def _full(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_names_the_path_and_leaves_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "rec.json"
    atomic.write_json(path, {"old": 1})
    monkeypatch.setattr(os, "fsync", _full)
    with pytest.raises(OSError) as err:
        atomic.write_json(path, {"new": 2})
    assert err.value.errno == errno.ENOSPC
    assert str(err.value) == f"cannot write {path}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rec.json"] and json.loads(path.read_text()) == {"old": 1}


def test_an_unwritable_folder_names_the_path(tmp_path, monkeypatch):
    def denied(*_a, **_k):
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(atomic.tempfile, "mkstemp", denied)
    with pytest.raises(OSError, match=f"cannot write {tmp_path}/x.csv: Permission denied"):
        atomic.write_text(tmp_path / "x.csv", "a\n")


def test_the_worker_says_it_could_not_write_its_record(tmp_path, monkeypatch, capsys, matrix_file):
    from bench.cells import matrix
    spec = matrix.load(matrix_file({"c": {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"],
                                          "techniques": ["baseline"]}}))["tiny-llama__cpu__baseline"]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    monkeypatch.setattr(worker.lifeline, "die_with_parent", lambda: None)
    monkeypatch.setattr(worker, "run", lambda s: (_ for _ in ()).throw(RuntimeError("boom")))
    monkeypatch.setattr(os, "fsync", _full)
    out = tmp_path / "out" / "rec.json"
    assert worker.main(str(tmp_path / "spec.json"), str(out)) == 1
    err = capsys.readouterr()
    assert f"bench.worker: cannot write {out}: No space left on device" in err.err
    assert "the record could not be written" in err.out.strip().splitlines()[-1]
    assert list((tmp_path / "out").iterdir()) == []


def test_a_trace_that_cannot_be_written_leaves_no_file(tmp_path, monkeypatch):
    out = tmp_path / "rec.json"

    def half(trace, path):
        open(path, "wb").close()    # a 0-byte trace, then the disk is full
        _full()
    monkeypatch.setattr(worker.alloctrace.replay, "dump", half)
    rec = {"_trace": {"events": []}, "_cuda_snapshot": None}
    with pytest.raises(OSError, match=f"cannot write the allocation trace {out}.trace.json.gz: No space left"):
        worker.write_trace(rec, out)
    assert list(tmp_path.iterdir()) == [] and "_trace" not in rec
