"""Sim's per-rank FSDP2 step (bench/worker/sim/rankgroup.py), with and without CPU offload, against real multi-process runs of
the same tiny model on the CPU, gloo, at world size 2 and 4, with the CUDA modelling off
(``simulate.run(spec, cuda_model=False)``: cpu kernels, exact bytes).

Each rank's program is compared event by event: every allocation of 4 KiB or more, in order,
phase by phase and step by step, and the peaks rebuilt from the two traces. Two differences are
named, and held here to their size:

- gloo's copy of each reduce-scatter's input: the real run's trace holds one storage of the
  reduce-scatter input's size per FSDP unit and step (the tracker sees it born under
  ``aten.split``), held by gloo past the collective. NCCL reduces in place, and the fake process
  group (as NCCL) makes none; it is gloo's, so it is taken out of the real trace first.
- the device mesh's rank tensors (40 bytes at world size 2, 80 at 4): the real run makes its mesh inside the
  tracker, sim before it.

With QLoRA, two more: bitsandbytes' backward dequantizes each 4-bit weight to fp32 and casts it in
sim, to the compute dtype at once on the CPU backend (transient, as single-process QLoRA shows);
and the constant tables bitsandbytes lifts to tensors while the real run loads (the NF4 code
twice, 64 B each, the nested quantization's dynamic map, 1 KiB, two 8-byte scalars: 1,168 B),
which sim builds as real tensors before its fake mode and its tracker start (``fakestep``: real
constants, so that fake ones do not leak into the process).

With CPU offload (``fsdp-offload``) the device and the host are one RAM here, in the real run and in
sim alike: both keep them apart as a GPU does (bench/worker/fsdpoffload.py: shards, gradient shards
and the optimizer step on the host, the shard's copy to the device made before each all-gather), so
the rank's device bytes and its host bytes are compared apart.

The rank's own peak is above what the single-process partition by formula gives (the formula
misses the reduce-scatter buffers and the unsharded gradients held beside them): the record keeps
both (``details.formula_cross_check``).
"""

import pytest

from bench.estimate import replay
from bench.cells import matrix
from tests.rank_traces import GLOO_COPY_OP, events, peaks, rank_and_real_allocations, rank_and_real_peaks

pytestmark = pytest.mark.slow
OFFLOAD = ["fsdp-offload+w2", "fsdp-offload+w4", "qlora+fsdp-offload+gc+w2"]
CELLS = ["fsdp+w2", "fsdp+w4", "qlora+fsdp+w2", "fsdp+amp-bf16+w2", *OFFLOAD]
MESH_BYTES = 128
QLORA_CONSTANTS = 2 * 64 + 1024 + 2 * 8


def tolerance(cell: str) -> int:
    return MESH_BYTES + (QLORA_CONSTANTS if "qlora" in cell else 0)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    import bitsandbytes  # noqa: F401
    import peft  # noqa: F401

    from bench.worker.sim import simulate
    from tests.helpers import launch_all, write_matrix
    folder = tmp_path_factory.mktemp("ranks")
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": CELLS}
    cells = matrix.load(write_matrix(folder, {"s": study}))
    specs = [cells[f"tiny-llama__cpu__{t}"] for t in CELLS]
    real = launch_all(specs, folder)
    return {t: (r, simulate.run(s, cuda_model=False)) for t, r, s in zip(CELLS, real, specs)}


@pytest.mark.parametrize("cell", CELLS)
def test_each_ranks_step_allocates_as_the_real_rank_does(pairs, cell):
    ours, theirs = rank_and_real_allocations(*pairs[cell], qlora="qlora" in cell)
    assert ours == theirs


@pytest.mark.parametrize("cell", CELLS)
def test_the_ranks_peak_and_breakdown_equal_the_real_ranks_but_for_gloos_copies(pairs, cell):
    real, sim = pairs[cell]
    (sim_peak, sim_phases, sim_at_peak), (peak, by_phase, at_peak) = rank_and_real_peaks(real, sim)
    assert sim_peak == sim["peak_bytes"] and sim_phases == {p: b for p, b in sim["phase_peak_bytes"].items() if b}
    assert 0 <= peak - sim_peak <= tolerance(cell)
    assert all(0 <= by_phase[p] - sim_phases[p] <= tolerance(cell) for p in sim_phases)
    assert set(at_peak) == set(sim_at_peak)
    assert all(abs(at_peak[c] - sim_at_peak[c]) <= tolerance(cell) for c in at_peak)


def test_gloos_copies_are_one_reduce_scatter_input_per_unit_and_step(pairs):
    real, _sim = pairs["fsdp+w2"]
    trace = replay.load(real["details"]["trace_file"])
    copies = [e for e in events(trace) if e[0] and e[5] == GLOO_COPY_OP]
    units, steps = 4 + 1, real["warmup_steps"] + real["steps"]  # tiny-llama's 4 layers and the root
    assert len(copies) == units * steps and {e[4] for e in copies} == {"backward"}
    with_copies = peaks(trace)[0]
    assert with_copies == real["peak_bytes"] > peaks(trace, GLOO_COPY_OP)[0]


