"""Sim mode: a full-size training step under fake tensors, as a CUDA device would allocate it.

    python -m bench.worker SPEC.json RECORD.json      # a cell of a `mode: sim` study
    simulate.run(spec) -> dict of record fields        # what bench/worker/main.py calls

The step is bench/worker/train.py's (same Session, transformers model, peft adapters, torch and
bitsandbytes optimizers, same loop), run on FakeTensorMode tensors of device cpu
(bench/worker/sim/fakestep.py): shapes, dtypes and storages exist, no memory is allocated, so a 70B
model simulates in a few hundred MiB of host memory (``host_peak_rss_bytes`` proves it).
The tracker (bench/worker/memtrack.py) counts every storage as the CUDA caching allocator would
(bench/worker/cuda_alloc.py), attention and kernel scratch as CUDA runs them (bench/worker/sim/cuda_kernels.py).

The record (provenance "simulated"):

- ``peak_bytes``, ``breakdown_bytes``, ``phase_peak_bytes``, ``step_peak_bytes``: per GPU.
  For ZeRO/FSDP cells the single-process step is partitioned analytically per rank
  (bench/worker/sim/sharding.py; ``details.zero_partitioning`` says so, ``details.unpartitioned`` keeps
  the step's own figures, and ``step_peak_bytes`` is None: no per-step series per rank).
- ``flops_per_step``: torch.utils.flop_counter's formulas over the first step after warm-up
  (one rank's micro-batches), so checkpointing's recomputation shows.
- ``modelled_reserved_peak_bytes``, ``allocator_model``: the step's allocation trace replayed
  through the CUDA caching-allocator model (bench/worker/alloctrace.py); the trace itself is
  written beside the record.
- ``verdicts`` {gpu: fits|tight|oom} for every GPU of the study, from one simulation, by the
  modelled reserved memory (bench/estimate/verdicts.py); ``details.verdict_rule``,
  ``details.verdict_reserve_bytes``, ``details.verdict_notes``. For ZeRO/FSDP cells the
  reserved peak per rank is estimated (partitioned peak + the replay's fragmentation).
- ``details.peers``: DeepSpeed's and accelerate's estimates beside ours (bench/worker/sim/peers.py).
- ``step_s_median``, ``tokens_per_s``: None; a fake step's time says nothing about a GPU.
- ``details.step_cost``: what the step costs a GPU (FLOPs per dtype, bytes moved, NF4
  dequantization, recomputation, communication; bench/worker/sim/stepcost.py), and
  ``details.speed_model`` {gpu: estimate}: the step time it models on each GPU of the study
  (bench/estimate/speedmodel.py; provenance "modelled", never a measurement).

Known differences from a real CUDA run, kept small and stated rather than patched over:
torch's AdamW keeps its 4-byte ``step`` counters on the host unless capturable/fused (sim
counts them: at most 512 B per parameter tensor); bitsandbytes' paged optimizers allocate
their state with cudaMallocManaged, outside torch's allocator: sim counts it in ``peak_bytes``
(resident device memory until evicted), names it in the trace, and the allocator replay keeps
it apart (``allocator_model.unified_peak_bytes``; ``details.paging`` per GPU: what stays
resident, what the driver pages to host memory); the CUDA context is the verdict's reserve; T4 (no bf16 kernels)
is flagged in ``details.verdict_notes``.
Cells sim cannot run are skipped records, decided when the matrix loads (bench/cells/techniques.py).
"""
from __future__ import annotations

from bench.worker.sim import peers, rankgroup, rankrun, sharding
from bench.worker import alloctrace, train
from bench.estimate import partition, speedmodel, verdicts
from bench.worker.sim.measure import Measured, measure

CUDA_MODEL = ("CUDA caching-allocator rounding (512-byte blocks), CUDA attention kernels "
              "(flash / memory-efficient footprint), CUDA kernel workspaces (flash backward, bnb gemm_4bit)")


def states_phase_of(phases: dict) -> str:
    """The phase at whose peak the model states (weights + gradients + optimizer state) are
    largest: the optimizer step, where all three live, unless the step runs inside backward
    (``opt-in-bwd``: the optimizer phase is empty and the states peak in backward)."""
    return max(phases, key=lambda p: (sum(phases[p][c] for c in ("parameters", "gradients", "optimizer")),
                                      p == "optimizer"))


