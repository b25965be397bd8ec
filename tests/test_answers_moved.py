"""report/answers_moved.py: the verdicts and largest shapes that differ between two results
folders (made-up records; the before/after of a reference rebuild is its real use).

    pytest tests/test_answers_moved.py -q
"""
from __future__ import annotations

import csv
import json

from report import answers_moved
from tests.records import GIB, bench_json, sim

FITS_FIELDS = ("cell", "gpu", "seq_answer", "max_seq_at_batch1", "batch_answer", "max_batch_at_seq")


def folder(root, verdicts, seq):
    (root / "cells").mkdir(parents=True)
    rec = sim(["qlora", "gc"], {"parameters": 40}, verdicts, 1e15)
    bench_json(root / "cells" / f"{rec['cell']}.json", rec)
    with open(root / "fits.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FITS_FIELDS)
        w.writeheader()
        for gpu in verdicts:
            w.writerow({"cell": rec["cell"], "gpu": gpu, "seq_answer": "fits" if seq else "none",
                        "max_seq_at_batch1": seq or "", "batch_answer": "none", "max_batch_at_seq": ""})
    return root, rec["cell"]


def test_a_verdict_and_a_largest_context_that_moved_are_listed(tmp_path):
    old, cell = folder(tmp_path / "old", {"rtx-a6000": "oom", "h100-80gb": "fits"}, 0)
    new, _ = folder(tmp_path / "new", {"rtx-a6000": "fits", "h100-80gb": "fits"}, 3072)
    rows = answers_moved.moved(old, new)
    got = {r["gpu"]: r for r in rows}
    assert got["rtx-a6000"]["verdict_old"] == "oom" and got["rtx-a6000"]["verdict_new"] == "fits"
    assert got["rtx-a6000"]["max_seq_old"] == "none" and got["rtx-a6000"]["max_seq_new"] == "3072"
    assert got["h100-80gb"]["verdict_old"] == got["h100-80gb"]["verdict_new"] == "fits"  # its reach moved
    assert answers_moved.moved(old, old) == []
    md = answers_moved.to_markdown(rows, "old", "new")
    assert f"| {cell} | rtx-a6000 | oom -> fits |" in md


def test_old_answers_dumped_by_the_code_that_made_them_compare_as_the_folder(tmp_path):
    """Where the record contract changed, the new code refuses the old records; the old side is then its
    answers as the old checkout read them (--dump), and the comparison is the same as of the folder."""
    old, _ = folder(tmp_path / "old", {"rtx-a6000": "oom", "h100-80gb": "fits"}, 0)
    new, _ = folder(tmp_path / "new", {"rtx-a6000": "fits", "h100-80gb": "fits"}, 3072)
    dumped = tmp_path / "old.json"
    assert answers_moved.main(["--dump", str(old), "--out", str(dumped)]) == 0
    assert answers_moved.moved(dumped, new) == answers_moved.moved(old, new) != []
    assert answers_moved.main([str(dumped), str(new), "--out", str(tmp_path / "m.csv")]) == 0
    dumped.write_text("{}")
    assert answers_moved.main([str(dumped), str(new), "--out", str(tmp_path / "m.csv")]) == 2


def test_a_broken_record_is_a_row_not_a_gap(tmp_path):
    old, cell = folder(tmp_path / "old", {"t4": "oom"}, 0)
    new, _ = folder(tmp_path / "new", {"t4": "oom"}, 0)
    path = new / "cells" / f"{cell}.json"
    doc = json.loads(path.read_text())
    del doc["benchmarks"][0]["extra_info"]["peak_bytes"]
    path.write_text(json.dumps(doc))
    rows = answers_moved.moved(old, new)
    assert any(r["verdict_new"].startswith("unreadable") for r in rows)
    assert GIB == 2**30


def test_a_fits_table_that_is_not_utf8_is_refused_in_one_line(tmp_path, capsys):
    old, _ = folder(tmp_path / "old", {"rtx-a6000": "oom"}, 0)
    new, _ = folder(tmp_path / "new", {"rtx-a6000": "oom"}, 0)
    (new / "fits.csv").write_bytes(b"cell,gpu\n\xff\xfe,t4\n")
    assert answers_moved.main([str(old), str(new), "--out", str(tmp_path / "m.csv")]) == 2
    assert capsys.readouterr().err.strip() == \
        f"report.answers_moved: {new}/fits.csv: not UTF-8 (byte 0xff at offset 9)"
    assert not (tmp_path / "m.csv").exists()
    (new / "fits.csv").write_text("nothing,here\n1,2\n")
    assert answers_moved.main([str(old), str(new), "--out", str(tmp_path / "m.csv")]) == 2
    assert "fits.csv: cannot be read as the fits table: KeyError" in capsys.readouterr().err
