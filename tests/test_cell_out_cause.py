"""A ``--cell-out`` record of a cell that could not be collected says why:
the UsageError pytest printed, not only "exit status 2"."""
import json
import subprocess
import sys

from tests.helpers import REPO, write_matrix

STUDY = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"], "techniques": ["gc"]}


def cell_out(tmp_path, matrix, cell):
    out = tmp_path / "rec.json"
    subprocess.run([sys.executable, "-m", "pytest", str(REPO / "bench" / "test_cells.py"), "-p", "no:cacheprovider",
                    "-q", "--matrix", str(matrix), "--cell", cell, "--cell-out", str(out)],
                   cwd=REPO, capture_output=True, text=True, timeout=300)
    return json.loads(out.read_text())["benchmarks"][0]["extra_info"]


def test_an_unknown_technique_and_an_unknown_cell_are_named_in_the_record(tmp_path):
    bad = write_matrix(tmp_path, {"p": dict(STUDY, techniques=["gc", "flashy"])}, name="bad.yaml")
    rec = cell_out(tmp_path, bad, "tiny-llama__sim__gc")
    assert rec["status"] == "error" and "flashy" in rec["reason"] and "could not be collected" in rec["reason"]
    good = write_matrix(tmp_path, {"p": STUDY})
    rec = cell_out(tmp_path, good, "nosuch__sim__gc")
    assert rec["status"] == "error" and "--cell nosuch__sim__gc: no such cell" in rec["reason"]
