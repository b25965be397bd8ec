"""Reading a results folder never crashes and names every file it cannot use (bench/records/results.py)."""
import json

from bench.records import results
from tests.versus_helpers import CELLS, edit, folder


def messages(rs):
    return [str(p) for p in rs.problems]


def test_a_good_folder_has_every_record_and_no_problem(tmp_path):
    rs = results.read(folder(tmp_path / "a"))
    assert sorted(rs.records) == sorted(CELLS) and rs.problems == [] and rs.notes == []
    assert rs.specs["qwen2.5-7b__sim__lora"]["cell"] == "qwen2.5-7b__sim__lora"


def test_missing_folder_and_missing_cells_folder(tmp_path):
    assert messages(results.read(tmp_path / "nope")) == [f"{tmp_path / 'nope'}: no such results folder"]
    (tmp_path / "empty").mkdir()
    assert "no cells/ folder" in messages(results.read(tmp_path / "empty"))[0]
    (tmp_path / "empty" / "cells").mkdir()
    assert "no <cell>.json files" in messages(results.read(tmp_path / "empty"))[0]


def test_truncated_json_is_named_as_corrupt(tmp_path):
    root = folder(tmp_path / "a")
    path = root / "cells" / f"{CELLS[0]}.json"
    path.write_text(path.read_text()[:500])
    rs = results.read(root)
    assert CELLS[0] not in rs.records and len(rs.records) == len(CELLS) - 1
    (msg,) = messages(rs)
    assert msg.startswith(f"{CELLS[0]}.json: corrupt JSON (truncated or damaged)")


def test_files_without_a_benchmark_or_a_record(tmp_path):
    root = folder(tmp_path / "a")
    (root / "cells" / "x.json").write_text(json.dumps({"benchmarks": []}))
    (root / "cells" / "y.json").write_text(json.dumps({"benchmarks": [{"extra_info": {}}]}))
    (root / "cells" / "z.json").write_text("[1, 2]")
    assert sorted(messages(results.read(root))) == [
        "x.json: holds no pytest-benchmark benchmark (benchmarks[0])",
        "y.json: its benchmark carries no run record (extra_info without 'cell')",
        "z.json: holds no pytest-benchmark benchmark (benchmarks[0])"]


def test_contract_breaking_and_misfiled_records(tmp_path):
    root = folder(tmp_path / "a")
    edit(root, CELLS[0], lambda r: r["breakdown_bytes"].update(activations=r["breakdown_bytes"]["activations"] + 1))
    edit(root, CELLS[1], lambda r: r.pop("verdicts"))
    edit(root, CELLS[2], lambda r: r.update(cell="tiny-llama__cpu__gc"))
    msgs = sorted(messages(results.read(root)))
    assert msgs[0].startswith(f"{CELLS[1]}.json: breaks the record contract: missing key 'verdicts'")
    assert msgs[1].startswith(f"{CELLS[0]}.json: breaks the record contract: breakdown sums to")
    assert msgs[2] == f"{CELLS[2]}.json: holds the record of cell 'tiny-llama__cpu__gc', not '{CELLS[2]}'"


def test_a_stale_table_is_a_note_and_only_selects_by_substring(tmp_path):
    root = folder(tmp_path / "a")
    (root / "table.csv").write_text("cell,status\nqwen2.5-7b__sim__lora,ok\n")
    rs = results.read(root)
    assert rs.problems == [] and "table.csv is stale" in rs.notes[0]
    assert sorted(results.read(root, only=["__sim__"]).records) == sorted(c for c in CELLS if "__sim__" in c)
    assert "no cell whose id contains" in messages(results.read(root, only="zzz"))[0]
