"""One corrupt results/fits/<cell>.json does not block the report: the collector
writes fits.csv with an error row naming the file and why, and sets the file aside so that
Snakemake searches the cell again."""
import csv
import json

import pytest

from bench.search import fits, fits_csv
from bench.cells import matrix


@pytest.fixture
def sim_cells(matrix_file):
    return matrix.load(matrix_file({"s": {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s", "rtx-4090"],
                                          "techniques": ["lora"]}}))


@pytest.mark.parametrize("text", ['{"cell": "x", "rows": [', "\xff\xfe", "[1, 2]", '{"cell": 3}'])
def test_a_corrupt_fits_file_is_an_error_row_naming_it(tmp_path, sim_cells, text):
    cid = "tiny-llama__sim__lora"
    good = sim_cells["tiny-llama__sim__baseline"]
    ok = {"cell": good["cell"], "inputs_sha256": good["inputs_sha256"],
          "rows": [fits_csv.row(good, g, {"seq_answer": "fits", "max_seq_at_batch1": 512}) for g in good["verdict_gpus"]]}
    (tmp_path / f"{good['cell']}.json").write_text(json.dumps(ok))
    bad = tmp_path / f"{cid}.json"
    bad.write_bytes(text.encode("latin-1"))
    said = []
    n = fits_csv.collect([tmp_path / f"{good['cell']}.json", bad], sim_cells, tmp_path / "fits.csv", say=said.append)
    rows = list(csv.DictReader((tmp_path / "fits.csv").open()))
    assert n == len(rows) == 4
    mine = [r for r in rows if r["cell"] == cid]
    assert len(mine) == 2 and all(r["seq_answer"] == "error" and str(bad) in r["reason"] for r in mine)
    assert all(r["seq_answer"] == "fits" for r in rows if r["cell"] == good["cell"])
    assert not bad.exists() and bad.with_name(bad.name + ".corrupt").exists()
    assert len(said) == 1 and str(bad) in said[0]


def test_collect_command_writes_the_table_despite_a_corrupt_file(tmp_path, sim_cells, matrix_file, capsys):
    path = matrix_file({"s": {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"], "techniques": ["lora"]}})
    bad = tmp_path / "tiny-llama__sim__lora.json"
    bad.write_text("{truncated")
    assert fits.main(["--matrix", str(path), "--collect", str(bad), "--out", str(tmp_path / "fits.csv")]) == 0
    assert (tmp_path / "fits.csv").is_file() and str(bad) in capsys.readouterr().err
