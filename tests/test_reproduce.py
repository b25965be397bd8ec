"""bench.reproduce reruns reference cells in the isolated worker and checks them field by field."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import reproduce
from bench.records import results

REPO = Path(__file__).resolve().parent.parent
REF = REPO / "results" / "reference"
# the quickest sim cell and the quickest cpu cell of the reference (about 6 s each alone)
SIM, CPU = "qwen2.5-7b__sim__amp-bf16", "tiny-llama__cpu__s128"


@pytest.mark.slow
def test_rerun_of_a_sim_and_a_cpu_cell_reproduces_the_reference(tmp_path):
    out = tmp_path / "rerun"
    proc = subprocess.run([sys.executable, "-m", "bench.reproduce", "--only", SIM, "--only", CPU, "--out", str(out)],
                          check=False, cwd=REPO, capture_output=True, text=True, timeout=600)
    lines = (out / "differences.txt").read_text().splitlines()
    assert lines[0].startswith(f"2 cells rerun into {out}"), proc.stdout + proc.stderr
    # Every byte must match. Throughput alone may leave the band on a machine shared with other
    # work (the band is for a quiet machine, bench/records/noise.py): such lines are reported, with
    # the load, and fail the command, but say nothing against the rerun's bytes.
    diffs = [ln for ln in lines[1:-1] if not ln.startswith("load average")]
    assert all(ln.startswith(f"{CPU}: ") and ln.split(": ")[1] in ("tokens_per_s", "step_s_median", "details.timed_s")
               for ln in diffs), diffs
    assert proc.returncode == (1 if diffs else 0) and lines[-1] == (f"{len(diffs)} differences" if diffs else
                                                                   "no difference: reproduced")
    rerun = results.read(out)
    assert rerun.problems == [] and sorted(rerun.records) == sorted([SIM, CPU])
    assert rerun.specs[SIM]["cell"] == SIM
    ref = json.loads((REF / "cells" / f"{SIM}.json").read_text())["benchmarks"][0]["extra_info"]
    assert rerun.records[SIM]["peak_bytes"] == ref["peak_bytes"]


def test_check_lists_a_changed_byte_and_a_missing_rerun_by_cell_and_field(tmp_path):
    ref = results.read(REF, only=[SIM, CPU])
    new = results.ResultSet(tmp_path, records={SIM: json.loads(json.dumps(ref.records[SIM]))})
    new.records[SIM]["breakdown_bytes"]["activations"] += 512
    lines = reproduce.check(ref, new, [SIM, CPU])
    assert lines[0].startswith(f"{SIM}: breakdown_bytes.activations: reference ")
    assert lines[1] == f"{CPU}: no rerun record"


def test_cells_the_matrix_no_longer_has_cannot_be_rerun_and_say_so():
    ref = results.read(REF, only=[SIM, CPU])
    cells, gone = reproduce.select(ref, {SIM: {}}, None)
    assert cells == [SIM] and gone == [f"{CPU}: in the reference, not in the matrix any more (cannot be rerun)"]
