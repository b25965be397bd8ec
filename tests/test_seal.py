"""Seals (bench/records/seal.py): a sealed document or a file under a manifest is used only as it was written;
the fit command, the results reader and the report refuse one edited after, the published reference is sealed
whole, and the harness seals what it writes."""
import json
import shutil
from pathlib import Path

import pytest

from bench.records import results, seal

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT / "results" / "reference"
CELL = "qwen2.5-7b__sim__qlora+gc"


def test_a_sealed_document_is_sealed_until_one_field_moves():
    doc = seal.sealed({"b": [1, 2.5, None], "a": {"x": "é"}})
    assert seal.doc_state(doc) == "sealed" and seal.doc_state({"a": 1}) == "unsealed"
    assert seal.doc_state(json.loads(json.dumps(doc, indent=3))) == "sealed"   # layout is not content
    doc["b"][1] = 2.25
    assert seal.doc_state(doc) == "edited"


def test_a_manifest_refuses_a_file_edited_or_added_after_it(tmp_path):
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "a.json").write_text('{"x": 1}')
    (tmp_path / "fits.csv").write_text("cell,gpu\na,h100\n")
    (tmp_path / "README.md").write_text("prose: not sealed")
    seal.write_manifest(tmp_path)
    assert seal.check(tmp_path) == [] and seal.problem(tmp_path / "fits.csv") is None
    (tmp_path / "README.md").write_text("prose edited")
    assert seal.check(tmp_path) == []
    (tmp_path / "fits.csv").write_text("cell,gpu\na,h200\n")
    (tmp_path / "cells" / "b.json").write_text("{}")
    bad = seal.check(tmp_path)
    assert any("fits.csv: edited after it was sealed" in b for b in bad)
    assert any("b.json: not among the files" in b for b in bad)
    (tmp_path / "cells" / "a.json").unlink()
    assert any("listed in" in b and "gone" in b for b in seal.check(tmp_path))


def test_the_published_reference_is_sealed_as_it_stands():
    """Every file of results/reference/ is as its manifest seals it: a rebuild of the reference ends with
    `python -m bench.records.seal manifest results/reference` (results/reference/README.md)."""
    assert seal.check(REF) == []


def _copy_reference(tmp_path) -> Path:
    ref = tmp_path / "reference"
    (ref / "cells").mkdir(parents=True)
    shutil.copy(REF / "cells" / f"{CELL}.json", ref / "cells")
    seal.write_manifest(ref)
    return ref / "cells" / f"{CELL}.json"


def test_a_reference_record_edited_with_the_fields_it_follows_from_is_an_error_answer(tmp_path):
    from bench.cells import matrix
    from bench.fit.stored import stored_record
    from bench.records import reuse
    spec = matrix.load(ROOT / "matrix" / "default.yaml")[CELL]
    path = _copy_reference(tmp_path)
    here = json.loads(path.read_text())["benchmarks"][0]["extra_info"]["versions"]
    rec, where = stored_record(spec, [path], here, "rtx-4090")
    assert rec["status"] == "ok" and where.startswith(str(path))
    doc = json.loads(path.read_text())
    r = doc["benchmarks"][0]["extra_info"]
    r["modelled_reserved_peak_bytes"] //= 2                 # halved with the replay it follows from: the record
    r["allocator_model"]["reserved_peak_bytes"] //= 2       # gate alone cannot tell (both agree)
    path.write_text(json.dumps(doc))
    rec, where = stored_record(spec, [path], here, "rtx-4090")
    assert rec["status"] == "error" and "edited after it was sealed" in rec["reason"]
    rs = results.read(path.parents[1])
    assert not rs.records and any("edited after it was sealed" in p.message for p in rs.problems)