def run(spec: dict, cuda_model: bool = True) -> dict:
    """Record fields for a sim cell (see the module docstring). What sim cannot run was
    decided when the matrix loaded (bench/cells/techniques.py ``skip_reason``). A decoder of many
    identical layers is simulated with fewer and extended where that is verified exact
    (bench/worker/sim/layers.py); anything else, and any extension that does not verify,
    runs the full step."""
    from bench.worker.sim import layers
    gathered: dict = {}
    if rankgroup.traced(spec):  # one rank's own program, and the single process beside it as a cross-check
        rank_spec, m, single = rankrun.measured(spec, cuda_model, meanwhile=lambda: gathered.update(peers.gather(spec)))
        return per_rank(rank_spec, m, single, gathered or peers.gather(spec))
    # the peers read the config only: they run here while the small steps run in their forks
    m = layers.extended(spec, cuda_model, meanwhile=lambda: gathered.update(peers.gather(spec)))
    return finish(spec, m if m is not None else measure(spec, cuda_model), gathered or None)


def finish(spec: dict, m: Measured, gathered_peers: dict | None = None) -> dict:
    """The record fields from the measured step: partitioning, the allocator replay, verdicts,
    peers (``peers.gather``'s figures where they were gathered already), step cost and speed model.
    A step run as one rank runs it is ``per_rank``'s."""
    out, tracker, phases = m.out, m.tracker, m.phases
    states_phase = states_phase_of(phases)
    states = phases[states_phase]
    out.update(flops_per_step=m.flops)
    details = out["details"]
    details.update(simulated=CUDA_MODEL if m.cuda_model else "cpu kernels, exact bytes",
                   phase_breakdown_bytes=phases)
    master_args = None
    if (spec["knobs"]["dist"] or "").startswith("zero"):
        master_args = sharding.deepspeed_master_args(m.session, spec["knobs"], tracker.rounding, details)
    if spec["knobs"]["dist"]:
        n, dist = spec["world_size"], spec["knobs"]["dist"]
        details["unpartitioned"] = {k: out[k] for k in ("peak_bytes", "breakdown_bytes", "phase_peak_bytes",
                                                        "step_peak_bytes")}
        units, whole = m.facts["units"], m.facts["quant_state_bytes"]
        layout = sharding.zero_layout_of(m.session, spec, tracker.rounding)
        if layout:
            details["zero_layout"] = layout
        trace = tracker.trace(spec["knobs"]["alloc_conf"])
        rule = partition.rank_rule(dist, n, units, whole, layout, master_args, "cuda" if m.cuda_model else "exact")
        details["per_rank_rule"] = rule  # the fits search applies it to interpolated traces (bench/search/shapes.py)
        part = partition.per_rank(trace, rule)
        phases = part.pop("phases")
        out.update(peak_bytes=part["peak_bytes"], breakdown_bytes=part["breakdown_bytes"],
                   phase_peak_bytes=part["phase_peak_bytes"], step_peak_bytes=None)
        states = sharding.partition({states_phase: phases[states_phase]}, dist, n, (), whole, layout)["breakdown_bytes"]
        if not any(states[c] for c in ("parameters", "gradients", "optimizer")):
            # everything offloaded at the step (fsdp-offload): the GPU's states are the gathered units
            states = max((sharding.partition({ph: phases[ph]}, dist, n, units, whole, layout)["breakdown_bytes"]
                          for ph in phases), key=lambda b: b["parameters"] + b["gradients"] + b["optimizer"])
        details.update(zero_partitioning=f"{sharding.LABEL}: {dist} at world size {n}",
                       zero_peak_phase=part["peak_phase"])
        if part["offloaded_bytes"]:
            details["offloaded_bytes"] = part["offloaded_bytes"]
            details["offloaded_how"] = "analytic: the offloaded categories' partition per rank, in host memory"
    profiles = spec["verdict_gpus"]
    details.update(verdict_reserve_bytes=verdicts.RESERVE_BYTES, blas_workspaces=verdicts.blas_details(profiles),
                   verdict_notes=verdicts.notes(spec["knobs"], profiles))
    if spec["knobs"]["dist"]:  # the trace is the single process's step: no per-rank replay
        model = alloctrace.attach(out, tracker, spec, {}, trace)
        reserved = out["peak_bytes"] + model["fragmentation_at_peak_bytes"]
        out["modelled_reserved_peak_bytes"] = reserved
        model["per_rank_estimate"] = ("modelled_reserved_peak_bytes = partitioned peak + this single-process "
                                      "replay's fragmentation at its peak; the figures here are the single process's")
        details["verdict_rule"] = verdicts.ESTIMATE_RULE
        details["load_phase"] = multi_process_load(m.facts, spec, model, profiles, out)
        outside = nccl_details(spec, details)
        out["verdicts"] = verdicts.after_load(verdicts.from_estimate(reserved, out["peak_bytes"], profiles, outside),
                                              details["load_phase"]["verdicts"])
        for gpu, v in details["load_phase"]["verdicts"].items():
            if v != "fits":
                details["verdict_notes"][gpu] = "; ".join(filter(None, (
                    details["verdict_notes"].get(gpu), f"oom while loading ({details['load_phase']['placement']})")))
    else:
        model = alloctrace.attach(out, tracker, spec, profiles)
        out["verdicts"] = verdicts.from_replay(model, profiles)
        details["verdict_rule"] = verdicts.RULE
        details["load_phase"] = verdicts.load_phase(model, profiles, out.get("load_host_peak_rss_bytes"))
        details["load_phase"].update(checkpoint(spec, out["params_total"]))  # what hostmem.py reads of the load
        loading = {g for g, v in details["load_phase"]["verdicts"].items() if v != "fits"}
        details["verdict_notes"].update({g: "; ".join(filter(None, (details["verdict_notes"].get(g),
                                         "oom while loading: the model does not fit on the card as it loads, "
                                         "before the first step"))) for g in loading})
        pages = verdicts.paging(model, profiles)
        if pages:
            details["paging"] = pages
            details["verdict_notes"].update({g: "; ".join(filter(None, (details["verdict_notes"].get(g), n)))
                                             for g, n in verdicts.paging_notes(pages).items()})
    return _costs(spec, m, out, states, gathered_peers)


