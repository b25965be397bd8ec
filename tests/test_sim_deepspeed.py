"""Sim's ZeRO cells against real DeepSpeed (and FSDP2) runs of the same tiny model on the CPU,
at world size 1, 2 and 4, with the CUDA modelling off (``simulate.run(spec, cuda_model=False)``).

Sim runs the step on one process and partitions it analytically (bench/estimate/partition.py),
including DeepSpeed's bf16 path (fp32 master weights and moments), ZeRO-2's gradient buffer as
DeepSpeed cuts it (``zero_layout``: every parameter with an element in the rank's partition, whole;
tiny-llama's embedding spans two ranks' partitions at world size 4) and ZeRO-3's buffers from init
and the units its reuse distance keeps gathered (``live_units``), at the moment of each phase where
the rank holds the most (``rank_moments``). What remains different, each bounded below by the size
of its cause:

- AdamW's ``step`` counters: torch keeps a 4-byte tensor per parameter; DeepSpeed steps one flat
  partition per group, so it keeps one (sim counts 4 B per weight tensor: at most 4 x tensors).
- DeepSpeed's bookkeeping scalars in the step (a few bytes) and ZeRO-3's parameter-coordinator
  buffers ("other"): under 0.1% of the peak here.
- sharded ZeRO-3: 64 (world size 2) and 96 (4) parameter bytes more in DeepSpeed's rank (not traced down).
- gloo's copy of each ZeRO-3 reduce-scatter's input, freed from gloo's thread at a time of its own
  (tests/rank_traces.py): at world size > 1 the real rank's peaks are read from its trace without it.
"""

import pytest

from bench.estimate import replay
from bench.cells import matrix
from tests.rank_traces import GLOO_COPY_OP, peaks

pytestmark = pytest.mark.slow
TECHNIQUES = ["zero1+bf16", "zero2+bf16", "zero2+bf16+w2", "zero3+bf16", "zero2+amp-bf16", "lora+zero2+bf16",
              "zero2+bf16+w4", "zero3+bf16+w2", "zero3+bf16+w4"]
# ZeRO-3 with optimizer and parameter offload: the step runs on the host, where a cpu run's count of the
# device stops (its optimizer phase reads 0), so forward, backward and the peak are compared
OFFLOAD = ["zero3-offload+bf16+w4"]
STEP_COUNTERS = 4 * (9 * 4 + 3)  # tiny-llama's weight tensors, one 4-byte step each


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    import bitsandbytes  # noqa: F401
    import peft  # noqa: F401

    from bench.worker.sim import simulate
    from tests.helpers import launch_all, write_matrix
    folder = tmp_path_factory.mktemp("ds")
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": [*TECHNIQUES, *OFFLOAD],
             "batch_size": 2, "seq_len": 32}
    cells = matrix.load(write_matrix(folder, {"s": study}))
    specs = [cells[f"tiny-llama__cpu__{t}"] for t in (*TECHNIQUES, *OFFLOAD)]
    real = launch_all(specs, folder)
    return {t: (r, simulate.run(s, cuda_model=False)) for t, r, s in zip((*TECHNIQUES, *OFFLOAD), real, specs)}


def rank_peaks(real: dict) -> tuple[int, dict]:
    """(peak, {phase: peak}) of the real peak rank's step, without gloo's reduce-scatter copies."""
    if real["world_size"] == 1:
        return real["peak_bytes"], real["phase_peak_bytes"]
    trace = replay.load(real["details"]["trace_file"])
    assert peaks(trace)[0] == real["peak_bytes"]  # the trace is the record's, whole
    peak, by_phase, _ = peaks(trace, GLOO_COPY_OP)
    return peak, {p: by_phase.get(p, 0) for p in real["phase_peak_bytes"]}


@pytest.mark.parametrize("technique", TECHNIQUES)
def test_sim_partitions_as_deepspeed_holds_it(pairs, technique):
    real, sim = pairs[technique]
    assert real["status"] == "ok", real["reason"]
    r, s = real["breakdown_bytes"], sim["breakdown_bytes"]
    # sharded ZeRO-3: 64 (w2) and 96 (w4) bytes more in DeepSpeed's (not traced down; under 128)
    sharded3 = technique.startswith("zero3") and real["world_size"] > 1
    assert abs(s["parameters"] - r["parameters"]) <= (128 if sharded3 else 0)
    assert s["activations"] == r["activations"]
    assert abs(s["optimizer"] - r["optimizer"]) <= STEP_COUNTERS
    assert abs(s["gradients"] - r["gradients"]) <= 0.003 * r["gradients"] + 1
    peak, phase_peaks = rank_peaks(real)
    assert abs(sim["peak_bytes"] - peak) <= 0.001 * peak
    if real["world_size"] > 1:   # every phase where partitioning acts, not the peak only (at world size 1
        # DeepSpeed's backward differs from the single process's by its own buffers; the peak is the step)
        for phase, real_bytes in phase_peaks.items():
            assert abs(sim["phase_peak_bytes"][phase] - real_bytes) <= 0.001 * real_bytes, phase


@pytest.mark.parametrize("technique", OFFLOAD)
def test_zero3_offload_per_rank_on_the_device(pairs, technique):
    # measured 2026-11-26: w4 peak 66,273,169 real, 66,277,644 sim (w2, not run here to keep the suite under 20 min:
    # 74,432,921 and 74,408,716)
    real, sim = pairs[technique]
    assert real["status"] == "ok", real["reason"]
    peak, phase_peaks = rank_peaks(real)
    for phase in ("forward", "backward"):
        r = phase_peaks[phase]
        assert abs(sim["phase_peak_bytes"][phase] - r) <= 0.001 * r, phase
    assert abs(sim["peak_bytes"] - peak) <= 0.001 * peak
    assert sim["breakdown_bytes"]["optimizer"] == real["breakdown_bytes"]["optimizer"] == 0  # on the host


def test_zero3_at_world_size_4_peaks_early_in_backward_as_the_rank_does(pairs):
    # measured 2026-11-26 (tiny-llama, batch 2 x 32, gloo): the rank's peak is early in backward, with the
    # forward's activations (11.19 MB) and the output head's whole gradient (16.38 MB) alive and the whole
    # model gathered (its reuse distance, 1e9 elements, keeps every unit); the single process's backward
    # peak is late. Before sim weighed every moment of the step (sharding.rank_moments) it was 19.3% under.
    real, sim = pairs["zero3+bf16+w4"]
    r, s = real["breakdown_bytes"], sim["breakdown_bytes"]
    assert max(real["phase_peak_bytes"], key=real["phase_peak_bytes"].get) == "backward"
    assert s["activations"] == r["activations"] > 0 and s["gradients"] == r["gradients"]
    assert abs(s["temporaries"] - r["temporaries"]) <= 16 and r["temporaries"] > 16 * 10**6
    assert sim["details"]["zero_layout"]["live_units"] == list(range(sim["details"]["zero_layout"]["units"]))


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
