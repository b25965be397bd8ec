"""The record contract (bench/records/record.py): every key present, statuses and provenance
consistent, a breakdown that sums to the peak, the knobs and capacities the report reads,
the details keys the report reads, and atomic writes (bench/records/atomic.py)."""
import json
import os
import re

import pytest

from tests.records import SPEED_COST, SPEED_ESTIMATE, loss_details, replayed
from bench.records import atomic, checks, record
from bench.cells import matrix
from tests.helpers import REPO

SIM_STUDY = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s", "h100-80gb"], "techniques": ["zero3+w4"]}
CPU_STUDY = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["gc"]}


@pytest.fixture
def specs(matrix_file):
    """Real cell specs from bench.cells.matrix (the only maker of specs)."""
    return matrix.load(matrix_file({"c": CPU_STUDY, "s": SIM_STUDY}))


def ok_record(spec):
    rec = record.blank(spec)
    bd = dict.fromkeys(record.CATEGORIES, 10)
    details = {"optimizer_state_dtypes": ["float32"], "timing_load": {"contended": False}, **loss_details(spec)}
    rec.update(status="ok", peak_bytes=10 * len(bd), breakdown_bytes=bd, phase_peak_bytes=dict.fromkeys(record.PHASES, 60),
               params_total=100, params_trainable=100, details=details)
    if spec["mode"] == "sim":
        rec["verdicts"] = dict.fromkeys(spec["verdict_gpus"], "fits")
        details.update(verdict_rule="need <= 90%", verdict_reserve_bytes=1, verdict_notes={}, peers=[],
                       step_cost=dict(SPEED_COST), speed_model={"a100-80g": dict(SPEED_ESTIMATE)})
        if spec["knobs"]["dist"]:
            details["zero_partitioning"] = "analytic: zero3 at world size 4"
        replayed(rec)   # the allocator replay its verdicts follow from (bench/records/agreement.py)
    else:
        rec.update(step_s_median=0.1, tokens_per_s=80.0, host_peak_rss_bytes=1)
    return rec


def test_blank_has_every_field_and_what_the_report_needs(specs):
    cpu, sim = specs["tiny-llama__cpu__gc"], specs["tiny-llama__sim__zero3+w4"]
    rec = record.blank(cpu)
    assert set(rec) == set(record.FIELDS) | set(record.LATER_FIELDS)
    assert rec["peak_bytes"] is None and rec["tokens_per_s"] is None
    assert rec["provenance"] == "cpu-measured"
    assert rec["knobs"] == cpu["knobs"] and rec["knobs"]["gc"] is True
    assert rec["verdict_gpu_memory_bytes"] == {} and rec["gpu_memory_bytes"] == cpu["gpu_memory_bytes"]
    srec = record.blank(sim)
    assert srec["knobs"]["dist"] == "zero3" and srec["knobs"]["world_size"] == 4
    assert srec["verdict_gpu_memory_bytes"] == {"l40s": 47576711168, "h100-80gb": 85045477376}
    assert checks.problems(record.failure(sim, "skipped", "why")) == []


def test_ok_record_passes_and_breakdown_must_sum_to_peak(specs):
    rec = ok_record(specs["tiny-llama__cpu__gc"])
    assert checks.problems(rec) == []
    rec["peak_bytes"] += 1
    assert any(f"sums to {10 * len(record.CATEGORIES)}" in p for p in checks.problems(rec))


def test_a_record_older_than_the_kv_cache_category_still_holds(specs):
    """kv_cache was added for generation; a training record written before it has no KV cache."""
    rec = ok_record(specs["tiny-llama__cpu__gc"])
    del rec["breakdown_bytes"]["kv_cache"]
    rec["peak_bytes"] -= 10
    assert checks.problems(rec) == []
    del rec["breakdown_bytes"]["other"]
    assert any("breakdown_bytes keys" in p for p in checks.problems(rec))


def test_missing_categories_and_wrong_provenance_are_caught(specs):
    rec = ok_record(specs["tiny-llama__cpu__gc"])
    del rec["breakdown_bytes"]["other"]
    rec["provenance"] = "cuda-measured"
    found = " | ".join(checks.problems(rec))
    assert "breakdown_bytes keys" in found and "does not match mode 'cpu'" in found


def test_failure_records_need_a_reason_and_keep_the_last_line(specs):
    spec = specs["tiny-llama__cpu__gc"]
    rec = record.failure(spec, "error", "Traceback...\n  File x\nValueError: boom\n")
    assert rec["status"] == "error" and rec["reason"] == "ValueError: boom"
    assert checks.problems(rec) == []
    rec["reason"] = ""
    assert checks.problems(rec) == ["status 'error' without a reason"]
    with pytest.raises(AssertionError):
        record.failure(spec, "ok", "fine")


def test_knobs_must_be_there_and_say_what_ran(specs):
    rec = ok_record(specs["tiny-llama__sim__zero3+w4"])
    assert checks.problems(rec) == []
    del rec["knobs"]
    assert checks.problems(rec) == ["missing key 'knobs'"]
    rec = ok_record(specs["tiny-llama__sim__zero3+w4"])
    rec["knobs"] = {"gc": True}
    assert "are not the catalogue's knobs" in " ".join(checks.problems(rec))
    rec = ok_record(specs["tiny-llama__sim__zero3+w4"])
    rec["world_size"] = 2
    assert "knobs say world_size 4, the record ran 2" in checks.problems(rec)


