"""Sim's per-rank FSDP1 step (``fsdp1``: ``FullyShardedDataParallel`` as accelerate wraps it,
bench/worker/dist.py ``wrap_fsdp1``) against real multi-process runs of the same tiny model on the
CPU, gloo, with the CUDA modelling off (``simulate.run(spec, cuda_model=False)``).

Each rank's step is compared event by event (every allocation of 4 KiB or more, in order, phase by
phase and step by step) and the peaks rebuilt from the two traces, gloo's reduce-scatter copies taken
out of the real one first (tests/rank_traces.py). What remains different, each held to its size:

- with peft's model, the rotary embedding's two 64-byte buffers and two 8-byte scalars, which the real
  rank makes inside its tracker and sim before it (144 B);
- with QLoRA, the constant tables bitsandbytes lifts to tensors while the real run loads (1,168 B;
  tests/test_sim_ranks.py) and its backward's dequantization, which sim casts at once.

The frozen root (LoRA leaves the embedding and the head without gradients): a real rank reshards it
at the end of backward; FSDP1 decides that by data pointer, which fake tensors do not have, so sim
gives them distinct ones (bench/worker/sim/fake_pointers.py). Without them sim kept the root's
65.5 MB of gathered weights into the optimizer step (measured 2026-11-27: 107,300,032 B against the
real rank's 38,861,136 B).
"""

import pytest

from bench.cells import matrix
from tests.rank_traces import rank_and_real_allocations, rank_and_real_peaks
from tests.test_sim_ranks import QLORA_CONSTANTS

pytestmark = pytest.mark.slow
CELLS = ["fsdp1+w4", "lora+fsdp1+w2", "qlora+fsdp1+amp-bf16+w2"]
PEFT_BUILD_BYTES = 2 * 64 + 2 * 8


def tolerance(cell: str) -> int:
    if "qlora" in cell:
        return QLORA_CONSTANTS
    return PEFT_BUILD_BYTES if "lora" in cell else 0


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    import bitsandbytes  # noqa: F401
    import peft  # noqa: F401

    from bench.worker.sim import simulate
    from tests.helpers import launch_all, write_matrix
    folder = tmp_path_factory.mktemp("fsdp1")
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": CELLS, "batch_size": 2, "seq_len": 32}
    cells = matrix.load(write_matrix(folder, {"s": study}))
    specs = [cells[f"tiny-llama__cpu__{t}"] for t in CELLS]
    real = launch_all(specs, folder)
    return {t: (r, simulate.run(s, cuda_model=False)) for t, r, s in zip(CELLS, real, specs)}


@pytest.mark.parametrize("cell", CELLS)
def test_each_fsdp1_rank_allocates_as_the_real_rank_does(pairs, cell):
    ours, theirs = rank_and_real_allocations(*pairs[cell], qlora="qlora" in cell)
    assert ours == theirs


@pytest.mark.parametrize("cell", CELLS)
def test_the_fsdp1_ranks_peaks_equal_the_real_ranks(pairs, cell):
    real, sim = pairs[cell]
    (sim_peak, sim_phases, sim_at_peak), (peak, by_phase, at_peak) = rank_and_real_peaks(real, sim)
    assert 0 <= peak - sim_peak <= tolerance(cell)
    assert set(by_phase) == set(sim_phases) and all(0 <= by_phase[p] - sim_phases[p] <= tolerance(cell) for p in by_phase)
    assert set(at_peak) == set(sim_at_peak)
    assert all(abs(at_peak[c] - sim_at_peak[c]) <= tolerance(cell) for c in at_peak)


def test_a_frozen_root_is_resharded_before_the_optimizer_step(pairs):
    """Under LoRA the root unit (embedding, final norm, head) gets no gradient; the real rank frees its
    gathered weights at the end of backward, and so must sim's: the optimizer phase holds the shards,
    the adapters' state and nothing gathered."""
    real, sim = pairs["lora+fsdp1+w2"]
    opt = sim["phase_peak_bytes"]["optimizer"]
    assert 0 <= real["phase_peak_bytes"]["optimizer"] - opt <= PEFT_BUILD_BYTES
    assert opt < sim["phase_peak_bytes"]["backward"] / 3


@pytest.mark.parametrize("cell", CELLS)
def test_the_record_is_the_fsdp1_ranks_own(pairs, cell):
    _real, sim = pairs[cell]
    program = sim["details"]["rank_program"]
    assert program["engine"] == "fsdp1" and program["rank"] == 0 and program["world_size"] == int(cell.rsplit("+w", 1)[1])
    assert "formula_cross_check" in sim["details"]
