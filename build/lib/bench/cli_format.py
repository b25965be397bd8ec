"""The lines ``ft-membench fit`` prints beside a technique's row (bench/fit/table.py renders the table).

- ``vllm_lines``: a vLLM serving cell has no training step to search; its row says what the
  engine's memory plan on the GPU gives (KV cache space, tokens, sequences at max_model_len,
  card memory used) and vLLM's own error text where the engine would not start.
- ``rank_note``: a ZeRO/FSDP record holds one rank's figures: the need is one GPU's, the speed
  model's tokens/s one rank's, and the data-parallel run trains world size x that; the line also
  says how the model loads (bench/estimate/loadplan.py) and what an offload keeps on the host.
- ``precision_hint``: a training recipe without bf16 (or QLoRA) holds its weights, gradients
  and optimizer state in fp32; an oom or tight verdict says so and what would change it.

Torch-free; each takes the record (or spec) dicts the CLI already holds.
"""
from __future__ import annotations

GiB = 2**30


def vllm_lines(rec: dict, gpu: str) -> list[str]:
    """What the vLLM memory plan says on ``gpu`` (``details.vllm.plans``), or [] for other cells."""
    vllm = ((rec or {}).get("details") or {}).get("vllm")
    plan = (vllm or {}).get("plans", {}).get(gpu) if isinstance(vllm, dict) else None
    if not isinstance(plan, dict):
        return []
    kv = plan.get("kv_cache_bytes") or 0
    out = [f"vLLM plan (modelled): gpu_memory_utilization {plan.get('gpu_memory_utilization')}, "
           f"KV cache {kv / GiB:.2f} GiB = {plan.get('kv_tokens', 0):,} tokens "
           f"({plan.get('max_concurrent_sequences', 0)} sequences of max_model_len {plan.get('max_model_len'):,}); "
           f"weights {plan.get('weights_bytes', 0) / GiB:.2f} GiB; card used "
           f"{plan.get('card_used_bytes', 0) / GiB:.2f} GiB; "
           + ("the engine starts" if plan.get("starts") else "the engine does not start")]
    if plan.get("error"):
        out.append(f"vLLM would say: {plan['error']}")
    return out


def precision_hint(rec: dict, verdict: str | None) -> str:
    """A note for an oom/tight training recipe whose weights are fp32 (no bf16, no QLoRA), else ''."""
    if verdict not in ("oom", "tight") or not rec:
        return ""
    knobs = rec.get("knobs") or {}
    dtypes = ((rec.get("details") or {}).get("dtypes") or {})
    weights = dtypes.get("weights") or []
    if knobs.get("workload", "train") != "train" or knobs.get("adapter") == "qlora":
        return ""
    if knobs.get("precision") == "fp32" or (weights and set(weights) == {"float32"}):
        return ("no bf16 in this recipe: weights, gradients and optimizer state are fp32 (4 bytes a parameter); "
                "add +bf16 (bf16 weights) or use qlora to halve or quarter the weights")
    return ""


def rank_note(rec: dict, gpu: str | None = None) -> str | None:
    """The per-rank line for a sharded record, or None for a single-GPU one (with ``gpu``: its NCCL buffers there)."""
    n = rec.get("world_size") or 1
    dist = (rec.get("knobs") or {}).get("dist")
    if n <= 1 or not dist:
        return None
    details = rec.get("details") or {}
    parts = [f"per rank of {n} ({dist}): need is one GPU's; tokens/s is one rank's, the run's is x {n} "
             f"(data parallel: each rank trains its own batch of {rec.get('batch_size')})"]
    nccl = ((details.get("nccl") or {}).get("by_gpu") or {}).get(gpu) if gpu else None
    if nccl:
        parts.append(f"NCCL's buffers (modelled, in the need): {nccl['bytes'] / GiB:.2f} GiB per GPU "
                     f"({nccl['channels']} channels over {nccl['interconnect']}{', NVLS' if nccl.get('nvls') else ''})")
    load = details.get("load_phase") or {}
    placed = (load.get("placements") or {}).get(load.get("placement"), {})
    if placed.get("gpu_bytes"):
        parts.append(f"loading ({load['placement']}): {placed['gpu_bytes'] / GiB:.2f} GiB per GPU, "
                     f"{placed['host_bytes'] / GiB:.2f} GiB of host memory (modelled)")
    off = details.get("offloaded_bytes") or {}
    if sum(off.values()):
        parts.append(f"offloaded to host memory: {sum(off.values()) / GiB:.2f} GiB per rank "
                     f"({', '.join(k for k, v in off.items() if v)})")
    return "; ".join(parts)


