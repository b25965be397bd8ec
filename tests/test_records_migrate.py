"""Records made before a knob joined the catalogue: brought to today's knob set, nothing else changed
(bench/records/migrate.py)."""
import copy
import json
from pathlib import Path

from bench.records import checks, migrate
from bench.cells import techniques

REF = Path(__file__).resolve().parents[1] / "results" / "reference"
GPU_RUN = REF / "cuda-h100" / "cells" / "llama-3.2-1b__h100-80gb__fsdp+bf16+w2.json"


def _record() -> dict:
    return json.loads(GPU_RUN.read_text())["benchmarks"][0]["extra_info"]


def test_each_added_knob_defaults_to_what_older_records_ran():
    for knob, value in migrate.ADDED_KNOBS.items():
        assert techniques.DEFAULT_KNOBS[knob] == value, knob


def test_a_record_without_the_added_knobs_gets_them_and_nothing_else(tmp_path):
    rec = _record()
    assert checks.problems(rec) == []
    old = copy.deepcopy(rec)
    for knob in migrate.ADDED_KNOBS:
        del old["knobs"][knob]
    assert any("catalogue's knobs" in p for p in checks.problems(old))   # the contract refuses it as it is
    spec = {"cell": rec["cell"], "knobs": dict(old["knobs"])}   # the cell spec stored beside it, as old
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"benchmarks": [{"extra_info": old, "params": {"cell_spec": spec}}]}))
    assert migrate.main(["--check", str(path)]) == 1
    assert sorted(migrate.migrate_file(str(path))) == sorted(2 * [f"{rec['cell']}: {k}" for k in migrate.ADDED_KNOBS])  # record and spec
    entry = json.loads(path.read_text())["benchmarks"][0]
    back = entry["extra_info"]
    assert back == rec and checks.problems(back) == []   # the measurements and the engine digest as they were
    assert entry["params"]["cell_spec"]["knobs"] == rec["knobs"]
    assert migrate.main(["--check", str(path)]) == 0


def test_a_record_missing_another_knob_stays_refused():
    rec = _record()
    del rec["knobs"]["gc"]
    assert migrate.migrate_record(rec) == []
    assert any("catalogue's knobs" in p for p in checks.problems(rec))


def test_every_stored_gpu_record_is_migrated():
    paths = [str(p) for p in REF.rglob("*.json") if "cuda-h" in str(p)]
    assert paths and migrate.main(["--check", *paths]) == 0