def test_ok_sim_records_need_verdicts_for_their_gpus(specs):
    rec = ok_record(specs["tiny-llama__sim__zero3+w4"])
    rec["verdicts"] = None
    assert any("an ok sim record has verdicts" in p for p in checks.problems(rec))
    rec["verdicts"] = {"l40s": "fits"}
    assert "verdicts for ['l40s'] but capacities for ['h100-80gb', 'l40s']" in checks.problems(rec)
    rec["verdicts"] = {"l40s": "fits", "h100-80gb": "maybe"}
    assert any("is not {gpu: fits|tight|oom}" in p for p in checks.problems(rec))
    rec = ok_record(specs["tiny-llama__sim__zero3+w4"])
    rec["verdict_gpu_memory_bytes"] = {}
    assert any("judged against at least one GPU" in p for p in checks.problems(rec))
    cpu = ok_record(specs["tiny-llama__cpu__gc"])
    cpu["gpu_memory_bytes"] = None
    assert any("not the capacity of the cpu device" in p for p in checks.problems(cpu))


def test_details_the_report_reads_are_checked(specs):
    rec = ok_record(specs["tiny-llama__sim__zero3+w4"])
    del rec["details"]["verdict_rule"], rec["details"]["zero_partitioning"]
    rec["details"]["peers"] = "none"
    found = checks.problems(rec)
    assert "details.verdict_rule missing on a record of kind 'sim ok'" in found
    assert "details.zero_partitioning missing on a record of kind 'sim ok sharded'" in found
    assert "details.peers is str, the report reads a list" in found
    failed = record.failure(specs["tiny-llama__sim__zero3+w4"], "oom", "too big")
    assert checks.problems(failed) == []          # a failure need not carry what an ok record proves


def test_a_record_whose_model_holds_no_state_is_caught(specs):
    rec = ok_record(specs["tiny-llama__sim__zero3+w4"])
    rec["details"]["model_state_bytes"] = 123
    assert checks.problems(rec) == []
    rec["details"]["model_state_bytes"] = 0  # read from an empty phase (opt-in-bwd has no optimizer step)
    assert any("details.model_state_bytes is 0" in p for p in checks.problems(rec))


def test_the_contract_lists_every_details_key_the_report_reads():
    read = set()
    for path in (REPO / "report").glob("*.py"):
        text = path.read_text()
        assert not re.search(r"details\([^)]*\)\[", text), f"{path.name}: index details with .get(), listed keys only"
        read |= set(re.findall(r"details\([^)]*\)\.get\([\"'](\w+)[\"']", text))
    assert read == set(record.REPORT_DETAILS)


@pytest.mark.parametrize("field", record.FIELDS)
def test_problems_never_raises_on_corrupt_values(specs, field):
    for spec in specs.values():
        for junk in (None, True, -1, 1.5, "x", [], [1, "a"], {}, {"a": None}):
            rec = ok_record(spec)
            rec[field] = junk
            assert isinstance(checks.problems(rec), list)
    assert checks.problems([1, 2]) == ["a record is a JSON object, not list"]


def test_atomic_writes_replace_whole_files_and_leave_no_temporaries(tmp_path):
    path = tmp_path / "sub" / "r.json"
    atomic.write_json(path, {"a": 1})
    atomic.write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert os.listdir(path.parent) == ["r.json"]
    with pytest.raises(TypeError):
        atomic.write_json(path, {"a": object()})  # unserialisable: old file must survive
    assert json.loads(path.read_text()) == {"a": 2}
    assert os.listdir(path.parent) == ["r.json"]
    atomic.write_text(tmp_path / "t.csv", "a,b\r\n1,2\n")
    assert (tmp_path / "t.csv").read_bytes() == b"a,b\r\n1,2\n"  # written as given, no newline translation
    assert (tmp_path / "t.csv").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_one_atomic_writer():
    """bench/records/atomic.py is the only place that renames a temp file over a result."""
    users = [p.relative_to(REPO).as_posix() for p in [*REPO.glob("bench/**/*.py"), *REPO.glob("report/*.py")]
             if "os.replace(" in p.read_text()]
    assert users == ["bench/records/atomic.py"]
    assert not hasattr(record, "write_atomic")


def test_speed_model_entries_are_modelled_and_say_why_when_missing(specs):
    rec = ok_record(specs["tiny-llama__sim__zero3+w4"])
    model = rec["details"]["speed_model"]
    model["t4"] = {"step_s": None, "tokens_per_s": None, "provenance": "modelled", "how": "x", "why": "no bf16"}
    assert checks.problems(rec) == []
    model["t4"].pop("why")
    assert any("does not say why" in p for p in checks.problems(rec))
    model["t4"] = dict(SPEED_ESTIMATE, provenance="measured")
    assert any("not 'modelled'" in p for p in checks.problems(rec))
    model["t4"] = dict(SPEED_ESTIMATE, step_s=-1)
    assert any("positive number" in p for p in checks.problems(rec))
    del model["t4"]
    rec["details"]["step_cost"].pop("bytes_moved")
    assert checks.problems(rec) == ["details.step_cost lacks bytes_moved"]
