"""One gate for records (bench/records/checks.gate): every reader (the fit CLI, the fits
search's reuse, the table, the comparison page) refuses a record that breaks the contract or
was made from other inputs (digests, knobs, shape) than the spec it answers for."""
import json

import pytest

from bench.fit import stored
from bench.records import checks
from bench.search import fits
from tests.test_record import SIM_STUDY, ok_record


@pytest.fixture
def sim_spec(matrix_file):
    from bench.cells import matrix
    cells = matrix.load(matrix_file({"s": SIM_STUDY}))
    return cells["tiny-llama__sim__zero3+w4"]


def _kept(path, rec, here):
    rec = dict(rec, versions=dict(here))
    path.write_text(json.dumps({"benchmarks": [{"extra_info": rec}]}))
    return path


EDITS = {
    "no inputs_sha256 key": lambda r: r.pop("inputs_sha256"),
    "no knobs key": lambda r: r.pop("knobs"),
    "empty inputs_sha256": lambda r: r.update(inputs_sha256={}),
    "another model config": lambda r: r["inputs_sha256"].update(model_config="0" * 64),
    "other knobs": lambda r: r["knobs"].update(gc=not r["knobs"]["gc"]),
    "peak edited": lambda r: r.update(peak_bytes=1),
    "nan loss": lambda r: r["details"].update(final_loss=float("nan")),
}


@pytest.mark.parametrize("edit", EDITS)
def test_fit_never_answers_from_a_record_that_fails_the_gate(tmp_path, sim_spec, edit):
    here = {"torch": "2.13.0"}
    good = ok_record(sim_spec)
    assert checks.gate(good, sim_spec) == []
    assert stored.stored_record(sim_spec, [_kept(tmp_path / "good.json", good, here)], here)[0] is not None
    bad = json.loads(json.dumps(good))
    EDITS[edit](bad)
    assert checks.gate(bad, sim_spec)
    assert stored.stored_record(sim_spec, [_kept(tmp_path / "bad.json", bad, here)], here) == (None, None)


def test_fits_search_reuses_no_trace_of_a_record_that_fails_the_gate(tmp_path, sim_spec):
    rec = ok_record(sim_spec)
    rec["modelled_reserved_peak_bytes"] = 123
    rec["inputs_sha256"] = {}
    (tmp_path / "cells").mkdir()
    (tmp_path / "traces").mkdir()
    (tmp_path / "cells" / f"{sim_spec['cell']}.json").write_text(json.dumps({"benchmarks": [{"extra_info": rec}]}))
    (tmp_path / "traces" / f"{sim_spec['cell']}.json.gz").write_bytes(b"")
    assert fits._reuse(sim_spec, tmp_path) is None


def test_table_refuses_a_record_without_inputs_against_the_matrix(tmp_path, sim_spec):
    from report import table
    rec = ok_record(sim_spec)
    rec["inputs_sha256"] = {}
    path = tmp_path / f"{sim_spec['cell']}.json"
    path.write_text(json.dumps({"benchmarks": [{"extra_info": rec}]}))
    [row] = [r for r in table.load_records([path], {sim_spec["cell"]: sim_spec}) if r["cell"] == sim_spec["cell"]]
    assert row["status"] == "error" and "inputs_sha256" in row["reason"]


def test_gate_never_raises_on_a_broken_record_or_spec(sim_spec):
    assert checks.gate(["not a record"], {"cell": "x"}) and checks.gate({}, {"cell": "x"})
    assert checks.gate(ok_record(sim_spec), {"cell": "x"})   # a spec it cannot be checked against
