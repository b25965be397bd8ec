"""ZeRO and FSDP in sim mode: analytic partitioning over the simulated single-process step.

DeepSpeed and FSDP cannot run under fake tensors (they need a process group and real
collectives), so sim runs the cell's step on one process (same model, precision, adapters
and optimizer) and divides its byte counts per rank as the ZeRO paper does (Rajbhandari et
al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC'20, Fig. 1),
with N ranks:

    stage 1 (P_os):      optimizer state / N
    stage 2 (P_os+g):    + gradients / N
    stage 3 (P_os+g+p):  + parameters / N

For mixed-precision Adam (2-byte weights and gradients, K = 12 bytes of fp32 master weights
and moments per parameter) that is 2Ψ + 2Ψ + 12Ψ/N, 2Ψ + 14Ψ/N and 16Ψ/N bytes per GPU
(``paper_bytes_per_param``). Here the categories are the simulated ones, so the same rules
apply to whatever precision the cell runs in.

Applied at each phase's peak (forward, backward, optimizer step), then the largest wins:

- activations, other: unchanged: every rank runs its own micro-batch of the cell's batch size.
- optimizer-step temporaries: / N from stage 1 (each rank steps only its partition).
- zero2-offload / zero3-offload: optimizer state and its step on the host (0 on the GPU);
  zero3-offload also keeps the parameter partitions on the host; fsdp-offload (FSDP2's
  CPUOffloadPolicy) keeps parameter, gradient and optimizer shards on the host, and the
  optimizer steps there.
- QLoRA's quantization state (absmax, nested absmax, code): whole on every rank, never divided
  (``partition``'s ``replicated``).
- stage 3 and FSDP: in forward and backward the gathered parameters of the current and the
  next (prefetched) unit (embedding, each decoder layer, final norm + output head), and in
  backward one unit's full gradient before its reduce-scatter. ZeRO-3 holds more where its reuse
  distance keeps units gathered between their forward and backward (``live_units``): the whole of
  a model under 5e8 elements at DeepSpeed's default 1e9, the output head of a 7-70B one.

DeepSpeed's ZeRO optimizer (``zero*``; ``deepspeed_master``): whatever the model's dtype,
DeepSpeed gives its optimizer an fp32 master copy of every trainable weight
(``single_partition_of_fp32_groups`` in stages 1-2, ``fp32_partitioned_groups_flat`` in stage
3, a clone even when the weights are fp32), and the master's ``.grad`` is an fp32 copy of the
gradient partition. With ``bf16`` weights, gradients and the step's torch AdamW moments stay
bf16 in the single-process step, while DeepSpeed's moments are fp32 (they live on the fp32
master): 2Ψ + 2Ψ + 12Ψ for Adam, the paper's mixed-precision case, before partitioning.
Added to the step's categories wherever the optimizer state is alive: the master weights (4
bytes per trainable weight, optimizer state) and, under bf16, the moments' upcast (each bf16
state tensor counted again); at the optimizer step the master's fp32 ``.grad`` (4 bytes per
trainable weight, a gradient; with optimizer offload it lives on the host with the master)
and, under bf16, the foreach temporaries in fp32 (the bf16 ones again). 8-bit optimizer
states stay uint8. Under bf16 DeepSpeed casts the whole module to bf16 (peft's fp32 LoRA
adapters too), so the simulated step does the same (``measure.single_process``: knob
``cast_module``). Partitioning then divides them as any optimizer state. Checked against
real DeepSpeed runs at world size 1 and 2: tests/test_sim_deepspeed.py.

ZeRO-3 allocates at init, on the GPU, a gradient buffer holding each parameter's partition
(``grad_partitions_flat_buffer``, on the host with optimizer offload) and a reduce bucket of
``reduce_bucket_size`` elements (``zero_layout``), in every phase. ZeRO-2's gradients per rank, as
DeepSpeed's ``DeepSpeedZeroOptimizer`` holds them: the optimizer's flat group is cut into N equal partitions (padded to 2N elements), and a
rank's 16-bit gradient buffer (``grads_in_partition``) holds the whole of every parameter that
has any element in its partition (``get_partition_info``), not numel / N: the rank whose partition
holds the parts of the largest parameters holds the most (measured at world size 4: tiny-llama's
embedding, 8.2M elements, sits in one rank's partition and a quarter of the next). In backward a
rank also holds one parameter's whole gradient before its reduction (the largest, which
autograd makes whole) and the reduce bucket (``reduce_bucket_size`` elements).

A rank's peak moment is found by replaying the single process's allocation trace and weighing
every moment as the rank holds it (``rank_moments``): ZeRO-3's rank peaks early in backward, with
the activations alive, where the single process peaks late. Checked against real DeepSpeed at
world size 2 and 4 (tests/test_sim_deepspeed.py): every phase within 0.1%, the peak within bytes.

``per_rank(trace, rule)`` is the whole rule from one single-process trace: the phases' peaks read
off the trace (as the tracker reads them), the rank's moments, the partition and the reserved
estimate. The record's figures come from it, and the fits search applies it to traces
interpolated at shapes it never simulated (bench/search/shapes.py).

Not modelled here: the all-gather bucket, fragmentation of flat buffers. NCCL's own device
buffers are outside the allocator: bench/estimate/nccl.py.
"""
from __future__ import annotations