def _costs(spec: dict, m: Measured, out: dict, states: dict, gathered_peers: dict | None) -> dict:
    """The record's peers, published figure, step cost and modelled speed (the last of ``finish``)."""
    details, profiles = out["details"], spec["verdict_gpus"]
    peak_phase = max(out["phase_peak_bytes"], key=out["phase_peak_bytes"].get)
    ours = peers.ours_summary(spec, states, out["breakdown_bytes"], peak_phase, out["params_total"],
                              out["params_trainable"])
    details["model_state_bytes"] = ours["model_states"]
    details["peers"] = peers.compare(spec, ours, gathered_peers)
    if m.paged:
        details["paged_state_bytes"] = m.paged
    if spec.get("published"):
        details["published"] = published(spec["published"], out["peak_bytes"], m.paged)
    cost = details["step_cost"] = m.cost.record(spec, m.facts)
    pages = details.get("paging", {})
    details["speed_model"] = {gpu: speedmodel.estimate(cost, profile, spec["knobs"],
                                                       pages.get(gpu, {}).get("paged_out_bytes", 0))
                              for gpu, profile in profiles.items()}
    out["host_peak_rss_bytes"] = max(train.host_peak_rss(), m.rss or 0)
    return out


def per_rank(spec: dict, m: Measured, single: Measured | None, gathered_peers: dict | None) -> dict:
    """A cell whose step sim ran as its peak rank runs it (bench/worker/sim/rankrun.py): the rank's own trace is the record's and the
    allocator replay's; the load as the engine places it (``multi_process_load``); the formula over
    the single-process step ``single`` beside it, with how far the two differ (None: a search's
    sample, which needs the rank's figures only)."""
    out, tracker, phases = m.out, m.tracker, m.phases
    n, dist, profiles = spec["world_size"], spec["knobs"]["dist"], spec["verdict_gpus"]
    details = out["details"]
    out.update(flops_per_step=m.flops)
    details.update(simulated=CUDA_MODEL if m.cuda_model else "cpu kernels, exact bytes", phase_breakdown_bytes=phases,
                   rank_program={"how": rankgroup.HOW, "rank": spec.get("sim_rank", 0), "world_size": n, "engine": dist,
                                 "which_rank": rankrun.which_rank(dist),
                                 "build": "no build peak: sim builds the whole model before the rank's shards, "
                                          "which a launched rank never holds (its load: details.load_phase)"},
                   zero_partitioning=f"per rank: {rankgroup.HOW}; the formula beside it in details.formula_cross_check",
                   zero_peak_phase=max(out["phase_peak_bytes"], key=out["phase_peak_bytes"].get))
    if single is not None:
        formula = rankrun.formula(spec, m, single)
        details["formula_cross_check"] = {
            "how": f"{sharding.LABEL}: {dist} at world size {n}", "peak_bytes": formula["peak_bytes"],
            "breakdown_bytes": formula["breakdown_bytes"], "peak_phase": formula["peak_phase"],
            "traced_minus_formula_bytes": out["peak_bytes"] - formula["peak_bytes"],
            "traced_over_formula": out["peak_bytes"] / formula["peak_bytes"] - 1 if formula["peak_bytes"] else None}
        details["unpartitioned"] = {k: single.out[k] for k in ("peak_bytes", "breakdown_bytes", "phase_peak_bytes",
                                                               "step_peak_bytes")}
    details.update(verdict_reserve_bytes=verdicts.RESERVE_BYTES, blas_workspaces=verdicts.blas_details(profiles),
                   verdict_notes=verdicts.notes(spec["knobs"], profiles))
    outside = nccl_details(spec, details)
    model = alloctrace.attach(out, tracker, spec, profiles, outside=outside)
    rank = spec.get("sim_rank", 0)
    model["per_rank"] = f"the trace replayed is rank {rank}'s own step, from its shards placed at load"
    details["verdict_rule"] = verdicts.RULE + f"; the trace is rank {rank}'s own step (" + rankrun.ENGINE_NAMES.get(dist, dist) + " over a fake process group" + (
        ", its shards, gradients and optimizer step on the host)" if dist == "fsdp-offload" else ")")
    details["load_phase"] = multi_process_load(m.facts, spec, model, profiles, out)
    out["verdicts"] = verdicts.after_load(verdicts.from_replay(model, profiles, outside),
                                          details["load_phase"]["verdicts"])
    for gpu, v in details["load_phase"]["verdicts"].items():
        if v != "fits":
            details["verdict_notes"][gpu] = "; ".join(filter(None, (
                details["verdict_notes"].get(gpu), f"oom while loading ({details['load_phase']['placement']})")))
    return _costs(spec, m, out, phases[states_phase_of(phases)], gathered_peers)


