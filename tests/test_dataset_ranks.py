"""``fit --dataset`` on several GPUs: each rank's batches are what accelerate hands that rank of the
trainer's DataLoader, and a rank's derived epoch (bench/dataset/stairs.py over rank 0's own FSDP2
program, or the ZeRO-1/2 rank's DeepSpeed program) equals a simulation of those steps event by event,
streams included."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.dataset import answer, order
from bench.estimate import replay
from bench.fit import cells
from tests.helpers import REPO
from tests.test_dataset_epoch import canonical, json_answer, lengths_command, sample_sims

MODEL, TECH, BATCH, GPU = "tiny-llama", "lora+bf16+fsdp+w2", 2, "rtx-4090"
LENS = [(i * 7919) % 1000 + 1 for i in range(203)]


@pytest.mark.parametrize("sampling", order.SAMPLINGS)
def test_the_ranks_take_turns_over_the_one_order(sampling):
    """accelerate's BatchSamplerShard: rank r gets batches r, r + N, ... of the order one process
    draws, the last ones filled from the start so every rank steps as often, with whole batches
    (even_batches)."""
    one = order.batches(LENS, 4, seed=42, sampling=sampling)
    assert order.rank_batches(LENS, 4, 1, seed=42, sampling=sampling) == [one]
    two = order.rank_batches(LENS, 4, 2, seed=42, sampling=sampling)
    assert len(two[0]) == len(two[1]) == 26 and len(one) == 51
    assert [b for pair in zip(*two) for b in pair][:50] == one[:50]
    # the short last batch and rank 1's last one are filled round from the start: every batch is whole
    assert two[0][25][:3] == one[50] and {len(b) for rank in two for b in rank} == {4}


def spec_at(seq, padded, steps=None):
    (spec,) = cells.specs(MODEL, GPU, [f"{TECH}+padding-growing" if padded else TECH], seq, BATCH).values()
    return dict(spec, cross_check=False, **({"steps": steps} if steps else {}))


@pytest.fixture(scope="module")
def rank_sims(tmp_path_factory):
    return sample_sims(tmp_path_factory, spec_at, BATCH)


def lifetimes(trace):
    """The events with each allocation numbered in order and each free naming the allocation it ends.
    FSDP2 frees an unsharded parameter by resizing its storage to 0 and makes it again by resizing it
    back (bench/worker/memresize.py): the simulation's storage serial comes back in a later step, where
    the derived epoch names a new one; the allocations, frees and what each free ends are the same."""
    c, live, out, made = trace["columns"], {}, [], 0
    for i, (kind, serial) in enumerate(zip(c["kind"], c["serial"])):
        if kind:
            live[serial], made = made, made + 1
        out.append((kind, live[serial], c["bytes"][i], c["step"][i], c["op"][i], c["phase"][i], c["category"][i],
                    c["stream"][i]))
    return out


@pytest.mark.slow
def test_a_ranks_derived_epoch_is_its_simulated_one(rank_sims):
    grown = rank_sims["grown"]
    assert grown["details"]["rank_program"]["world_size"] == 2   # rank 0's own program, not a partition
    got = rank_sims["family"].epoch([512, 1024, 1536, 2048])
    assert lifetimes(got) == lifetimes(grown["_trace"])
    assert canonical(got) != canonical(grown["_trace"])   # the resized storages (above): why lifetimes
    assert len(set(got["columns"]["stream"])) > 1         # FSDP2's all-gather and reduce-scatter streams
    assert replay.replay(got)["reserved_peak_bytes"] == replay.replay(grown["_trace"])["reserved_peak_bytes"]


@pytest.mark.slow
def test_fit_lengths_on_two_gpus(rank_sims, tmp_path):
    cmd, env = lengths_command(tmp_path, rank_sims["cache"], TECH, BATCH)
    doc = json_answer(cmd, env)
    ep = doc["epoch"]
    assert doc["world_size"] == 2 and doc["simulation"]["simulated"] == 0 and ep["steps"] == 10   # 20 batches, 2 ranks
    assert [r["rank"] for r in ep["ranks"]] == [0, 1] and {r["verdict"] for r in ep["ranks"]} == {"fits"}
    assert ep["reserved_peak_bytes"] == max(r["reserved_peak_bytes"] for r in ep["ranks"])   # the worst rank shown
    assert ep["reserved_peak_bytes"] == ep["ranks"][ep["rank"]]["reserved_peak_bytes"]
    assert 0 < ep["outside_allocator_bytes"] < 2 ** 30 and ep["capacity_bytes"] == answer.capacity(
        cells.specs(MODEL, GPU, [TECH], 2048, BATCH).popitem()[1]["verdict_gpus"][GPU], ep["outside_allocator_bytes"])
    need = doc["host_need"]   # the recipe's own record at the asked shape: rank 0 loads the checkpoint whole
    assert need["recipe_bytes"] > 0 and need["data_bytes"] is None and need["verdict"] is None
    text = subprocess.run([*cmd, "--host-mem", "1GB"], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert "on 2 x rtx-4090" in text.stdout and "ranks: rank 0 fits" in text.stdout
    assert text.returncode == 1 and "does not fit" in text.stdout.split("host memory on the node")[1]   # 2 runtimes > 1 GB


@pytest.mark.slow
@pytest.mark.parametrize("tech", ["lora+bf16+zero1+w2", "lora+bf16+zero2+w2", "lora+bf16+zero2-offload+w2"])
def test_a_zero12_ranks_derived_epoch_is_its_simulated_one(tmp_path_factory, tech):
    """DeepSpeed ZeRO-1/2 (offload too): the epoch derived from the rank's sample steps equals the rank's
    simulation of those steps, every allocation's lifetime and the reserved peak (tiny-llama at world size 2).
    ZeRO-3's did not (its gathered parameters' events: 24 more in the derived epoch, categories apart): refused."""
    def at(seq, padded, steps=None):
        (spec,) = cells.specs(MODEL, GPU, [f"{tech}+padding-growing" if padded else tech], seq, BATCH).values()
        return dict(spec, cross_check=False, **({"steps": steps} if steps else {}))
    sims = sample_sims(tmp_path_factory, at, BATCH)
    got, want = sims["family"].epoch([512, 1024, 1536, 2048]), sims["grown"]["_trace"]
    assert sims["grown"]["details"]["rank_program"]["world_size"] == 2
    assert lifetimes(got) == lifetimes(want)
    assert replay.replay(got)["reserved_peak_bytes"] == replay.replay(want)["reserved_peak_bytes"]


@pytest.mark.parametrize("recipe, why", [("qlora+zero3+w2", "differs from the rank's simulation"),
                                         ("lora+bf16+zero3-offload+w2", "differs from the rank's simulation")])
def test_an_engine_whose_epoch_is_unchecked_is_refused(tmp_path, recipe, why):
    """ZeRO-3 cells are traced per rank, but an epoch derived from a ZeRO-3 rank's trace is not its
    simulation: refused, named."""
    f = tmp_path / "lengths.txt"
    f.write_text("40\n700\n")
    out = subprocess.run([sys.executable, "-m", "bench.cli", "fit", MODEL, "--gpu", GPU, "--techniques",
                          recipe, "--seq", "2048", "--lengths", str(f), "--results", str(tmp_path / "r")],
                         capture_output=True, text=True, cwd=REPO, timeout=600,
                         env=dict(os.environ, FT_MEMBENCH_CACHE=str(tmp_path / "cache")))
    assert out.returncode == 2 and why in out.stderr and out.stdout == ""
