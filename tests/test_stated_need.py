"""The need an answer states (bench/records/stated.py): the step's, or the model's load where a sharded
cell's load holds more on a GPU, so a row never reads "oom" beside a need under the card."""
import json
from pathlib import Path

from bench.estimate import measures
from bench.records import stated

REF = Path(__file__).resolve().parents[1] / "results" / "reference" / "cells"
GIB = 2**30


def _rec(cell):
    doc = json.loads((REF / f"{cell}.json").read_text())
    return doc["benchmarks"][0]["extra_info"] if "benchmarks" in doc else doc


def test_a_load_that_holds_more_than_the_step_is_the_need():
    """Llama-3.1-70B QLoRA + ZeRO-3 (reentrant) on an RTX 4090: its step needs 23.50 GiB, under the
    23.99 GiB card, but each rank loads the whole 4-bit model (full-per-rank): oom, and the need says why."""
    rec = _rec("llama-3.1-70b__sim__qlora+zero3+gc-reentrant+w4")
    step, _ = measures.need_bytes(rec, "rtx-4090")
    need, lower = stated.need_bytes(rec, "rtx-4090")
    load = rec["details"]["load_phase"]
    assert load["placement"] == "full-per-rank" and rec["verdicts"]["rtx-4090"] == "oom"
    assert step < rec["verdict_gpu_memory_bytes"]["rtx-4090"] < need and not lower
    assert need == load["placements"]["full-per-rank"]["gpu_bytes"] + rec["details"]["verdict_reserve_bytes"]


def test_where_the_step_holds_more_the_need_is_the_steps():
    for cell in ("llama-3.1-70b__sim__qlora+fsdp+gc+w2", "qwen2.5-7b__sim__qlora+gc"):
        rec = _rec(cell)
        assert stated.need_bytes(rec, "rtx-4090") == measures.need_bytes(rec, "rtx-4090")
    assert stated.need_bytes({}, "rtx-4090") == (None, False)
