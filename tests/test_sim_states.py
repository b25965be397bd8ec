"""Model-state bytes per parameter in a simulated step match the known arithmetic.

Measured at the optimizer step's peak (weights, gradients and optimizer state all live), with
the CUDA rounding off so the bytes are exact:

- fp32 AdamW: 4 (weights) + 4 (gradients) + 8 (two fp32 moments) = 16 B/param
- mixed precision (autocast bf16) keeps the fp32 weights as the master copy: 16 B/param too;
  the 16-bit copies it makes are activations and temporaries, not model state
- pure bf16: 2 + 2 + 4 = 8 B/param
- 8-bit AdamW (bitsandbytes): 4 + 4 + 2 (uint8 moments) + 2 fp32 absmax per 256-element block
  for tensors of >= 4096 elements, fp32 moments below that, plus the two shared 256-entry maps
Torch's AdamW adds a 4-byte ``step`` tensor per parameter tensor.
"""
import math

import pytest

import bitsandbytes  # noqa: F401 - constants created outside the runs
import peft  # noqa: F401
from bench.cells import matrix
from bench.worker.sim import measure, simulate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    from tests.helpers import write_matrix
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"],
             "techniques": ["baseline", "amp-bf16", "bf16", "adamw8bit"]}
    cells = matrix.load(write_matrix(tmp_path_factory.mktemp("states"), {"s": study}))
    out = {}
    for _cell, spec in cells.items():
        rec, tracker, fake = measure.simulate_step(spec, cuda_model=False)
        model = fake.session.model
        numels = [p.numel() for p in model.parameters()]
        buffers = sum(b.numel() * b.element_size() for b in model.buffers())
        out[spec["techniques"][0]] = (tracker.phase_breakdown()["optimizer"], numels, buffers)
    return out


def per_param(technique, states):
    st, numels, buffers = states[technique]
    psi, n = sum(numels), len(numels)
    return ((st["parameters"] - buffers) / psi, st["gradients"] / psi, st["optimizer"], psi, n, numels)


@pytest.mark.parametrize("technique", ["baseline", "amp-bf16"])
def test_fp32_weights_with_adamw_hold_16_bytes_per_param(states, technique):
    w, g, opt, psi, n, _ = per_param(technique, states)
    assert (w, g) == (4, 4)
    assert opt == 8 * psi + 4 * n
    assert w + g + (opt - 4 * n) / psi == 16


def test_pure_bf16_holds_8_bytes_per_param(states):
    w, g, opt, psi, n, _ = per_param("bf16", states)
    assert (w, g) == (2, 2)
    assert opt == 4 * psi + 4 * n  # bf16 moments; the step counters stay fp32


def test_8bit_adamw_state(states):
    w, g, opt, psi, _, numels = per_param("adamw8bit", states)
    assert (w, g) == (4, 4)
    expected = sum(2 * k + 2 * 4 * math.ceil(k / 256) if k >= 4096 else 8 * k for k in numels) + 2 * 256 * 4
    assert opt == expected
    assert 2 < opt / psi < 2.1  # ~2 B/param: a quarter of fp32 Adam's 8


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    from tests.helpers import write_matrix
    study = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["rtx-4090"],
             "techniques": ["baseline", "zero1+w4", "zero2+w4", "zero3+w4", "fsdp+w4"]}
    cells = matrix.load(write_matrix(tmp_path_factory.mktemp("sharded"), {"s": study}))
    return {spec["techniques"][0]: simulate.run(spec, cuda_model=False) for spec in cells.values()}


# ZeRO and FSDP2 at world size 4 are no longer partitioned by formula: sim runs the rank's own step (DeepSpeed's
# engine; FSDP2's fully_shard), held against real gloo runs in tests/test_sim_deepspeed.py and
# tests/test_sim_ranks.py; the formula stays beside it (``formula_cross_check``)
@pytest.mark.parametrize("dist", ["zero1", "zero2", "zero3"])
def test_zero_stages_divide_the_states_on_the_rank_as_deepspeed_cuts_them(sharded, dist):
    """The rank's states in its optimizer step, fp32 weights at world size 4 (tiny-llama, 19,286,272
    weights): DeepSpeed's fp32 master partition (a quarter of the weights) and its two AdamW moments,
    one 4-byte step counter; ZeRO-1 and ZeRO-2 keep every weight, and in their gradient partition every
    parameter with an element in the rank's span whole (``grads_in_partition``: rank 1, which holds the
    embedding and the layers to its end, 9,708,544 elements, is the rank sim runs) beside the master's
    gradient; ZeRO-3 keeps a quarter of the weights (each padded to 4 rows) and its flat gradient
    partition beside the master's."""
    n = sharded["baseline"]["params_trainable"]
    quarter = 4 * n // 4
    rec = sharded[dist]
    d = rec["details"]
    assert d["zero_partitioning"].startswith("per rank") and d["rank_program"]["engine"] == dist
    states = d["phase_breakdown_bytes"]["optimizer"]
    assert states["optimizer"] == 3 * quarter + 4
    if dist == "zero3":
        assert d["rank_program"]["rank"] == 0
        assert 0 <= states["parameters"] - quarter <= 128 and states["gradients"] == 2 * quarter
    else:
        assert d["rank_program"]["rank"] == 1
        assert states["parameters"] == sharded["baseline"]["details"]["phase_breakdown_bytes"]["optimizer"]["parameters"]
        assert states["gradients"] == 4 * 9_708_544 + quarter
    assert d["unpartitioned"]["peak_bytes"] == sharded["baseline"]["peak_bytes"]
    assert rec["peak_bytes"] < sharded["baseline"]["peak_bytes"]
    assert sum(rec["breakdown_bytes"].values()) == rec["peak_bytes"]
    assert d["formula_cross_check"]["peak_bytes"] > 0


def test_fsdp_is_the_ranks_own_step_with_the_formula_beside_it(sharded):
    rec = sharded["fsdp"]
    assert rec["details"]["zero_partitioning"].startswith("per rank") and rec["details"]["rank_program"]["world_size"] == 4
    assert rec["details"]["formula_cross_check"]["peak_bytes"] > 0
    assert rec["details"]["unpartitioned"]["peak_bytes"] == sharded["baseline"]["peak_bytes"]