def nccl_details(spec: dict, details: dict) -> dict[str, int]:
    """NCCL's device buffers per GPU of a multi-GPU cell (bench/estimate/nccl.py), into
    ``details.nccl``; returns {gpu: bytes}, what the verdicts take off each GPU's capacity."""
    from bench.estimate import nccl
    got = nccl.by_gpu(spec["world_size"], spec["verdict_gpus"])
    if got:
        details["nccl"] = {"label": nccl.LABEL, "by_gpu": got}
    return {g: v["bytes"] for g, v in got.items()}


# how each sharding engine loads the model as people launch it (accelerate, TRL, the HF Trainer)
ENGINE_PLACEMENT = {"zero3": "zero-init", "zero3-offload": "zero-init-offload", "fsdp": "fsdp-meta",
                    "fsdp-offload": "fsdp-meta-offload", "fsdp1": "fsdp-meta"}
QUANTIZED_ZERO3 = "full-per-rank"  # transformers builds a quantized model without zero.Init (loadplan.py)


def engine_placement(knobs: dict) -> str:
    """The placement of the cell's load (``ENGINE_PLACEMENT``); a QLoRA base under ZeRO-3 loads whole on
    every rank's GPU before DeepSpeed partitions it (bench/estimate/loadplan.py ``full-per-rank``)."""
    dist = knobs["dist"]
    if knobs["adapter"] == "qlora" and dist in ("zero3", "zero3-offload"):
        return QUANTIZED_ZERO3
    return ENGINE_PLACEMENT.get(dist, "full-per-rank")


