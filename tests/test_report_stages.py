"""The report's pipeline-stage section and the gpu_memory_utilization claim (report/stages.py,
report/stage_claim.py), on made-up records whose vLLM plans come from bench/cells/workloads.plan.
The numbers are invented to exercise the report; they measure nothing."""
from __future__ import annotations

import pytest

from bench.estimate import verdicts
from bench.cells import techniques, workloads
from report import GIB, build, claim, claims, stage_claim, stages, table
from tests.records import made, spec

L40S = 47576711168
KV_TOKEN = 57344  # Qwen2.5-7B, bf16


def rec(names, bd_gib: dict, **fields):
    knobs = techniques.knobs(names)
    sp = spec("m", "sim", names, mode="sim", verdict_gpus=("l40s",), batch_size=knobs["batch_size"] or 1,
              seq_len=knobs["seq_len"] or 2048, steps=1)
    return made(sp, {c: v * GIB for c, v in bd_gib.items()}, study="pipeline", **{"verdicts": {"l40s": "fits"}, **fields})


def vllm_rec(util, coresident_gib=0):
    p = workloads.plan(L40S, util, int(15 * GIB), int(1.2 * GIB), KV_TOKEN, 32768, coresident=coresident_gib * GIB)
    extra = [f"coresident{coresident_gib}"] if coresident_gib else []
    return rec(["vllm", f"util{util}", *extra], {"parameters": 15, "activations": 1.2},
               details={"vllm": {"plans": {"l40s": {**p, "max_num_batched_tokens": 8192}}}},
               verdicts={"l40s": "fits" if p["starts"] else "oom"})


def frame(train_gib):
    records = [rec(["lora", "gc", "bf16"], {"parameters": train_gib}),
               rec(["generate", "b8", "s2048", "bf16"], {"parameters": 15, "kv_cache": 4, "activations": 1},
                   phase_peak_bytes={"prefill": 20 * GIB, "decode": 19 * GIB},
                   details={"new_tokens": 32, "kv_bytes_per_token": KV_TOKEN}),
               vllm_rec(0.95), vllm_rec(0.8)]
    return table.to_frame(records)


def claim_row(df):
    return next(r for r in claims.evaluate(df) if r["key"] == "vllm-util")


def test_the_claim_holds_when_the_training_process_sits_in_the_window():
    """5 GiB of training (+ reserve) leaves 38.2 GiB free: under 0.95 x 44.3, over 0.8 x 44.3."""
    df = frame(5)
    row = claim_row(df)
    assert row["verdict"] == claim.HOLDS, row
    assert any("beside the fine-tune: 0.95 fails, 0.8 starts" in e for e in row["evidence"])
    assert "0.95" in row["statement"] and "0.8" in row["statement"] and str(stage_claim.LIMITS["from"]) in row["thresholds"]


def test_the_claim_does_not_hold_when_nothing_or_too_much_is_beside_it():
    row = claim_row(frame(20))  # 20 GiB of training: neither value starts beside it; alone both start
    assert row["verdict"] == claim.NOT, row
    assert any("alone: 0.95 starts, 0.8 starts" in e and "beside the fine-tune: 0.95 fails, 0.8 fails" in e
               for e in row["evidence"])


BLAS = verdicts.blas_workspace_bytes({"kind": "cuda"})  # a made-up card's cuBLAS workspaces (tests/records.py)


def test_the_replanned_beside_training_uses_its_peak_plus_the_reserve():
    plans = stages.stage_plans(frame(5))
    p = next(p for p in plans if p["util"] == 0.95)
    assert p["beside_train"]["coresident_bytes"] == 5 * GIB + verdicts.RESERVE_BYTES + BLAS
    assert p["beside_train"]["error"].startswith("Free memory on device")
    assert p["alone"]["starts"]


def test_the_page_has_the_stage_section_and_the_training_sections_leave_other_workloads_out():
    df = frame(5)
    assert list(stages.train_rows(df)["technique"]) == ["lora+gc+bf16"]
    html = build.render(df, commit="test", built_at="now")
    assert "Pipeline stages: fine-tune, inference, scoring" in html
    assert "generate+b8+s2048+bf16" in html and "Free memory on device" in html
    assert "57.3 kB" in html  # KV bytes per token of the generate row


def test_beside_another_stage_adds_to_the_memory_the_cell_already_names():
    df = table.to_frame([rec(["lora", "gc", "bf16"], {"parameters": 5}), vllm_rec(0.8, coresident_gib=3)])
    p = stages.stage_plans(df)[0]
    assert p["alone"]["coresident_bytes"] == 3 * GIB
    assert p["beside_train"]["coresident_bytes"] == 3 * GIB + 5 * GIB + verdicts.RESERVE_BYTES + BLAS


@pytest.mark.parametrize("util", [0.95, 0.8])
def test_stage_rows_say_whether_scoring_starts(util):
    rows = [r for r in stages.stage_rows(frame(5)) if r["technique"] == f"vllm+util{util}"]
    assert rows and rows[0]["alone"]["text"].startswith("starts")
