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
  backward one unit's full gradient before its reduce-scatter.

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

Not modelled: communication buckets (DeepSpeed's reduce/all-gather buckets, NCCL buffers),
fragmentation of flat buffers and their alignment padding.
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
}
OFFLOADED = {"zero2-offload": ("optimizer",), "zero3-offload": ("optimizer", "parameters"),
             "fsdp-offload": ("optimizer", "gradients", "parameters")}
GATHERS = {"zero3", "zero3-offload", "fsdp", "fsdp-offload"}
LABEL = "analytic (ZeRO paper partitioning) over the simulated single-process step"


def paper_bytes_per_param(stage: int, n: int, p: float = 2, g: float = 2, k: float = 12) -> float:
    """Model-state bytes per parameter per GPU, ZeRO paper Fig. 1 (stage 0 = plain data parallel)."""
    return {0: p + g + k, 1: p + g + k / n, 2: p + (g + k) / n, 3: (p + g + k) / n}[stage]


def _div(nbytes: int, n: int) -> int:
    return -(-nbytes // n)  # a partition holds ceil(numel / N) elements


def unit_bytes(model, rounding=lambda n: n) -> list[tuple[int, int]]:
    """(parameter bytes, gradient bytes) per gather unit, in forward order: the input embedding,
    each decoder layer, and the rest (final norm, output head)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = list(base.model.layers)
    embed = base.get_input_embeddings()
    seen, units = set(), []

    def size(module):
        pb = gb = 0
        for p in module.parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            pb += rounding(p.numel() * p.element_size())
            gb += rounding(p.numel() * p.element_size()) if p.requires_grad else 0
        return pb, gb

    units.append(size(embed))
    units.extend(size(layer) for layer in layers)
    units.append(size(base))  # whatever is left: final norm, output head (untied)
    return units


def _scaled(phase: str, cats: dict, dist: str, n: int, units, replicated: int = 0) -> dict:
    part, off = PARTITIONED[dist], OFFLOADED.get(dist, ())
    out = dict(cats)
    for cat in part:
        out[cat] = 0 if cat in off else _div(cats[cat], n)
    if "parameters" in part and replicated:
        # what no engine shards (QLoRA's quantization state): whole on every rank, and on the GPU
        # under offload too (an attribute of the weight, not a parameter the offload policy moves)
        out["parameters"] = (0 if "parameters" in off else _div(cats["parameters"] - replicated, n)) + replicated
    if phase == "optimizer":
        out["temporaries"] = 0 if "optimizer" in off else _div(cats["temporaries"], n)
    if dist in GATHERS and phase in ("forward", "backward") and units:
        pairs = [units[i][0] + units[i + 1][0] for i in range(len(units) - 1)] or [units[0][0]]
        out["parameters"] += max(pairs)
        if phase == "backward":
            out["gradients"] += max(g for _, g in units)
    return out


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


def partition(phase_breakdown: dict, dist: str, n: int, units=(), replicated: int = 0) -> dict:
    """Per-rank record fields for ``dist`` at world size ``n`` from the single-process step's
    breakdown at each phase's peak ({phase: {category: bytes}}). ``replicated``: parameter bytes
    no engine shards (bitsandbytes' quantization state, ``dist.quant_state_bytes``): FSDP2 and
    ZeRO-3 partition registered parameters only (FSDP2's ``_get_managed_states`` walks
    ``module.parameters()``; ZeRO-3's ``partition_parameters`` converts each ``nn.Parameter``), and
    the quant state is a plain attribute of the weight, kept whole on every rank."""
    scaled = {ph: _scaled(ph, phase_breakdown[ph], dist, n, units, replicated)
              for ph in PHASES if ph in phase_breakdown}
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
