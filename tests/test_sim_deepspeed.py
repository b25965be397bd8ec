"""Sim's ZeRO cells against real DeepSpeed (and FSDP2) runs of the same tiny model on the CPU,
at world size 1 and 2 (and 4, where sim is known to be under: TECHNIQUES_W4), with the CUDA modelling off (``simulate.run(spec, cuda_model=False)``).

Sim runs the step on one process and partitions it analytically (bench/worker/sim/sharding.py),
including DeepSpeed's bf16 path (fp32 master weights and moments). What remains different,
each bounded below by the size of its cause:

- AdamW's ``step`` counters: torch keeps a 4-byte tensor per parameter; DeepSpeed steps one flat
  partition per group, so it keeps one (sim counts 4 B per weight tensor: at most 4 x tensors).
- DeepSpeed's bookkeeping scalars in the step (a few bytes), its flat buffers' alignment padding
  and the partial gradient bucket (ipg buffer) kept between reductions at world size 2, and
  ZeRO-3's parameter-coordinator buffers ("other"): not modelled, under 0.1% of the peak here.
- ZeRO-3 at world size 1 and 2: the gathered layers sim adds are modelled per unit; DeepSpeed
  releases and prefetches by its bucket thresholds.
"""
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.runner import launch
from bench.spec import matrix

pytestmark = pytest.mark.slow
TECHNIQUES = ["zero1+bf16", "zero2+bf16", "zero2+bf16+w2", "zero3+bf16", "zero2+amp-bf16", "lora+zero2+bf16"]
# World size 4 (issue 34): sim's per-rank formula is under here, by causes world size 2 hides.
# Measured 2026-11-26 (tiny-llama, batch 2 x 32, gloo, buckets "auto" = hidden^2 as bench/worker/dist.py
# fills them): zero2+bf16+w4 -6.3% of the peak (real gradients at the peak 38.70 MB, sim 28.93 MB; the
# cause is not found yet: the 65,536-element reduce bucket is far too small to explain it, and at world
# size 2 the fp32 gradient partition and the whole bf16 gradient are both 38.57 MB, so w2 cannot tell);
# zero3+bf16+w4 -19.3% (the peak moves to the forward, where DeepSpeed holds every layer gathered at once,
# 48.2 MB of parameters: its live-parameter limit and reuse distance, 1e9 elements by default, exceed the
# model; sim gathers one unit). Known under-counts of the formula, not yet fixed: strict xfail, so a fix
# shows here.
TECHNIQUES_W4 = ["zero2+bf16+w4", "zero3+bf16+w4"]
STEP_COUNTERS = 4 * (9 * 4 + 3)  # tiny-llama's weight tensors, one 4-byte step each


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    import bitsandbytes  # noqa: F401
    import peft  # noqa: F401

    from bench.worker.sim import simulate
    from tests.helpers import write_matrix
    folder = tmp_path_factory.mktemp("ds")
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": [*TECHNIQUES, *TECHNIQUES_W4],
             "batch_size": 2, "seq_len": 32}
    cells = matrix.load(write_matrix(folder, {"s": study}))
    specs = [cells[f"tiny-llama__cpu__{t}"] for t in (*TECHNIQUES, *TECHNIQUES_W4)]
    with ThreadPoolExecutor(2) as pool:
        real = list(pool.map(lambda s: launch.run_cell(s, folder / f"{s['cell']}.log"), specs))
    return {t: (r, simulate.run(s, cuda_model=False)) for t, r, s in zip((*TECHNIQUES, *TECHNIQUES_W4), real, specs)}


@pytest.mark.parametrize("technique", TECHNIQUES)
def test_sim_partitions_as_deepspeed_holds_it(pairs, technique):
    real, sim = pairs[technique]
    assert real["status"] == "ok", real["reason"]
    r, s = real["breakdown_bytes"], sim["breakdown_bytes"]
    assert s["parameters"] == r["parameters"]
    assert s["activations"] == r["activations"]
    assert abs(s["optimizer"] - r["optimizer"]) <= STEP_COUNTERS
    assert abs(s["gradients"] - r["gradients"]) <= 0.003 * r["gradients"] + 1
    assert abs(sim["peak_bytes"] - real["peak_bytes"]) <= 0.001 * real["peak_bytes"]


@pytest.mark.xfail(strict=True, reason="sim's ZeRO formula under-counts at world size 4: ZeRO-2's gradients "
                   "at the peak and ZeRO-3's live gathered layers are not modelled (issue 34; see TECHNIQUES_W4)")
@pytest.mark.parametrize("technique", TECHNIQUES_W4)
def test_sim_partitions_as_deepspeed_holds_it_at_world_size_4(pairs, technique):
    real, sim = pairs[technique]
    assert real["status"] == "ok", real["reason"]
    assert abs(sim["peak_bytes"] - real["peak_bytes"]) <= 0.001 * real["peak_bytes"]


def test_bf16_zero_keeps_fp32_master_weights_and_moments(pairs):
    real, sim = pairs["zero2+bf16"]
    for rec in (real, sim):
        assert rec["details"]["dtypes"]["master_weights"] == ["float32"]
        assert rec["details"]["dtypes"]["optimizer_state"] == ["float32"]
        assert rec["details"]["dtypes"]["weights"] == ["bfloat16"]
    # 12 bytes per weight of optimizer state (fp32 master + two fp32 moments): the paper's K
    n = real["params_trainable"]
    assert abs(sim["breakdown_bytes"]["optimizer"] - 12 * n) <= STEP_COUNTERS
    assert sim["details"]["deepspeed_master"]["master_weight_bytes"] == 4 * n
