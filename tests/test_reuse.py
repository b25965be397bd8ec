"""bench/records/reuse.py's one rule for stored records and searches, through ``ft-membench fit``'s own
lookups: the same engine code is reused, other library versions are reused and named (and
said up front), ``--resimulate`` simulates them again, other engine code never stands."""
import csv
import json
import shutil

from bench.fit import answer as fitanswer
from bench.fit import cells as fitcells
from bench.fit import stored as fitstored
from bench.records import reuse, seal
from tests.helpers import REPO

CELL = "qwen2.5-7b__sim__lora+gc+bf16"
GPU = "rtx-4090"


def stored(tmp_path, versions: dict):
    """A results folder holding the reference's record of CELL (made with ``versions``) and its
    fits.csv rows."""
    src = json.loads((REPO / "results" / "reference" / "cells" / f"{CELL}.json").read_text())
    src["benchmarks"][0]["extra_info"]["versions"] = versions
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / f"{CELL}.json").write_text(json.dumps(seal.sealed(src)))   # as the harness writes it
    shutil.copy(REPO / "results" / "reference" / "fits.csv", tmp_path / "fits.csv")
    return fitcells.specs("qwen2.5-7b", GPU, ["lora+gc+bf16"], None, None)


def test_the_rule():
    here = reuse.versions()
    assert reuse.accepts(dict(here), here) == (True, None)
    assert reuse.accepts(dict(here, torch="2.13.0+cu128"), here) == (True, None)  # a local label is no other version
    ok, note = reuse.accepts(dict(here, transformers="5.0.0"), here)
    assert ok and note == f"made with transformers 5.0.0 (installed: transformers {here['transformers']})"
    assert reuse.accepts(dict(here, transformers="5.0.0"), here, resimulate=True) == (False, None)
    assert reuse.accepts(dict(here, ft_membench_engine="0" * 16), here) == (False, None)
    assert reuse.accepts(None, here) == (False, None)


def test_other_library_versions_are_reused_named_and_said_first(tmp_path, monkeypatch):
    made = reuse.versions()
    here = dict(made, transformers="9.9.9")
    monkeypatch.setattr(reuse, "versions", lambda: here)  # what bench/fit/answer.py asks
    cells = stored(tmp_path, made)
    said = []
    lines = fitanswer.answer(cells, GPU, tmp_path, say=said.append, search=False)
    assert said and said[0].startswith("ft-membench: note: installed transformers 9.9.9 (the reference's "), said
    assert lines[0]["source"] == f"{tmp_path / 'cells' / CELL}.json (made with transformers {made['transformers']} " \
                                 "(installed: transformers 9.9.9))"
    doc, where = fitstored.stored_fits(cells[CELL], tmp_path, GPU, here)
    assert doc is not None and where.startswith(f"{tmp_path / 'fits.csv'} (made with transformers")


def test_resimulate_and_other_engine_code_are_not_reused(tmp_path):
    here = reuse.versions()
    cells = stored(tmp_path, dict(here, transformers="0.0.1"))
    paths = [tmp_path / "cells" / f"{CELL}.json"]
    assert fitstored.stored_record(cells[CELL], paths, here, GPU)[0] is not None
    assert fitstored.stored_record(cells[CELL], paths, here, GPU, resimulate=True) == (None, None)
    assert fitstored.stored_fits(cells[CELL], tmp_path, GPU, here, resimulate=True)[1] != f"{tmp_path / 'fits.csv'}"
    other = dict(here, ft_membench_engine="0" * 16)
    assert fitstored.stored_record(cells[CELL], paths, other, GPU) == (None, None)
    rows = list(csv.DictReader(open(tmp_path / "fits.csv")))
    assert any(r["cell"] == CELL and r["gpu"] == GPU for r in rows)  # there to be reused, and not
    doc, where = fitstored.stored_fits(cells[CELL], tmp_path, GPU, other)
    assert where is None or not where.startswith(str(tmp_path))
