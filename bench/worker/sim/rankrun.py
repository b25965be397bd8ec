"""Which rank sim runs for a sharded cell, and the formula beside that rank's own step.

sim runs one rank's program (bench/worker/sim/rankgroup.py); the record answers for the rank that peaks
highest, so sim runs that one:

- FSDP (FSDP2, FSDP1) and DeepSpeed ZeRO-3: rank 0, whose shards are the largest (each shard, each
  ZeRO-3 partition padded to rank 0's size);
- DeepSpeed ZeRO-1/2: the rank holding the most parameters whole in its gradient partition
  (bench/estimate/partition.py ``zero12_peak_rank``, from the model's trainable parameters in order);
- DeepSpeed ZeRO-2 with optimizer offload: which rank peaks depends on the device copies its offloaded
  gradients make, not on the partition sizes alone (tiny-llama at world size 2: rank 1, whose partition
  holds less), so every rank is run and the highest kept.

Beside the rank's own trace the record keeps the single-process step partitioned by formula
(``formula``: bench/estimate/partition.py), and how far the two differ.
"""
from __future__ import annotations

from bench.estimate import partition
from bench.worker.sim import sharding
from bench.worker.sim.measure import Measured, measure

ENGINE_NAMES = {"fsdp": "FSDP2", "fsdp-offload": "FSDP2", "fsdp1": "FSDP1", "zero1": "DeepSpeed ZeRO-1",
                "zero2": "DeepSpeed ZeRO-2", "zero3": "DeepSpeed ZeRO-3", "zero2-offload": "DeepSpeed ZeRO-2 with offload",
                "zero3-offload": "DeepSpeed ZeRO-3 with offload"}
ZERO12 = {"zero1", "zero2"}  # stage_1_and_2.py: ranks hold unequal gradient partitions
EVERY_RANK = {"zero2-offload"}
WHICH = {"zero12": "DeepSpeed ZeRO-1/2: the rank holding the most parameters whole in its gradient partition "
                   "(bench/estimate/partition.py zero12_peak_rank), whose peak is the largest",
         "every": "DeepSpeed ZeRO-2 with offload: every rank simulated, the one whose peak is highest kept",
         "zero": "rank 0, whose shards are the largest"}


def which_rank(dist: str) -> str:
    return WHICH["zero12" if dist in ZERO12 else "every" if dist in EVERY_RANK else "zero"]


def at_rank(spec: dict, facts: dict) -> dict:
    """The cell run as its peak rank: ZeRO-1/2's, from the model's trainable parameters; ``spec`` itself
    where that is rank 0."""
    if spec["knobs"]["dist"] not in ZERO12:
        return spec
    rank = partition.zero12_peak_rank(facts["trainable_numels"], spec["world_size"])
    return dict(spec, sim_rank=rank) if rank else spec


def zero(spec: dict) -> bool:
    return (spec["knobs"]["dist"] or "").startswith("zero")


def measured(spec: dict, cuda_model: bool, meanwhile=None) -> tuple[dict, Measured, Measured | None]:
    """(the spec of the rank run, its measured step, the single-process step beside it or None): each step
    extended from fewer layers where that verifies (bench/worker/sim/layers.py), else run whole.
    ``meanwhile`` runs while the rank's small steps run in their forks."""
    from bench.worker.sim import layers
    single = None
    if spec.get("cross_check", True):  # ZeRO's formula reads the single process's optimizer: its full step
        single = ((None if zero(spec) else layers.extended(spec, cuda_model, per_rank=False))
                  or measure(spec, cuda_model, per_rank=False))
    rank_spec = at_rank(spec, single.facts) if single is not None else spec
    m = layers.extended(rank_spec, cuda_model, meanwhile=meanwhile) or measure(rank_spec, cuda_model)
    peak = at_rank(spec, m.facts) if single is None else rank_spec
    if peak is not rank_spec:  # rank 0 is not the peak rank: that one's
        rank_spec, m = peak, layers.extended(peak, cuda_model) or measure(peak, cuda_model)
    if spec["knobs"]["dist"] in EVERY_RANK:
        for rank in range(1, spec["world_size"]):
            other = dict(spec, sim_rank=rank)
            o = layers.extended(other, cuda_model) or measure(other, cuda_model)
            if o.out["peak_bytes"] > m.out["peak_bytes"]:
                rank_spec, m = other, o
    return rank_spec, m, single


def formula(spec: dict, rank: Measured, single: Measured) -> dict:
    """The formula's per-rank figures over the single-process step ``single`` (bench/estimate/partition.py),
    the cross-check beside the rank's own trace: FSDP's units, ZeRO's with DeepSpeed's master weights and
    buffers as the settings size them."""
    n, dist = spec["world_size"], spec["knobs"]["dist"]
    if not zero(spec):
        return sharding.partition(single.phases, dist, n, rank.facts["units"], single.facts["quant_state_bytes"])
    rounding = single.tracker.rounding
    master = sharding.deepspeed_master_args(single.session, spec["knobs"], rounding, {})
    rule = partition.rank_rule(dist, n, single.facts["units"], single.facts["quant_state_bytes"],
                               sharding.zero_layout_of(single.session, spec, rounding), master,
                               "cuda" if single.cuda_model else "exact")
    return partition.per_rank(single.tracker.trace(spec["knobs"]["alloc_conf"]), rule)
