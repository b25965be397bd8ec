"""``fit --dataset`` with gradient accumulation: an optimizer step is ``accum`` micro-batches in a row of
the trainer's own order, judged at the step's longest sample (sim's accumulation splits one batch of one
width), and the derived epoch of an accumulating recipe equals its simulation event by event."""
from __future__ import annotations

import pytest

from bench.dataset import answer, command, epoch, order
from bench.estimate import replay
from bench.fit import cells
from tests.test_dataset_ranks import lifetimes

MODEL, TECH, BATCH, GPU = "tiny-llama", "lora+bf16+ga2", 4, "rtx-4090"
LENS = [(i * 7919) % 1000 + 1 for i in range(203)]


def test_a_step_is_accum_micro_batches_in_a_row():
    micro = order.rank_batches(LENS, 2, 1, seed=42, accum=2)[0]
    steps = answer.orders(LENS, 4, 42, "random", 1, accum=2)[0]
    assert len(micro) == 102 and len(steps) == 51                   # 203 samples: the last step has 3
    assert steps[0] == micro[0] + micro[1] and steps[-1] == micro[-2] + micro[-1] and len(steps[-1]) == 3
    assert epoch.padded_widths(LENS, steps)[0] == epoch.round_width(max(LENS[i] for i in micro[0] + micro[1]))
    # the random sampler's order does not depend on the batch size: the same samples a step as batch 4 alone
    assert steps == order.batches(LENS, 4, seed=42)
    # group_by_length's mega-batches count the accumulation (transformers' LengthGroupedSampler)
    grouped = order.rank_batches(LENS, 2, 1, seed=42, sampling="group_by_length", accum=2)[0]
    assert LENS.index(max(LENS)) in grouped[0] + grouped[1]


def test_twice_the_micro_batches_is_the_same_recipe_with_its_ga_replaced():
    assert command.with_accum("lora+gc+bf16", 2) == "lora+gc+bf16+ga2"
    assert command.with_accum("lora+ga2+bf16", 4) == "lora+bf16+ga4"


def spec_at(seq, padded, steps=None):
    (spec,) = cells.specs(MODEL, GPU, [f"{TECH}+padding-growing" if padded else TECH], seq, BATCH).values()
    return dict(spec, cross_check=False, **({"steps": steps} if steps else {}))


@pytest.mark.slow
def test_an_accumulating_recipes_derived_epoch_is_its_simulated_one(tmp_path):
    from bench.records import reuse
    from bench.search.sample_cache import SampleCache
    from bench.search.simpool import SimPool
    with SimPool(2) as pool:
        samples = SampleCache(pool, reuse.versions(), folder=tmp_path / "fit-samples")
        fam, _ = answer.family(spec_at, BATCH, True, samples.run_many, lambda m: None)
        (grown,) = pool.run_many([(spec_at(2048, True, steps=3), None)])
    assert spec_at(2048, True)["knobs"]["accum"] == 2
    got = fam.epoch([512, 1024, 1536, 2048])
    assert lifetimes(got) == lifetimes(grown["_trace"])
    assert replay.replay(got)["reserved_peak_bytes"] == replay.replay(grown["_trace"])["reserved_peak_bytes"]