from bench.records.record import CATEGORIES, PHASES

PARTITIONED = {
    "zero1": ("optimizer",),
    "zero2": ("optimizer", "gradients"),
    "zero3": ("optimizer", "gradients", "parameters"),
    "zero2-offload": ("optimizer", "gradients"),
    "zero3-offload": ("optimizer", "gradients", "parameters"),
    "fsdp": ("optimizer", "gradients", "parameters"),
    "fsdp-offload": ("optimizer", "gradients", "parameters"),
    "fsdp1": ("optimizer", "gradients", "parameters"),
}
OFFLOADED = {"zero2-offload": ("optimizer",), "zero3-offload": ("optimizer", "parameters"),
             "fsdp-offload": ("optimizer", "gradients", "parameters")}
GATHERS = {"zero3", "zero3-offload", "fsdp", "fsdp-offload", "fsdp1"}
LABEL = "analytic (ZeRO paper partitioning) over the simulated single-process step"


def zero12_rank_holds(numels: list[int], n: int) -> list[int]:
    """Elements of the parameters each of ``n`` ranks holds whole under DeepSpeed ZeRO-1/2, for one
    parameter group of ``numels`` in its order (stage_1_and_2.py ``get_partition_info``: the group
    flattened, padded to ``nccl_start_alignment_factor`` (2) x N and cut in N equal spans; a rank
    holds every parameter with an element in its span, whole, in its gradient partition)."""
    per_rank = [0] * n
    span = -(-sum(numels) // (2 * n)) * 2
    start = 0
    for numel in numels:
        for r in range(n):
            if start < (r + 1) * span and start + numel > r * span:
                per_rank[r] += numel
        start += numel
    return per_rank


def zero12_peak_rank(numels: list[int], n: int) -> int:
    """The ZeRO-1/2 rank whose step sim traces for the cell: the one holding the most parameters
    whole (``zero12_rank_holds``; the lowest such rank), whose gradient partition, and so its peak,
    is the largest."""
    holds = zero12_rank_holds(numels, n)
    return holds.index(max(holds)) if holds else 0


def paper_bytes_per_param(stage: int, n: int, p: float = 2, g: float = 2, k: float = 12) -> float:
    """Model-state bytes per parameter per GPU, ZeRO paper Fig. 1 (stage 0 = plain data parallel)."""
    return {0: p + g + k, 1: p + g + k / n, 2: p + (g + k) / n, 3: (p + g + k) / n}[stage]


def _div(nbytes: int, n: int) -> int:
    return -(-nbytes // n)  # a partition holds ceil(numel / N) elements


def live_units(numels: list[int], settings: dict, checkpointing: bool) -> list[int]:
    """Indices of the gather units ZeRO-3 keeps gathered after their forward: DeepSpeed's
    ``PartitionedParameterCoordinator.__params_to_release`` keeps a parameter whose next use in the
    step's recorded trace comes within ``stage3_max_reuse_distance`` elements fetched. A unit's
    next use is its backward, after every later unit's forward and backward (and, with
    checkpointing, their recompute too): 2 (3) x the elements after it."""
    limit = int(settings.get("stage3_max_reuse_distance", 0))
    after, out = 0, []
    for i in reversed(range(len(numels))):
        if (3 if checkpointing else 2) * after < limit:
            out.append(i)
        after += numels[i]
    return sorted(out)


def _zero_gradients(phase: str, grads: int, n: int, layout: dict) -> int:
    """A ZeRO rank's gradient bytes at a phase's peak whose single-process gradients are ``grads``:
    the 16-bit gradient buffer (ZeRO-3: from init; ZeRO-2: once the first bucket is reduced; ZeRO-3
    with offload is not weighed here, its gradients are divided by N), the rest (the fp32 master's gradient at the step) / N, and in ZeRO-2's
    backward one whole parameter's gradient and the bucket."""
    model = min(grads, layout["model_grad_bytes"])
    stage3 = layout["stage"] == 3
    out = (layout["partition_grad_bytes"] if stage3 or model else 0) + _div(grads - model, n)
    if not stage3 and phase == "backward" and model:
        out += layout["largest_grad_bytes"] + layout["bucket_bytes"]
    return out


def _gathered(units, live: set) -> int:
    """The most gathered parameter bytes a rank holds at once: at unit i the unit and the next
    (prefetched), and the units before it that the reuse distance keeps (``live_units``; forward
    gathers them in order, backward releases them in reverse)."""
    if len(units) == 1:
        return units[0][0]
    kept, most = 0, 0
    for i in range(len(units) - 1):
        most = max(most, kept + units[i][0] + units[i + 1][0])
        kept += units[i][0] if i in live else 0
    return most


def _scaled(phase: str, cats: dict, dist: str, n: int, units, replicated: int = 0, layout=None) -> dict:
    part, off = PARTITIONED[dist], OFFLOADED.get(dist, ())
    out = dict(cats)
    for cat in part:
        out[cat] = 0 if cat in off else _div(cats[cat], n)
    if dist in ("zero2", "zero3") and layout and "partition_grad_bytes" in layout:
        out["gradients"] = _zero_gradients(phase, cats["gradients"], n, layout)
    if dist in ("zero3", "zero3-offload") and layout:
        out["other"] += layout.get("bucket_bytes", 0)  # the reduce bucket: on the GPU from init
    if "parameters" in part and replicated:
        # what no engine shards (QLoRA's quantization state): whole on every rank, and on the GPU
        # under offload too (an attribute of the weight, not a parameter the offload policy moves)
        out["parameters"] = (0 if "parameters" in off else _div(cats["parameters"] - replicated, n)) + replicated
    if phase == "optimizer":
        out["temporaries"] = 0 if "optimizer" in off else _div(cats["temporaries"], n)
    if dist in GATHERS and phase in ("forward", "backward") and units:
        pairs = [units[i][0] + units[i + 1][0] for i in range(len(units) - 1)] or [units[0][0]]
        out["parameters"] += _gathered(units, set((layout or {}).get("live_units", ())))
        if phase == "backward":  # a unit's whole gradient, made before its reduce-scatter: no more than the
            # single process holds at this moment (early in backward it holds less: rank_moments)
            out["gradients"] += min(max(g for _, g in units), cats["gradients"])
    return out


def rank_moments(trace: dict, dist: str, n: int, layout=None, rounding=lambda b: b, bf16: bool = False) -> dict:
    """{phase: bytes per category} at the moment of each phase of the single process's last step
    where a rank would hold the most: the step's allocation trace replayed, every moment weighed
    as ``_scaled`` weighs its categories (a partitioned one / N, an offloaded one 0, ZeRO's gradient
    buffers a constant). A rank's peak need not fall where the single process peaks: ZeRO-3's comes
    early in backward, while the forward's activations are alive, where the single process's comes
    late, when its gradients are whole (measured: tests/test_sim_deepspeed.py)."""
    cols, cats = trace["columns"], trace["categories"]
    names = trace["phases"]
    part, off = PARTITIONED[dist], OFFLOADED.get(dist, ())
    weight = [0.0 if c in off else 1 / n if c in part else 1.0 for c in cats]
    if dist in ("zero2", "zero3") and layout and "partition_grad_bytes" in layout:
        weight[cats.index("gradients")] = 0.0
    step_weight = 0.0 if "optimizer" in off else (2 if bf16 else 1) / n  # the partitioned step's temporaries
    last = trace["steps"] - 1
    live, totals = {}, [0] * len(cats)
    best: dict = {}
    kind, serial, nbytes, step, phase, category = (cols[k] for k in ("kind", "serial", "bytes", "step", "phase",
                                                                      "category"))
    for i in range(len(kind)):
        c = category[i]
        if kind[i]:
            b = live[serial[i]] = rounding(nbytes[i])
            totals[c] += b
        else:
            totals[c] -= live.pop(serial[i], 0)
            continue
        ph = names[phase[i]]
        if step[i] != last or ph not in PHASES:
            continue
        w = list(weight)
        if ph == "optimizer":
            w[cats.index("temporaries")] = step_weight
        score = sum(wi * t for wi, t in zip(w, totals))
        if ph not in best or score > best[ph][0]:
            best[ph] = (score, list(totals))
    return {ph: dict(zip(cats, t)) for ph, (_, t) in best.items()}


def deepspeed_master(phase_breakdown: dict, dist: str, master_bytes: int, upcast_bytes: int,
                     bf16: bool) -> dict:
    """The single-process step's phases as DeepSpeed's ZeRO optimizer holds them (module
    docstring): fp32 master weights (and moments under bf16), the master's fp32 gradient and,
    under bf16, the step's temporaries in fp32."""
    out = {}
    grad_home = "optimizer" if "optimizer" in OFFLOADED.get(dist, ()) else "gradients"
    for phase, cats in phase_breakdown.items():
        cats = dict(cats)
        if cats.get("optimizer", 0) > 0:
            cats["optimizer"] += master_bytes + upcast_bytes
        if phase == "optimizer":
            cats[grad_home] += master_bytes
            if bf16:
                cats["temporaries"] = 2 * cats["temporaries"]
        out[phase] = cats
    return out


def partition(phase_breakdown: dict, dist: str, n: int, units=(), replicated: int = 0, layout=None,
              moments=None) -> dict:
    """Per-rank record fields for ``dist`` at world size ``n`` from the single-process step's
    breakdown at each phase's peak ({phase: {category: bytes}}). ``replicated``: parameter bytes
    no engine shards (bitsandbytes' quantization state, ``dist.quant_state_bytes``): FSDP2 and
    ZeRO-3 partition registered parameters only (FSDP2's ``_get_managed_states`` walks
    ``module.parameters()``; ZeRO-3's ``partition_parameters`` converts each ``nn.Parameter``), and
    the quant state is a plain attribute of the weight, kept whole on every rank. ``layout``: ZeRO-2's
    gradient buffers per rank (``zero_layout``); without it gradients are divided by N. ``moments``: the
    phases' breakdowns where a rank would hold the most (``rank_moments``), taken where they hold more."""
    scaled = {ph: _scaled(ph, phase_breakdown[ph], dist, n, units, replicated, layout)
              for ph in PHASES if ph in phase_breakdown}
    for ph, cats in (moments or {}).items():  # another moment of the phase where the rank holds more
        alt = _scaled(ph, cats, dist, n, units, replicated, layout)
        if ph in scaled and sum(alt.values()) > sum(scaled[ph].values()):
            scaled[ph] = alt
    phase_peak = {ph: sum(c.values()) for ph, c in scaled.items()}
    top = max(phase_peak, key=phase_peak.get)
    off = OFFLOADED.get(dist, ())
    return {
        # per rank, in host memory, at the GPU's peak phase (what the GPU figures leave out)
        "offloaded_bytes": {c: _div(phase_breakdown[top].get(c, 0), n) for c in off},
        "peak_bytes": phase_peak[top],
        "breakdown_bytes": {c: scaled[top].get(c, 0) for c in CATEGORIES},  # kv_cache: none in training
        "phase_peak_bytes": phase_peak,
        "peak_phase": top,
    }


def trace_phases(trace: dict, rounding=lambda b: b) -> dict:
    """{phase: bytes per category} at each phase's peak after the trace's reset point, read off the
    allocation trace as the tracker reads them (``MemTracker.phase_breakdown``: the first moment of
    the phase's largest total, every storage rounded as the tracker rounds it)."""
    cols, cats, names = trace["columns"], trace["categories"], trace["phases"]
    kind, serial, nbytes, phase, category = (cols[k] for k in ("kind", "serial", "bytes", "phase", "category"))
    reset = trace.get("reset_at") or 0
    live: dict = {}
    totals, total, best = [0] * len(cats), 0, {}
    for i in range(len(kind)):
        c = category[i]
        if kind[i]:
            b = live[serial[i]] = rounding(nbytes[i])
            totals[c] += b
            total += b
            ph = names[phase[i]]
            if i >= reset and ph in PHASES and total > best.get(ph, (0,))[0]:
                best[ph] = (total, list(totals))
        else:
            b = live.pop(serial[i], 0)
            totals[c] -= b
            total -= b
    return {ph: dict(zip(cats, t)) for ph, (_, t) in best.items()}


def cuda_rounding(nbytes: int) -> int:
    """The CUDA caching allocator's rounding of a request (512-byte blocks), as sim's tracker rounds."""
    return -(-nbytes // 512) * 512 if nbytes > 0 else 0


ROUNDING = {"cuda": cuda_rounding, "exact": lambda b: b}


def rank_rule(dist: str, n: int, units, replicated: int, layout: dict | None, master: tuple | None,
              rounding: str) -> dict:
    """What ``per_rank`` needs besides the trace, none of it depending on the step's shape: the
    engine and world size, the gather units, the replicated quantization state, DeepSpeed's
    gradient buffers and master weights, and the tracker's rounding (``ROUNDING``'s key)."""
    return {"dist": dist, "world_size": n, "units": [list(u) for u in units], "replicated": replicated,
            "layout": layout, "master": list(master) if master else None, "rounding": rounding}


def per_rank(trace: dict, rule: dict) -> dict:
    """``partition``'s per-rank fields for the single-process step ``trace`` under ``rule``
    (``rank_rule``), with ``phases``: the step's phase peaks as the rank's optimizer holds them
    (DeepSpeed's master weights added), before partitioning."""
    dist, n, layout, master = rule["dist"], rule["world_size"], rule["layout"], rule["master"]
    rounding = ROUNDING[rule["rounding"]]
    units = [tuple(u) for u in rule["units"]]
    phases = trace_phases(trace, rounding)
    moments = rank_moments(trace, dist, n, layout, rounding, bool(master and master[2]))
    if master:
        phases = deepspeed_master(phases, dist, *master)
        moments = deepspeed_master(moments, dist, *master)
    out = partition(phases, dist, n, units, rule["replicated"], layout, moments)
    out["phases"] = phases
    return out


def per_rank_reserved(trace: dict, rule: dict, conf: str | None = None) -> int:
    """A formula cell's modelled reserved bytes per rank at the shape of ``trace``: the partitioned
    peak plus the single-process replay's fragmentation at its peak (bench/estimate/verdicts.py
    ``ESTIMATE_RULE``), as the cell's record computes it."""
    from bench.estimate import replay
    frag = replay.settled(trace, conf, points=1)[0]["fragmentation_at_peak_bytes"]
    return per_rank(trace, rule)["peak_bytes"] + frag
