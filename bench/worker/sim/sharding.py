"""ZeRO and FSDP in sim mode, what is read off the built model and optimizer: the gather units and
DeepSpeed's gradient buffers per rank. The rule that partitions the single-process step with them
is torch-free, in bench/estimate/partition.py (the fits search applies it to interpolated traces).
"""
from __future__ import annotations

from bench.estimate.partition import (GATHERS, LABEL, OFFLOADED, PARTITIONED, deepspeed_master,  # noqa: F401
                                      live_units, zero12_rank_holds, paper_bytes_per_param, partition, rank_moments)
from bench.worker.decoder import decoder_layers


def whole_numel(p) -> int:
    """A parameter's elements as stored, whole: a ZeRO-3 rank's parameter is an empty placeholder beside its
    partition (``ds_numel`` keeps the whole size); any other parameter's own (an FSDP2 DTensor's is the whole
    weight's, a packed 4-bit weight's its packed storage)."""
    return p.ds_numel if hasattr(p, "ds_numel") else p.numel()


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
            b = whole_numel(p) if numel else rounding(whole_numel(p) * p.element_size())
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
            per_rank = [a + b for a, b in zip(per_rank, zero12_rank_holds([p.numel() for p in group], n))]
        held = max(per_rank, default=0)
    bucket = int(settings.get("reduce_bucket_size", 0)) if settings.get("contiguous_gradients", True) else 0
    return {"stage": stage, "partition_grad_bytes": rounding(held * size),
            "model_grad_bytes": sum(rounding(p.numel() * p.element_size()) for p in params),
            "largest_grad_bytes": max((rounding(p.numel() * p.element_size()) for p in params), default=0),
            "bucket_bytes": rounding(bucket * size) if params else 0,
            "how": ("DeepSpeed ZeRO-3's grad_partitions_flat_buffer and reduce bucket, allocated at init" if stage == 3
                    else "DeepSpeed ZeRO-2's grads_in_partition: every parameter with an element in the rank's "
                         "partition, whole; the largest rank")}




def deepspeed_master_args(session, knobs: dict, rounding, details: dict) -> tuple:
    """DeepSpeed's ZeRO optimizer over the simulated single-process step: the fp32 master weights (and
    bf16's fp32 moments) it adds, into ``details`` with the record's dtypes; (master bytes, moment upcast
    bytes, bf16) for ``deepspeed_master``."""
    import torch

    from bench.worker import optimizers
    trainable = sum(p.numel() for p in session.model.parameters() if p.requires_grad)
    master = rounding(4 * trainable)
    state = sum(rounding(t.untyped_storage().nbytes()) for t in optimizers.state_tensors(session.optimizer)
                if t.dtype == torch.bfloat16 and t.dim() > 0 and not t.requires_grad)
    bf16 = knobs["precision"] == "bf16"
    details["deepspeed_master"] = {"master_weight_bytes": master, "moment_upcast_bytes": state,
                                   "how": "analytic: DeepSpeed ZeRO optimizer's fp32 master weights and their gradient"}
    dtypes = details.get("dtypes", {})
    dtypes["master_weights"] = ["float32"]
    dtypes["optimizer_state"] = sorted({"float32" if d == "bfloat16" else d for d in dtypes.get("optimizer_state", [])})
    return master, state, bf16


def zero_layout_of(session, spec: dict, rounding) -> dict | None:
    """What DeepSpeed's settings add to the ZeRO formula: ZeRO-2's per-rank gradient buffers, ZeRO-3's
    units kept gathered by the reuse distance; None otherwise."""
    from bench.worker import dist as dist_mod
    dist, n = spec["knobs"]["dist"] or "", spec["world_size"]
    if dist not in ("zero2", "zero3", "zero3-offload"):
        return None
    settings = dist_mod.zero_settings(spec, session.model.config.hidden_size)
    layout = zero_layout(session.optimizer, n, settings, 2 if dist == "zero2" else 3, rounding)
    if dist != "zero2":
        numels = [pn for pn, _ in unit_bytes(session.model, numel=True)]
        layout.update(live_units=live_units(numels, settings, bool(spec["knobs"]["gc"])), units=len(numels),
                      stage3_max_reuse_distance=int(settings["stage3_max_reuse_distance"]))
    return layout