@pytest.mark.parametrize("cell", CELLS)
def test_the_record_is_the_ranks_own_with_the_formula_beside_it(pairs, cell):
    real, sim = pairs[cell]
    d = sim["details"]
    assert d["rank_program"]["world_size"] == real["world_size"] and d["rank_program"]["rank"] == 0
    check = d["formula_cross_check"]
    assert check["traced_minus_formula_bytes"] == sim["peak_bytes"] - check["peak_bytes"]
    assert check["traced_minus_formula_bytes"] > 0  # the formula misses the reduce-scatter buffers
    assert sim["allocator_model"]["per_rank"]


def test_qlora_quantization_state_stays_whole_on_every_rank(pairs):
    """FSDP2 shards what a module registers as parameters (``fully_shard`` walks
    ``module.parameters()``: torch/distributed/fsdp/_fully_shard/_fsdp_init.py
    ``_get_managed_states``); bitsandbytes keeps the quantization state (absmax, the nested absmax,
    the code) as plain attributes of the weight (bitsandbytes/functional.py ``QuantState``). The
    real gloo rank holds it whole, and so does sim's rank (the event-by-event test above), and the
    formula beside it no longer divides it: at world size 2 its parameters are half the rest plus
    all of the state."""
    from bench.worker.sim import sharding
    step = {"optimizer": {"parameters": 1000 + 100, "gradients": 0, "optimizer": 0, "activations": 0,
                          "temporaries": 0, "other": 0, "kv_cache": 0}}
    assert sharding.partition(step, "fsdp", 2, (), replicated=100)["breakdown_bytes"]["parameters"] == 500 + 100
    assert sharding.partition(step, "zero3", 4, (), replicated=100)["breakdown_bytes"]["parameters"] == 250 + 100
    assert sharding.partition(step, "zero2", 4, (), replicated=100)["breakdown_bytes"]["parameters"] == 1100
    real, sim = pairs["qlora+fsdp+w2"]
    formula = sim["details"]["formula_cross_check"]
    assert formula["breakdown_bytes"]["parameters"] > 0 and real["status"] == "ok"


def test_a_simulated_rank_leaves_the_process_environment_as_it_was(pairs):
    """Sim's rank runs in the caller's process (the test process here, the warm engine's fork in a
    workflow): it must not leave RANK/MASTER_PORT behind, or every real multi-rank cell launched from
    that process later inherits one stale rendezvous port (two at once: EADDRINUSE)."""
    import os
    assert not {"RANK", "WORLD_SIZE", "MASTER_PORT"} & set(os.environ)


@pytest.mark.parametrize("cell", OFFLOAD)
def test_an_offloading_rank_holds_on_the_host_what_the_real_rank_does(pairs, cell):
    """FSDP2's CPUOffloadPolicy: the shards, their gradients and the optimizer state are host memory in
    both runs, to the byte; the device holds no optimizer state and steps nothing; before each
    all-gather the rank copies its shards to the device (torch/distributed/fsdp/_fully_shard/
    _fsdp_param.py ``all_gather_inputs``: ``.to(self.device)``), one copy per parameter of the unit."""
    real, sim = pairs[cell]
    assert real["status"] == "ok", real["reason"]
    for rec in (real, sim):
        assert rec["details"]["fsdp_offload"]["host_shard_tensors"] > 0
        assert rec["breakdown_bytes"]["optimizer"] == 0 and rec["phase_peak_bytes"]["optimizer"] == 0
    assert sim["details"]["offloaded_bytes"] == real["details"]["offloaded_bytes"]
    assert sim["details"]["offloaded_peak_bytes"] == real["details"]["offloaded_peak_bytes"] > 0
    host = real["details"]["offloaded_bytes"]
    assert host["optimizer"] > 0 and host["parameters"] > 0  # moments and shards on the host
    copies = [e for e in events(sim["_trace"]) if e[0] and e[3] >= 0 and e[5] == "aten._to_copy.default"
              and e[4] == "forward"]
    assert copies, "no copy of a host shard to the device before an all-gather"


def test_offloading_moves_the_states_off_the_device_and_the_formula_missed_half(pairs):
    """Offload against the same step without it (world size 2, full fine-tune): the device's peak loses the
    shards, gradients and moments. The single-process formula beside the rank's own program (what
    sim answered before the rank was traced) gave half of this rank's device peak."""
    (off, sim_off), (_on, sim_on) = pairs["fsdp-offload+w2"], pairs["fsdp+w2"]
    assert sim_off["peak_bytes"] < sim_on["peak_bytes"]
    assert sim_on["breakdown_bytes"]["optimizer"] > 0 == sim_off["breakdown_bytes"]["optimizer"]
    check = sim_off["details"]["formula_cross_check"]
    assert check["traced_over_formula"] > 0.9  # measured 2026-11-27: traced 136,920,192 B, formula 68,473,612 B
    assert off["status"] == "ok"
