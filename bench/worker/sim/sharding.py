"""ZeRO and FSDP in sim mode, what is read off the built model and optimizer: the gather units and
DeepSpeed's gradient buffers per rank. The rule that partitions the single-process step with them
is torch-free, in bench/estimate/partition.py (the fits search applies it to interpolated traces).
"""
from __future__ import annotations

from bench.estimate.partition import (GATHERS, LABEL, OFFLOADED, PARTITIONED, deepspeed_master,  # noqa: F401
                                      live_units, paper_bytes_per_param, partition, rank_moments)
from bench.worker.decoder import decoder_layers


def unit_bytes(model, rounding=lambda n: n, numel: bool = False) -> list[tuple[int, int]]:
    """(parameter bytes, gradient bytes) per gather unit, in forward order: the input embedding,
    each decoder layer, and the rest (final norm, output head). ``numel``: elements instead of bytes."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = list(decoder_layers(base))
    embed = base.get_input_embeddings()
    seen, units = set(), []

    def size(module):
        pb = gb = 0
        for p in module.parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            b = p.numel() if numel else rounding(p.numel() * p.element_size())
            pb += b
            gb += b if p.requires_grad else 0
        return pb, gb

    units.append(size(embed))
    units.extend(size(layer) for layer in layers)
    units.append(size(base))  # whatever is left: final norm, output head (untied)
    return units



def zero_layout(optimizer, n: int, settings: dict, stage: int, rounding=lambda b: b) -> dict:
    """The gradient buffers DeepSpeed's ZeRO optimizer keeps on a rank (module docstring), from the
    optimizer's parameter groups in DeepSpeed's order: ``partition_grad_bytes`` (ZeRO-2: the largest
    rank's ``grads_in_partition``; ZeRO-3: ``grad_partitions_flat_buffer``, each parameter's
    partition, allocated at init), ``model_grad_bytes`` (the whole 16-bit gradient, as the single
    process holds it), ``largest_grad_bytes`` and ``bucket_bytes`` (the reduce bucket, 0 without
    contiguous gradients)."""
    inner = getattr(optimizer, "optimizer", optimizer)
    groups = [[p for p in g["params"] if p.requires_grad] for g in inner.param_groups]
    params = [p for g in groups for p in g]
    size = params[0].element_size() if params else 2
    if stage == 3:  # stage3.py: sum(p.partition_numel()), each parameter padded to N
        held = sum(-(-p.numel() // n) for p in params)
    else:  # stage_1_and_2.py get_partition_info: every parameter with an element in the partition
        per_rank = [0] * n
        for group in groups:
            numels = [p.numel() for p in group]
            span = -(-sum(numels) // (2 * n)) * 2  # padded to nccl_start_alignment_factor (2) x N, / N
            start = 0
            for numel in numels:
                for r in range(n):
                    if start < (r + 1) * span and start + numel > r * span:
                        per_rank[r] += numel
                start += numel
        held = max(per_rank, default=0)
    bucket = int(settings.get("reduce_bucket_size", 0)) if settings.get("contiguous_gradients", True) else 0
    return {"stage": stage, "partition_grad_bytes": rounding(held * size),
            "model_grad_bytes": sum(rounding(p.numel() * p.element_size()) for p in params),
            "largest_grad_bytes": max((rounding(p.numel() * p.element_size()) for p in params), default=0),
            "bucket_bytes": rounding(bucket * size) if params else 0,
            "how": ("DeepSpeed ZeRO-3's grad_partitions_flat_buffer and reduce bucket, allocated at init" if stage == 3
                    else "DeepSpeed ZeRO-2's grads_in_partition: every parameter with an element in the rank's "
                         "partition, whole; the largest rank")}


