"""Full-size sim cells through the real launcher and worker (one process each): records that
say what a CUDA device would allocate, a verdict per GPU, FLOPs, peers, and the proof that
nothing was allocated (the worker's host RSS), for a 7B and a 70B model."""
import pytest

from bench.records import checks
from bench.runner import launch
from bench.cells import matrix

pytestmark = pytest.mark.slow
GiB = 2**30
GPUS = ["h100-80gb", "a100-40gb", "rtx-4090", "t4"]
TECHNIQUES = ["baseline", "amp-fp16", "adafactor", "zero2+bf16+w2"]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    from tests.helpers import write_matrix
    folder = tmp_path_factory.mktemp("simcells")
    studies = {"sim-7b": {"mode": "sim", "models": ["qwen2.5-7b"], "gpus": GPUS, "techniques": TECHNIQUES,
                          "batch_size": 1, "seq_len": 256},
               "sim-70b": {"mode": "sim", "models": ["llama-3.1-70b"], "gpus": GPUS, "techniques": ["baseline"],
                           "batch_size": 1, "seq_len": 256}}
    cells = matrix.load(write_matrix(folder, studies))
    return {cell: launch.run_cell(spec, folder / f"{cell}.log") for cell, spec in cells.items()}


@pytest.mark.parametrize("cell", ["qwen2.5-7b__sim__baseline", "llama-3.1-70b__sim__baseline"])
def test_full_size_fp32_adamw_step(records, cell):
    rec = records[cell]
    assert rec["status"] == "ok", rec["reason"] + rec["log_tail"]
    assert checks.problems(rec) == []
    assert rec["provenance"] == "simulated" and rec["gpu"] == "sim"
    assert sum(rec["breakdown_bytes"].values()) == rec["peak_bytes"]
    assert rec["peak_bytes"] >= 16 * rec["params_total"]  # weights, gradients, two Adam moments
    assert rec["host_peak_rss_bytes"] < 4 * GiB  # nothing of the model was allocated
    assert set(rec["verdicts"]) == set(GPUS) and set(rec["verdicts"].values()) == {"oom"}
    assert rec["flops_per_step"] > 6 * rec["params_trainable"] * 256 * 0.9  # ~6 N T for a training step
    assert rec["phase_peak_bytes"]["optimizer"] == rec["peak_bytes"]  # AdamW's step sets the peak here
    assert len(rec["step_peak_bytes"]) == 2 and rec["step_s_median"] is None
    d = rec["details"]
    for phase, cats in d["phase_breakdown_bytes"].items():  # each phase's peak, by category
        assert sum(cats.values()) == rec["phase_peak_bytes"][phase]
    assert d["verdict_reserve_bytes"] > 0 and "fits" in d["verdict_rule"]
    assert {p["source"].split()[0] for p in d["peers"]} == {"deepspeed", "accelerate"}
    for peer in d["peers"]:
        assert peer["bytes"] > 0 and peer["ours_bytes"] == d["model_state_bytes"] and peer["difference"]


def test_model_states_of_the_peers_and_ours_agree_where_they_should(records):
    d = records["qwen2.5-7b__sim__baseline"]["details"]
    psi = records["qwen2.5-7b__sim__baseline"]["params_total"]
    acc = next(p for p in d["peers"] if "float32" in p["source"])
    ds2 = next(p for p in d["peers"] if "zero2" in p["source"])
    # accelerate: 16 B/param, without the output head; DeepSpeed ZeRO-2 on one GPU: 2 + 18 = 20 B/param
    assert ds2["bytes"] == 20 * psi
    assert 16 * 0.9 * psi < acc["bytes"] < 16 * psi
    assert 16 * psi <= d["model_state_bytes"] < 16.01 * psi  # rounding and step counters on top


def test_deepspeed_bf16_runs_in_sim_with_fp32_master_weights(records):
    """DeepSpeed's own bf16 ZeRO-2 engine, run as the peak rank of 2 runs it: its fp32 master partition (half
    the weights, 4 B each) and its two fp32 moments are the rank's optimizer state."""
    rec = records["qwen2.5-7b__sim__zero2+bf16+w2"]
    assert rec["status"] == "ok", rec["reason"]
    assert rec["details"]["dtypes"]["master_weights"] == ["float32"]
    assert rec["details"]["rank_program"]["engine"] == "zero2"
    states = rec["details"]["phase_breakdown_bytes"]["optimizer"]["optimizer"]
    assert abs(states - 3 * 4 * rec["params_trainable"] / 2) < 0.001 * states


@pytest.mark.parametrize("cell", ["qwen2.5-7b__sim__amp-fp16", "qwen2.5-7b__sim__adafactor"])
def test_what_sim_cannot_run_is_a_skipped_record(records, cell):
    rec = records[cell]
    assert rec["status"] == "skipped" and rec["reason"]
    assert checks.problems(rec) == []
