"""What counts as the same result on a rerun (bench/records/identical.py): field by field."""
import copy
import json
from pathlib import Path

from bench.records import identical, noise

REF = Path(__file__).resolve().parent.parent / "results" / "reference" / "cells"


def rec(cell):
    return json.loads((REF / f"{cell}.json").read_text())["benchmarks"][0]["extra_info"]


SIM, CPU = "qwen2.5-7b__sim__lora", "tiny-llama__cpu__baseline"


def fields(diffs):
    return [d.field for d in diffs]


def test_a_record_equals_itself_and_context_fields_are_not_compared():
    a = rec(SIM)
    b = copy.deepcopy(a)
    b.update(started_at="2030-01-01T00:00:00+00:00", wall_s=99.0, host_peak_rss_bytes=1,
             load_host_peak_rss_bytes=2, machine={"hostname": "elsewhere"}, log_tail="pid 4242")
    assert identical.compare(a, a) == [] and identical.compare(a, b) == []


def test_one_byte_anywhere_is_a_difference_named_by_its_path():
    a = rec(SIM)
    b = copy.deepcopy(a)
    b["breakdown_bytes"]["activations"] += 1
    b["details"]["peers"] = "changed"
    b["verdicts"]["a100-40gb"] = "fits"
    assert fields(identical.compare(a, b)) == ["breakdown_bytes.activations", "details.peers", "verdicts.a100-40gb"]


def test_cpu_throughput_within_the_band_is_the_same_and_outside_is_not():
    a = rec(CPU)
    inside, outside = copy.deepcopy(a), copy.deepcopy(a)
    inside["tokens_per_s"] *= 1 + noise.CPU_THROUGHPUT_BAND * 0.9
    outside["tokens_per_s"] *= 1 + noise.CPU_THROUGHPUT_BAND * 1.1
    assert identical.compare(a, inside) == []
    (diff,) = identical.compare(a, outside)
    assert diff.field == "tokens_per_s" and "noise band" in diff.note


def test_sim_throughput_fields_must_stay_null():
    a = rec(SIM)
    b = copy.deepcopy(a)
    b["tokens_per_s"] = 1.0
    assert fields(identical.compare(a, b)) == ["tokens_per_s"]


def test_fields_on_one_side_only_are_differences_not_crashes():
    a = rec(SIM)
    b = copy.deepcopy(a)
    b["newer_field"] = {"gc": False}       # a field the reference's contract did not have yet
    b["details"]["inputs_sha256"] = "ab"
    del b["flops_per_step"]
    diffs = identical.compare(a, b)
    assert fields(diffs) == ["details.inputs_sha256", "flops_per_step", "newer_field"]
    assert all("only" in d.note for d in diffs)


def test_versions_compare_without_local_build_labels():
    a = rec(SIM)
    b = copy.deepcopy(a)
    b["versions"]["torch"] = a["versions"]["torch"].split("+")[0] + "+cu128"
    assert identical.compare(a, b) == []
    b["versions"]["peft"] = "0.17.0"
    assert fields(identical.compare(a, b)) == ["versions.peft"]


def test_rank_host_rss_is_context_but_rank_peaks_are_not():
    a = rec("tiny-llama__cpu__zero3+w2")
    b = copy.deepcopy(a)
    b["details"]["ranks"][1]["host_peak_rss_bytes"] += 4096
    assert identical.compare(a, b) == []
    b["details"]["ranks"][1]["peak_bytes"] += 512
    assert fields(identical.compare(a, b)) == ["details.ranks[1].peak_bytes"]
