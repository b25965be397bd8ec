"""The seed case behind expandable_segments:True, reproduced in sim: Llama-3.1-8B, LoRA in bf16,
batch 1, batches growing step by step (padding-growing) against packed full rows, each with
and without expandable segments, through the real launcher and worker. The records must show
the reserved staircase that never comes down, allocated memory going up and down, a lower
staircase with expandable segments, and where each GPU runs out; the trace lands beside them."""
from itertools import pairwise

import pytest

from bench.records import checks
from bench.runner import launch
from bench.cells import matrix

pytestmark = pytest.mark.slow
GPUS = ["h100-80gb", "a100-40gb", "rtx-4090"]
TECHNIQUES = ["lora+bf16+padding-growing", "lora+bf16+padding-growing+expandable-segments",
              "lora+bf16+packing"]


@pytest.fixture(scope="module")
def recs(tmp_path_factory):
    from tests.helpers import write_matrix
    folder = tmp_path_factory.mktemp("reserved")
    study = {"mode": "sim", "models": ["llama-3.1-8b"], "gpus": GPUS, "techniques": TECHNIQUES,
             "batch_size": 1, "seq_len": 4096, "steps": 2, "warmup_steps": 1, "timeout_s": 900,
             "exclude": [{"techniques": "baseline"}]}
    cells = matrix.load(write_matrix(folder, {"r": study}))
    out = {}
    for cell, spec in cells.items():
        rec = launch.run_cell(spec, folder / "logs" / f"{cell}.worker.log")
        assert rec["status"] == "ok" and checks.problems(rec) == [], rec["reason"] + rec["log_tail"]
        out["+".join(rec["techniques"])] = rec
    return out


def test_padding_growing_climbs_a_reserved_staircase_that_never_comes_down(recs):
    m = recs["lora+bf16+padding-growing"]["allocator_model"]
    steps = m["steady_state"]["steps_in_trace"]  # the repeats of the longest step after them stay on its stair
    res = m["step_reserved_peak_bytes"]
    assert res[:steps] == sorted(res[:steps]) and len(set(res[:steps])) == steps  # a new stair each longer step
    assert set(res[steps:]) == {res[steps - 1]} and m["steady_state"]["settled"]
    assert m["fragmentation_at_peak_bytes"] > 0.2 * m["allocated_peak_bytes"]
    rows = m["timeline"]["rows"]
    col = {c: i for i, c in enumerate(m["timeline"]["columns"])}
    after = [r for r in rows if r[col["step"]] >= 0]
    assert all(b[col["reserved"]] >= a[col["reserved"]] for a, b in pairwise(after))  # never down
    allocated = [r[col["allocated"]] for r in after]
    assert min(allocated[len(allocated) // 2:]) < 0.7 * max(allocated)  # allocated goes up and down
    assert recs["lora+bf16+padding-growing"]["details"]["trace_file"].endswith(".json.gz")


def test_expandable_segments_lower_the_staircase_for_the_same_live_bytes(recs):
    plain, grown = recs["lora+bf16+padding-growing"], recs["lora+bf16+padding-growing+expandable-segments"]
    assert grown["peak_bytes"] == plain["peak_bytes"]
    p, g = plain["allocator_model"], grown["allocator_model"]
    assert all(a < b for a, b in zip(g["step_reserved_peak_bytes"][1:], p["step_reserved_peak_bytes"][1:]))
    assert g["fragmentation_at_peak_bytes"] < 0.2 * p["fragmentation_at_peak_bytes"]  # 1.2 against 11.1 GiB


def test_packing_reserves_its_peak_at_once_and_every_gpu_says_where_it_runs_out(recs):
    m = recs["lora+bf16+packing"]["allocator_model"]
    assert len(set(m["step_reserved_peak_bytes"][1:])) == 1  # steady after the first step
    for rec in recs.values():
        first = rec["allocator_model"]["first_oom"]
        assert first["h100-80gb"] is None and first["rtx-4090"] is not None
        assert rec["verdicts"]["rtx-4090"] == "oom" and rec["verdicts"]["h100-80gb"] == "fits"
        assert {"step", "phase", "op", "bytes"} <= set(first["rtx-4090"])
