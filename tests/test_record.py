"""The record contract (bench/record.py): every key present, statuses and provenance
consistent, a breakdown that sums to the peak, and atomic writes."""
import json
import os

import pytest

from bench import record

SPEC = {"cell": "m__cpu__gc", "model": "m", "gpu": "cpu", "techniques": ["gc"], "mode": "cpu",
        "world_size": 1, "batch_size": 1, "seq_len": 8, "steps": 1, "warmup_steps": 1, "gpu_memory_bytes": 1 << 30}


def ok_record():
    rec = record.blank(SPEC)
    bd = dict.fromkeys(record.CATEGORIES, 10)
    rec.update(status="ok", peak_bytes=10 * len(bd), breakdown_bytes=bd, step_s_median=0.1, tokens_per_s=80.0,
               host_peak_rss_bytes=1)
    return rec


def test_blank_has_every_field_and_says_nothing_was_measured():
    rec = record.blank(SPEC)
    assert set(rec) == set(record.FIELDS)
    assert rec["peak_bytes"] is None and rec["tokens_per_s"] is None
    assert rec["provenance"] == "cpu-measured"


def test_ok_record_passes_and_breakdown_must_sum_to_peak():
    rec = ok_record()
    assert record.problems(rec) == []
    rec["peak_bytes"] += 1
    assert any(f"sums to {10 * len(record.CATEGORIES)}" in p for p in record.problems(rec))


def test_a_record_older_than_the_kv_cache_category_still_holds():
    """kv_cache was added for generation; a training record written before it has no KV cache."""
    rec = ok_record()
    del rec["breakdown_bytes"]["kv_cache"]
    rec["peak_bytes"] -= 10
    assert record.problems(rec) == []
    del rec["breakdown_bytes"]["other"]
    assert any("breakdown_bytes keys" in p for p in record.problems(rec))


def test_missing_categories_and_wrong_provenance_are_caught():
    rec = ok_record()
    del rec["breakdown_bytes"]["other"]
    rec["provenance"] = "cuda-measured"
    found = " | ".join(record.problems(rec))
    assert "breakdown_bytes keys" in found and "does not match mode 'cpu'" in found


def test_failure_records_need_a_reason_and_keep_the_last_line():
    rec = record.failure(SPEC, "error", "Traceback...\n  File x\nValueError: boom\n")
    assert rec["status"] == "error" and rec["reason"] == "ValueError: boom"
    assert record.problems(rec) == []
    rec["reason"] = ""
    assert record.problems(rec) == ["status 'error' without a reason"]
    with pytest.raises(AssertionError):
        record.failure(SPEC, "ok", "fine")


def test_write_atomic_replaces_whole_files_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "sub" / "r.json"
    record.write_atomic(path, {"a": 1})
    record.write_atomic(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert os.listdir(path.parent) == ["r.json"]
    with pytest.raises(TypeError):
        record.write_atomic(path, {"a": object()})  # unserialisable: old file must survive
    assert json.loads(path.read_text()) == {"a": 2}
    assert os.listdir(path.parent) == ["r.json"]