def test_the_harness_seals_what_it_writes_and_the_fit_command_names_an_unsealed_record(tmp_path):
    from bench import conftest as harness
    from bench.fit.answer import keep_file
    doc = json.loads((REF / "cells" / f"{CELL}.json").read_text())
    out = tmp_path / "cells" / f"{CELL}.json"
    assert harness.write_record(None, CELL, out, {k: v for k, v in doc.items() if k != "seal"})
    assert seal.doc_state(json.loads(out.read_text())) == "sealed"
    assert keep_file(tmp_path / "kept.json", {"rows": []}, print)
    assert seal.doc_state(json.loads((tmp_path / "kept.json").read_text())) == "sealed"
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({k: v for k, v in doc.items() if k != "seal"}))
    assert seal.label(plain, json.loads(plain.read_text())) == " (unsealed)" and seal.problem(plain, doc) is None


def test_the_report_refuses_a_published_table_edited_after_it_was_sealed(tmp_path, capsys):
    from report import build
    ref = tmp_path / "reference"
    ref.mkdir()
    shutil.copy(REF / "table.csv", ref)
    seal.write_manifest(ref)
    with open(ref / "table.csv", "a") as fh:
        fh.write("\n")
    assert build.main([str(ref / "table.csv"), "--out", str(tmp_path / "r.html")]) == 2
    assert "edited after it was sealed" in capsys.readouterr().err


@pytest.mark.parametrize("cli", [["manifest"], ["check"]])
def test_the_command(tmp_path, cli):
    (tmp_path / "x.json").write_text("{}")
    if cli == ["check"]:
        assert seal.main(["check", str(tmp_path)]) == 1   # no manifest yet
        seal.write_manifest(tmp_path)
    assert seal.main([*cli, str(tmp_path)]) == 0


def test_a_published_folder_without_its_manifest_is_refused(tmp_path):
    path = _copy_reference(tmp_path)
    (path.parents[1] / seal.MANIFEST).unlink()   # an edit that removes the manifest passes nothing
    assert "has no SEALS.sha256" in seal.problem(path, None, path.parents[1])
    assert seal.problem(tmp_path / "elsewhere.json", None, path.parents[1]) is None


def test_a_reference_search_edited_after_it_was_sealed_is_searched_again(tmp_path, monkeypatch):
    from bench.fit import stored
    from bench.fit.cells import specs
    ref = tmp_path / "results" / "reference"
    ref.mkdir(parents=True)
    shutil.copy(REF / "fits.csv", ref)
    (ref / "cells").mkdir()   # the versions a table's search was made with are its cell record's
    shutil.copy(REF / "cells" / f"{CELL}.json", ref / "cells")
    seal.write_manifest(ref)
    monkeypatch.setattr(stored, "ROOT", tmp_path)
    monkeypatch.setattr(stored, "REFERENCE", ref)
    spec = specs("qwen2.5-7b", "rtx-4090", ["qlora+gc"], None, None)["qwen2.5-7b__sim__qlora+gc"]
    doc, where = stored.stored_fits(spec, tmp_path / "none", "rtx-4090")
    assert doc is not None and where.startswith(str(ref / "fits.csv"))   # sealed as published: it answers
    with open(ref / "fits.csv", "a") as fh:
        fh.write("\n")                                 # one more line: no longer the file that was sealed
    assert stored.stored_fits(spec, tmp_path / "none", "rtx-4090") == (None, None)


def test_a_manifest_rewritten_in_the_same_process_is_read_again(tmp_path):
    # the parsed manifest is kept per version of the file (one parse for the many records of an answer),
    # never past a rewrite: a file sealed again is accepted, one edited since is refused
    (tmp_path / "fits.csv").write_text("cell,gpu\na,h100\n")
    seal.write_manifest(tmp_path)
    assert seal.problem(tmp_path / "fits.csv") is None
    (tmp_path / "fits.csv").write_text("cell,gpu\na,h200\n")
    assert "edited after it was sealed" in seal.problem(tmp_path / "fits.csv")
    seal.write_manifest(tmp_path)
    assert seal.problem(tmp_path / "fits.csv") is None
    (tmp_path / "b.csv").write_text("x\n")
    assert "not among the files" in seal.problem(tmp_path / "b.csv")
    seal.write_manifest(tmp_path)
    assert seal.problem(tmp_path / "b.csv") is None
