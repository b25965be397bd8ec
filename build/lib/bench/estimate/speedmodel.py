"""The speed model: a sim cell's step time on a GPU profile, modelled (never measured).

``estimate(step_cost, profile, knobs)`` reads the step's costs (``details.step_cost``, counted
by bench/worker/sim/stepcost.py) and a GPU profile (matrix/gpus.yaml) and gives the step time
per GPU. The rule (``HOW``):

- each op with FLOPs takes max(FLOPs / the peak of its dtype, bytes / memory bandwidth): a
  per-op roofline. Peaks: bf16 and fp16 on tensor cores (``bf16_tflops``; ``fp16_tflops`` where
  given, else the bf16 figure: Ampere and later run both at one rate), fp32 without them
  (``fp32_tflops``: PyTorch leaves TF32 off for matmuls by default);
- ops without FLOPs (pointwise, reductions, copies, the optimizer) take bytes / bandwidth;
- NF4 dequantization takes its bytes / bandwidth, a kernel of its own before each 4-bit GEMM;
- checkpointing's recomputation is the ops it re-runs, timed like the rest (part ``recompute``);
- those device terms add up (kernels run one after another on one stream) and are divided by
  the GPU class's efficiency factor (``EFFICIENCY``): the fraction of the peaks real kernels
  reach, fitted once per class on published throughput, never per row;
- ZeRO/FSDP communication per rank takes bytes / the card's link (NVLink where it has one, else
  PCIe), at the link's nominal peak and not overlapped with compute: an upper bound where
  DeepSpeed's overlap_comm or FSDP's prefetch hides part of it; ZeRO-offload's host traffic
  takes bytes / PCIe, not overlapped; the optimizer step on the host CPU is not modelled;
- activation offloading's copies run on a side stream (torchtune's OffloadActivations): only
  the PCIe time beyond the device time shows;
- paged optimizer state that does not stay resident (bench/estimate/verdicts.py ``paging``) is paged in
  and out once per step, as the optimizer touches every state: 2 x paged-out bytes / PCIe,
  not overlapped (part ``paging``).

``tokens_per_s`` is per GPU: one rank's tokens per step (non-padding) over the step time.
Calibration: ``EFFICIENCY`` holds each class's factor and where it came from;
tests/test_speed_calibration.py refits the A100 factor on torchtune's table and holds every
matched row within 25%. A class with no published row of its own takes the A100 factor and
says so (``calibration``).
"""
from __future__ import annotations

import math

PROVENANCE = "modelled"
REFERENCE_CLASS = "ampere-datacenter"
# gpu_class: (factor, derivation). The factor is the geometric mean, over the matched rows, of
# (modelled step time at the peaks) / (published step time); refit by
# tests/test_speed_calibration.py, which fails if this constant drifts from its own fit.
EFFICIENCY = {
    "ampere-datacenter": (0.7878, "fitted on pytorch/torchtune README's Llama-3.2-3B table (A100, batch 2 x "
                                  "4096 packed): the 8 matched rows, the full fine-tunes from packed to + 8-bit "
                                  "AdamW and LoRA (tests/test_speed_calibration.py; each within 10%)"),
    # about 1: the 4090 sustains its listed bf16 peak (165.2 TFLOPS, FP32 accumulate) over the whole
    # step, or the listed peak understates what cuBLAS reaches on AD102; the A100 factor left the
    # LoRA row at -29%
    "ada": (1.0185, "fitted on pytorch/torchtune README's Llama-3.1-8B table (RTX 4090, batch 2 x 2048 "
                    "packed, compiled): the full fine-tune (its paging time subtracted, not scaled), LoRA and "
                    "QLoRA rows (tests/test_published_answers.py)"),
}
HOW = ("modelled: per op max(FLOPs / dtype peak, bytes / memory bandwidth) for ops with FLOPs "
       "(bf16/fp16 at tensor-core peak, fp32 at the non-tensor-core peak), bytes / bandwidth for "
       "the others and for NF4 dequantization; recomputation timed the same; device terms summed "
       "and divided by the GPU class's efficiency factor; ZeRO/FSDP collectives / NVLink (else "
       "PCIe) and ZeRO-offload host traffic / PCIe, at nominal link peaks, added, not overlapped; "
       "activation offloading's PCIe time only beyond the device time (side stream); paged optimizer "
       "state beyond the device's room paged in and out each step: 2 x paged-out bytes / PCIe")
PARTS = ("compute", "memory", "recompute", "nf4_dequant", "communication", "offload_pcie",
         "activation_offload", "paging")


def peak_field(profile: dict, dtype: str) -> str | None:
    """The profile field whose peak an op computing in ``dtype`` runs at (None: none known)."""
    if dtype == "bfloat16":
        return "bf16_tflops"
    if dtype == "float16":
        return "fp16_tflops" if profile.get("fp16_tflops") else "bf16_tflops"
    if dtype == "float32":
        return "fp32_tflops"
    return None


