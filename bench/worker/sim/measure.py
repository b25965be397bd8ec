"""One simulated step, measured: the cell's single-process step (its sharding engine taken off)
under fake tensors, and what ``simulate.finish`` reads from it (``Measured``). The step
itself is bench/worker/train.py's, run in bench/worker/sim/fakestep.py's fake mode; a step
of many identical layers may instead be built from fewer (bench/worker/sim/layers.py), which
gives the same ``Measured``.
"""
from __future__ import annotations

from bench.worker.sim import fakestep, rankgroup
from bench.worker import optimizers, train


def single_process(spec: dict) -> dict:
    """The spec of the step sim runs: the cell without its sharding engine (one process)."""
    knobs = dict(spec["knobs"], dist=None, world_size=1)
    if (spec["knobs"]["dist"] or "").startswith("zero") and knobs["precision"] == "bf16":
        knobs["cast_module"] = "bf16"  # DeepSpeed's bf16 engine casts the whole module (peft's fp32 adapters too)
    return dict(spec, knobs=knobs, world_size=1, ds_config=None)


def simulate_step(spec: dict, cuda_model: bool = True):
    """(record fields, tracker, hook) of the cell's single-process step under fake tensors."""
    tracker = fakestep.sim_tracker(cuda_model=cuda_model)
    with fakestep.FakeRun(spec, tracker, cuda_model=cuda_model) as fake:
        out = train.train(spec, "cpu", tracker, sim=fake)
    return out, tracker, fake


class Measured:
    """What the simulated step gives ``finish``: the step's record fields (``out``, times
    dropped), the phases' breakdowns, FLOPs, the tracker (its trace and rounding), the step
    cost counter, the paged optimizer state, the session (None when the step was extended
    from fewer layers: bench/worker/sim/layers.py), the host's peak RSS, and the model's ``facts``
    (``model_facts``: what a sharded record reads off the built model, extended with the layers
    where the step was)."""

    def __init__(self, out, phases, flops, tracker, cost, paged, cuda_model: bool, session=None, rss=None,
                 facts=None):
        self.out, self.phases, self.flops, self.tracker = out, phases, flops, tracker
        self.cost, self.paged, self.cuda_model, self.session, self.rss = cost, paged, cuda_model, session, rss
        self.facts = facts


def model_facts(model, rounding) -> dict:
    """What a sharded cell's record reads off the built model (plain data: it crosses a fork):
    ``units`` (parameter and gradient bytes per gather unit, bench/worker/sim/sharding.py
    ``unit_bytes``: whole weights, ``whole_numel``, on a ZeRO-3 rank too), ``largest_param_bytes``,
    ``quant_state_bytes`` (bitsandbytes' state, replicated on every rank), ``weights_bytes`` and
    ``trainable_bytes`` (every weight, the trainable ones: what the collectives move), ``trainable_numels``
    (each trainable parameter's elements, in the model's order: a ZeRO-1/2 optimizer's one group)."""
    from bench.worker import dist as dist_mod
    from bench.worker.sim import sharding
    params = list(model.parameters())
    nbytes = [sharding.whole_numel(p) * p.element_size() for p in params]
    return {"units": [list(u) for u in sharding.unit_bytes(model, rounding)],
            "largest_param_bytes": max(nbytes, default=0),
            "quant_state_bytes": dist_mod.quant_state_bytes(model, rounding),
            "weights_bytes": sum(nbytes),
            "trainable_numels": [sharding.whole_numel(p) for p in params if p.requires_grad],
            "trainable_bytes": sum(n for n, p in zip(nbytes, params) if p.requires_grad)}


def measure(spec: dict, cuda_model: bool = True, per_rank: bool = True) -> Measured:
    """The cell's step under fake tensors, as ``finish`` reads it: one rank's own program where
    sim traces the cell's engine per rank (bench/worker/sim/rankgroup.py) and ``per_rank``, else
    the single-process step."""
    run_spec = spec if per_rank and rankgroup.traced(spec) else single_process(spec)
    out, tracker, fake = simulate_step(run_spec, cuda_model)
    phases = tracker.phase_breakdown()
    out.update(step_s_median=None, tokens_per_s=None)
    out["details"].pop("timed_s", None)  # fake time, and the load beside it
    out["details"].pop("timing_load", None)
    if run_spec is spec and rankgroup.traced(spec):  # the whole model sim built before the rank's shards: not
        out["details"]["build_peak_bytes"] = None   # what a launched rank holds (its load: details.load_phase)
    paged = paged_state_bytes(fake.session, spec["knobs"], tracker.rounding)
    return Measured(out, phases, fake.flops, tracker, fake.cost, paged, cuda_model, fake.session,
                    facts=model_facts(fake.session.model, tracker.rounding))


def paged_state_bytes(session, knobs: dict, rounding) -> int:
    """Bytes of the optimizer state a paged bitsandbytes optimizer keeps in CUDA unified memory
    (bench/worker/optimizers.py ``paged_state_tensors``): counted in the peak (it is resident on
    the device until evicted) but outside torch's allocator. Always live at the peak: allocated
    in the warm-up step, kept for the run."""
    tensors = optimizers.paged_state_tensors(session.optimizer, knobs["optimizer"].startswith("paged-"))
    return sum(rounding(t.untyped_storage().nbytes()) for t in tensors)