def checkpoint(spec: dict, params_total: int) -> dict:
    """The model's checkpoint as stored, for the load's host memory (bench/estimate/hostmem.py, loadplan.py):

    - ``checkpoint_bytes``: every weight, unquantized, in the config's ``torch_dtype`` (transformers'
      default fp32 where it names none): what the rank that reads it whole (rank 0 under FSDP's
      CPU-RAM-efficient load and under zero.Init) holds on the host as it loads;
    - ``largest_shard_bytes``: what a single process's own load holds of it at once, its largest
      shard file, min(checkpoint, 5 GB) (``loadplan.largest_shard``: ``SHARD_BYTES`` is 5 GB, the
      default ``max_shard_size`` of transformers 4.x's ``PreTrainedModel.save_pretrained`` and the Hub's
      layout; 4.x's ``PreTrainedModel._load_pretrained_model`` loads the ``resolved_archive_file`` list
      one shard at a time, transformers 5's memory-maps the shards and copies tensor by tensor).

    ``spec["model_config"]`` is the config file, or the model's folder holding its config.json (a
    model with its own code, trust_remote_code). Read once a call, and called once a cell (the
    one-process load, or ``multi_process_load``): the built model's config is no substitute, as
    building the model set its dtype to the run's (``from_config(dtype=...)``), not the stored one."""
    import json
    from pathlib import Path
    from bench.estimate import loadplan
    path = Path(spec["model_config"])
    raw = json.loads((path / "config.json" if path.is_dir() else path).read_text())
    size = {"float32": 4, "float16": 2, "bfloat16": 2}.get(raw.get("torch_dtype") or raw.get("dtype"), 4)
    stored = params_total * size
    return {"checkpoint_bytes": stored, "largest_shard_bytes": loadplan.largest_shard(stored)}


def multi_process_load(facts: dict, spec: dict, replayed: dict, profiles: dict, out: dict) -> dict:
    """The load phase of a ZeRO/FSDP cell per rank (bench/estimate/loadplan.py): every placement's bytes
    and verdicts at the cell's world size, and the one the cell's engine uses as launched by
    accelerate and the HF Trainer (``engine_placement``: zero.Init for ZeRO-3, each rank's whole
    quantized model for QLoRA under ZeRO-3, CPU-RAM-efficient loading for FSDP; ZeRO-1/2 keep the
    whole model on every rank anyway)."""
    from bench.estimate import loadplan
    units = facts["units"]  # the model's (bench/worker/sim/measure.py ``model_facts``)
    weights = sum(pb for pb, _ in units)
    largest = facts["largest_param_bytes"]
    unit = max((pb for pb, _ in units[1:-1]), default=0)  # one decoder layer
    n = spec["world_size"]
    stored = checkpoint(spec, out["params_total"])["checkpoint_bytes"]  # as read: rank 0's whole, or a shard a rank
    replicated = facts["quant_state_bytes"]  # whole on every GPU whatever the placement
    plans = loadplan.placements(weights, largest, unit, n, profiles, stored, replicated)
    chosen = engine_placement(spec["knobs"])
    return {"placement": chosen, "how": loadplan.PLACEMENTS[chosen], "weights_bytes": weights,
            "checkpoint_bytes": stored, "replicated_bytes": replicated,
            "largest_param_bytes": largest, "unit_bytes": unit, "world_size": n,
            "verdicts": plans[chosen]["verdicts"], "placements": plans, "provenance": loadplan.PROVENANCE,
            "single_process": verdicts.load_phase(replayed, profiles, out.get("load_host_peak_rss_bytes"))}


def published(pub: dict, peak: int, paged: int) -> dict:
    """A published figure for this setting beside ours, with the signed error. A published
    ``active`` or ``allocated`` figure (and one whose measure is not stated) is torch's allocator's count, which never holds what
    bitsandbytes pages outside it: ours is compared without those bytes (``simulated_peak_gib``,
    ``compared`` says so), and the full device peak stays beside it (``simulated_device_peak_gib``)."""
    pub = dict(pub)
    torch_counted = pub.get("measure") in ("active", "allocated", "not-stated")  # not stated: as allocated,
    # the scoreboard's rule (bench/corpus/scoreboard.py): a source that names no measure is compared as allocated
    compared = peak - paged if torch_counted else peak
    pub.update(simulated_peak_gib=compared / 2**30, simulated_device_peak_gib=peak / 2**30,
               compared="peak without paged optimizer state (outside torch's allocator)" if torch_counted and paged
               else "peak")
    pub["signed_error"] = pub["simulated_peak_gib"] / pub["peak_gib"] - 1
    return pub