def efficiency(profile: dict) -> tuple[float, str]:
    """(factor, calibration) for the profile's GPU class."""
    cls = profile.get("gpu_class")
    if cls in EFFICIENCY and EFFICIENCY[cls][0] > 0:
        return EFFICIENCY[cls][0], f"calibrated: {cls} ({EFFICIENCY[cls][1]})"
    return EFFICIENCY[REFERENCE_CLASS][0], f"uncalibrated: {REFERENCE_CLASS} factor (no published row for {cls})"


def _missing(why: str) -> dict:
    return {"step_s": None, "tokens_per_s": None, "why": why, "provenance": PROVENANCE, "how": HOW}


def device_seconds(step_cost: dict, profile: dict) -> tuple[dict, str | None]:
    """({part: seconds} of the device terms at the profile's peaks, efficiency 1), or why not."""
    bw = profile.get("memory_bandwidth_gbs")
    if not bw:
        return {}, "the profile has no memory_bandwidth_gbs"
    bw *= 1e9
    peaks = {}
    for dtype, flops in step_cost["flops_by_dtype"].items():
        field = peak_field(profile, dtype)
        if flops and (field is None or not profile.get(field)):
            return {}, f"{flops:.3g} FLOPs in {dtype} and the profile has no {field or 'peak for that dtype'}"
        peaks[dtype] = (profile.get(field) or 0) * 1e12
    parts = dict.fromkeys(("compute", "memory", "recompute", "nf4_dequant"), 0.0)
    for _name, dtype, flops, nbytes, count, part in step_cost["ops"]:
        c, m = flops / peaks[dtype], nbytes / bw
        where = part if part in ("recompute", "nf4_dequant") else "compute" if c >= m else "memory"
        parts[where] += max(c, m) * count
    for part, nbytes in step_cost["memory_bytes"].items():
        if part != "nf4_dequant":  # counted in nf4_dequant_bytes below
            parts["recompute" if part == "recompute" else "memory"] += nbytes / bw
    parts["nf4_dequant"] += step_cost["nf4_dequant_bytes"] / bw
    return parts, None


def estimate(step_cost: dict | None, profile: dict, knobs: dict | None = None, paged_out_bytes: int = 0) -> dict:
    """The modelled step on ``profile``: step_s, tokens_per_s (per GPU), parts (seconds per
    term, summing to step_s), efficiency, calibration, how; step_s None and ``why`` where a
    needed figure is missing. ``knobs`` (the cell's) may only confirm what step_cost says.
    ``paged_out_bytes``: paged optimizer state the GPU cannot keep resident (verdicts.paging)."""
    if not step_cost:
        return _missing("no step_cost in the record")
    if profile.get("kind") != "cuda":
        return _missing(f"{profile.get('kind')} profile: no GPU to model")
    device, why = device_seconds(step_cost, profile)
    if why:
        return _missing(why)
    eff, calibration = efficiency(profile)
    if eff <= 0:
        return _missing(f"no efficiency factor for {REFERENCE_CLASS}")
    parts = {k: v / eff for k, v in device.items()}
    device_s = sum(parts.values())
    comm = step_cost.get("comm_bytes_per_rank") or 0
    host = (step_cost.get("offload_pcie_bytes") or 0, step_cost.get("pcie_bytes") or 0)
    link = profile.get("nvlink_gbs") or profile.get("pcie_gbs")
    if comm and not link:
        return _missing("communication to model and the profile has no nvlink_gbs or pcie_gbs")
    if (any(host) or paged_out_bytes) and not profile.get("pcie_gbs"):
        return _missing("host traffic to model and the profile has no pcie_gbs")
    parts["communication"] = comm / (link * 1e9) if comm else 0.0
    parts["offload_pcie"] = host[0] / (profile["pcie_gbs"] * 1e9) if host[0] else 0.0
    parts["activation_offload"] = max(0.0, host[1] / (profile["pcie_gbs"] * 1e9) - device_s) if host[1] else 0.0
    parts["paging"] = 2 * paged_out_bytes / (profile["pcie_gbs"] * 1e9) if paged_out_bytes else 0.0
    step_s = sum(parts.values())
    tokens = step_cost.get("tokens_per_step")
    return {
        "step_s": step_s,
        "tokens_per_s": tokens / step_s if tokens and step_s > 0 else None,
        "parts": {k: parts[k] for k in PARTS},
        "efficiency": eff,
        "calibration": calibration,
        "link": "nvlink" if comm and profile.get("nvlink_gbs") else "pcie" if comm else None,
        "provenance": PROVENANCE,
        "how": HOW,
    }


def fit(rows: list[tuple[float, float]]) -> float:
    """One efficiency factor from [(modelled seconds at efficiency 1, published seconds)]: the
    geometric mean of their ratios (a signed error of the same size either way)."""
    if not rows:
        raise ValueError("no calibration rows")
    return math.exp(sum(math.log(m / p) for m, p in rows) / len(rows))
