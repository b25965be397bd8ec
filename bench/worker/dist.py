"""Sharding techniques: a real DeepSpeed engine (ZeRO-1/2/3, optimizer/parameter offload),
PyTorch FSDP2 or FSDP1, around the model and a torch optimizer.

Rank layout comes from the environment (torchrun sets it; a single process gets rank 0 of
1 on 127.0.0.1). The backend is gloo on CPU and NCCL on CUDA; traffic stays on loopback.
"""
from __future__ import annotations

import contextlib
import json
import os

import torch

from bench.runner import net
from bench.worker.decoder import decoder_layers


def ensure_rank_env() -> None:
    """World size 1 without torchrun: rank 0 of 1, rendezvous on a free loopback port."""
    if "RANK" in os.environ:
        return
    port = net.free_loopback_port()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1",
                      LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")


def rank() -> int:
    """This process's rank: torchrun's RANK, 0 for a single process. Each rank draws its own
    micro-batches (seed + rank): the spec's batch size is per rank, as in data parallelism."""
    return int(os.environ.get("RANK", "0"))


# "auto" bucket sizes are filled from the model's hidden size the way the transformers
# DeepSpeed integration does; fixed defaults (5e8 elements) would add gigabytes of buffers
# to a small model and swamp what is measured.
AUTO = {
    "reduce_bucket_size": lambda h: h * h,
    "allgather_bucket_size": lambda h: h * h,
    "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
    "stage3_param_persistence_threshold": lambda h: 10 * h,
}


# DeepSpeed's own defaults (deepspeed/runtime/zero/config.py) for what a config leaves out: what the
# engine runs with, and so what sim's formula reads (bench/worker/sim/sharding.py ``zero_layout``)
ZERO_DEFAULTS = {
    "reduce_bucket_size": 500_000_000,
    "contiguous_gradients": True,
    "stage3_max_reuse_distance": 1_000_000_000,
    "stage3_param_persistence_threshold": 100_000,
}


def _read_config(spec: dict, hidden_size: int) -> dict:
    with open(spec["ds_config"]) as fh:
        cfg = json.load(fh)
    zero = cfg.setdefault("zero_optimization", {})
    for key, fill in AUTO.items():
        if zero.get(key) == "auto":
            zero[key] = fill(hidden_size)
    return cfg


def zero_settings(spec: dict, hidden_size: int) -> dict:
    """The cell's ``zero_optimization`` as the engine runs it: "auto" filled, DeepSpeed's defaults
    for what it leaves out."""
    return {**ZERO_DEFAULTS, **_read_config(spec, hidden_size)["zero_optimization"]}


def deepspeed_config(spec: dict, micro_batch: int, hidden_size: int) -> dict:
    knobs = spec["knobs"]
    cfg = _read_config(spec, hidden_size)
    cfg["train_micro_batch_size_per_gpu"] = micro_batch
    cfg["gradient_accumulation_steps"] = knobs["accum"]
    cfg["zero_allow_untested_optimizer"] = True
    cfg["zero_force_ds_cpu_optimizer"] = False  # we hand DeepSpeed a torch optimizer, offload or not
    if knobs["precision"] == "bf16":
        cfg["bf16"] = {"enabled": True}  # DeepSpeed keeps fp32 master weights in its optimizer
    cfg.setdefault("steps_per_print", 10**9)
    return cfg


def skip_shm_op() -> None:
    """Keep DeepSpeed from JIT-building its CPU shared-memory op (``deepspeed_shm_comm``).

    That op serves only ``inference_all_reduce`` (AutoTP inference); ZeRO's collectives go through
    torch.distributed (gloo here), so a training cell's tensors are the same without it. Building it
    costs minutes on a small machine, and every process that loads it takes torch's file lock in
    ~/.cache/torch_extensions: a process killed while holding it (a cell past its limit) leaves the
    lock behind, and every later DeepSpeed cell on the machine waits on it until its own limit.
    On CUDA the accelerator has no such builder; the entry is unread there."""
    import deepspeed.ops
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def wrap_deepspeed(spec: dict, model, optimizer, micro_batch: int):
    """(engine, optimizer): DeepSpeed's engine and its ZeRO optimizer wrapping ours."""
    import deepspeed
    ensure_rank_env()
    skip_shm_op()
    engine, ds_opt, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer,
        config=deepspeed_config(spec, micro_batch, model.config.hidden_size),
        dist_init_required=True)
    return engine, ds_opt


def wrap_fsdp(model, device, offload: bool = False, mesh=None, param_dtype=None):
    """FSDP2: each decoder layer and then the whole model fully sharded; ``offload``: with
    CPUOffloadPolicy (shards and their gradients in host memory, the optimizer steps there);
    ``param_dtype`` (a mixed-precision cell, amp-bf16): ``MixedPrecisionPolicy(param_dtype,
    reduce_dtype=float32)``, as accelerate's FSDP and torchtitan run mixed precision: the shards stay
    in their own dtype, the gathered weights and the compute are in ``param_dtype``."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
    if not torch.distributed.is_initialized():  # sim's fake group is up already: its process's env stays as it was
        ensure_rank_env()
        backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
        torch.distributed.init_process_group(backend)
    # pinned host shards need an accelerator: on a cpu run the shards stay in pageable memory
    policy = CPUOffloadPolicy(pin_memory=torch.device(device).type == "cuda") if offload else OffloadPolicy()
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else MixedPrecisionPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, offload_policy=policy, mesh=mesh, mp_policy=mp)
    fully_shard(model, offload_policy=policy, mesh=mesh, mp_policy=mp)
    return model


def wrap_fsdp1(model, device, param_dtype=None, quant_storage=None, layers_only=False):
    """FSDP1 (``FullyShardedDataParallel``) as accelerate's FSDP plugin wraps a model with the answers
    ``accelerate config`` suggests: FULL_SHARD, each decoder layer its own unit and the rest in the
    root (TRANSFORMER_BASED_WRAP over the layers' class), ``use_orig_params``, BACKWARD_PRE prefetch,
    ``limit_all_gathers``; ``param_dtype`` (amp-bf16): ``MixedPrecision`` with the parameters, the
    gradient reduction and the buffers in it, as accelerate sets it for FSDP1. A peft model is wrapped
    as the HF Trainer has accelerate wrap it (``_fsdp_qlora_plugin_updates``): peft's
    ``fsdp_auto_wrap_policy`` (each adapter Linear its own unit beside the decoder layers: FSDP1
    flattens one dtype per unit) and, for QLoRA's 4-bit weights packed in a float ``quant_storage``,
    mixed precision in that dtype. The process group is the default one (gloo or NCCL here; sim's
    fake group). ``layers_only`` (wrap-layers): the decoder layers are the only units whatever the model,
    as Lightning Fabric's ``FSDPStrategy(auto_wrap_policy={Block})`` wraps it: a peft model's adapters
    then share their layer's flat parameter (one dtype per unit: adapters in another dtype fail as
    FSDP1 fails)."""
    from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    if not torch.distributed.is_initialized():
        ensure_rank_env()
        torch.distributed.init_process_group("nccl" if torch.device(device).type == "cuda" else "gloo")
    policy = ModuleWrapPolicy({type(layer) for layer in decoder_layers(model)})
    if hasattr(model, "peft_config") and not layers_only:
        from peft.utils.other import fsdp_auto_wrap_policy
        policy = fsdp_auto_wrap_policy(model)
        if quant_storage is not None and quant_storage.is_floating_point:
            param_dtype = quant_storage
    mp = MixedPrecision(param_dtype=param_dtype, reduce_dtype=param_dtype, buffer_dtype=param_dtype) if param_dtype else None
    return FSDP(model, sharding_strategy=ShardingStrategy.FULL_SHARD, auto_wrap_policy=policy,
                mixed_precision=mp, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=False,
                limit_all_gathers=True, use_orig_params=True, device_id=torch.device(device))


def fsdp1_unsharded_tensors(model) -> list:
    """FSDP1's padded full flat parameters (``_full_param_padded``: a unit's gathered weights, freed by
    resizing their storage to 0 between uses) and, under mixed precision, the low-precision shards
    (``_mp_shard``)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    out = []
    for unit in FSDP.fsdp_modules(model):
        handle = getattr(unit, "_handle", None)
        flat = getattr(handle, "flat_param", None)
        for name in ("_full_param_padded", "_mp_shard", "_full_prec_full_param_padded"):
            t = getattr(flat, name, None)
            if t is not None:
                out.append(t)
    return out


def fsdp1_flat_gradients(model) -> list:
    """FSDP1's flat gradients: a unit's unsharded ``flat_param.grad`` (kept between the micro-batches of
    a step under ``no_sync``) and its saved gradient shard; none for another model."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    out = []
    for unit in FSDP.fsdp_modules(model):
        flat = getattr(getattr(unit, "_handle", None), "flat_param", None)
        for t in (getattr(flat, "grad", None), getattr(flat, "_saved_grad_shard", None)):
            if t is not None:
                out.append(t)
    return out


NO_SYNC_ENGINES = ("fsdp1", "fsdp", "fsdp-offload")


@contextlib.contextmanager
def no_sync(model, knobs: dict, skip: bool):
    """A micro-batch run without the gradient sync where ``skip`` (``no-sync``), as accelerate's ``no_sync``
    does: FSDP1's ``model.no_sync()``; FSDP2's ``set_requires_gradient_sync``, set around every micro-batch
    of a no-sync cell (the step's last one syncs)."""
    if knobs["dist"] in ("fsdp", "fsdp-offload") and knobs["no_sync"]:
        model.set_requires_gradient_sync(not skip)
    with model.no_sync() if skip and knobs["dist"] == "fsdp1" else contextlib.nullcontext():
        yield


def _fsdp_params(model):
    """Every FSDP2 parameter of ``model`` (its modules' ``FSDPParamGroup``s); none for another model."""
    for module in model.modules():
        get_state = getattr(module, "_get_fsdp_state", None)
        group = get_state()._fsdp_param_group if get_state else None
        yield from (group.fsdp_params if group else [])


def fsdp_unsharded_gradients(model) -> list:
    """FSDP2's unsharded gradients kept between the micro-batches of a step without the gradient sync
    (``set_requires_gradient_sync(False)``): each parameter's ``_unsharded_param.grad``, or its upcast
    ``unsharded_accumulated_grad`` under a reduce dtype; none for another model."""
    out = []
    for fsdp_param in _fsdp_params(model):
        unsharded = getattr(fsdp_param, "_unsharded_param", None)
        out += [t for t in (getattr(unsharded, "grad", None), getattr(fsdp_param, "unsharded_accumulated_grad", None))
                if t is not None]
    return out


def fsdp_unsharded_tensors(model) -> list:
    """FSDP2's all-gather outputs and unsharded parameters: a layer's full weights while it
    runs (freed by resizing their storage to 0 between uses, so marking them once holds)."""
    out = []
    for fsdp_param in _fsdp_params(model):
        out += list(getattr(fsdp_param, "all_gather_outputs", []))
        unsharded = getattr(fsdp_param, "_unsharded_param", None)
        if unsharded is not None:
            out.append(unsharded)
    return out


# What a ZeRO optimizer's flat buffers hold, by attribute name (DeepSpeed keeps its
# partitions there, not in the torch optimizer's param_groups between steps).
ZERO_ROLES = (
    ("gradients", ("grad",), ("norm",)),
    ("optimizer", ("fp32",), ()),                              # fp32 master partitions
    ("parameters", ("fp16", "bf16", "bit16", "lp_param"), ()),  # the model's 16-bit/low-precision partitions
)


def zero_buffers(optimizer, role: str) -> list:
    """Tensors a DeepSpeed ZeRO optimizer keeps for ``role``; [] for a plain torch optimizer."""
    if optimizer is None or getattr(optimizer, "optimizer", None) is None:
        return []
    out = []
    for name, value in vars(optimizer).items():
        for r, include, exclude in ZERO_ROLES:
            if any(w in name for w in include) and not any(w in name for w in exclude):
                if r == role:
                    out += _tensors_in(value)
                break
    return out


def parameter_tensors(model, optimizer=None) -> list:
    """Every tensor that holds the model's weights: the parameters, DeepSpeed's ZeRO
    partitions, FSDP2's local shards, and bitsandbytes quantization state."""
    out = zero_buffers(optimizer, "parameters")
    for p in model.parameters():
        out.append(p.data)
        for attr in ("ds_tensor",):
            if isinstance(getattr(p, attr, None), torch.Tensor):
                out.append(getattr(p, attr))
        local = getattr(p, "_local_tensor", None)
        if isinstance(local, torch.Tensor):
            out.append(local)
        qs = getattr(p, "quant_state", None)
        if qs is not None:
            out.extend(_quant_state_tensors(qs))
    out.extend(model.buffers())  # rotary tables and the like: part of the model's weights
    return out


def quant_state_bytes(model, rounding=lambda n: n) -> int:
    """Bytes of bitsandbytes' quantization state (absmax, nested absmax, code, offset) over the
    model's weights: plain attributes, not parameters, so neither FSDP nor ZeRO-3 shards them. Read
    from each 4-bit weight and from each Linear4bit module (``module.quant_state``, where bitsandbytes
    keeps it for FSDP: FSDP2's sharded parameters carry no ``quant_state`` of their own), each storage once."""
    seen, total = set(), 0
    states = [getattr(p, "quant_state", None) for p in model.parameters()]
    states += [getattr(m, "quant_state", None) for m in model.modules() if type(m).__name__ == "Linear4bit"]
    for qs in states:
        for t in (_quant_state_tensors(qs) if qs is not None else []):
            key = t.untyped_storage()._cdata
            if key not in seen:
                seen.add(key)
                total += rounding(t.untyped_storage().nbytes())
    return total


def _quant_state_tensors(qs) -> list:
    out = [getattr(qs, a, None) for a in ("absmax", "code", "offset")]
    nested = getattr(qs, "state2", None)
    if nested is not None:
        out += _quant_state_tensors(nested)
    return [t for t in out if isinstance(t, torch.Tensor)]


def gradient_tensors(model, optimizer) -> list:
    """Gradients wherever they live: ``.grad`` of model and optimizer parameters, and the
    flat gradient partitions a ZeRO optimizer keeps."""
    out = [p.grad for p in model.parameters() if p.grad is not None]
    out += fsdp1_flat_gradients(model) + fsdp_unsharded_gradients(model)
    inner = getattr(optimizer, "optimizer", optimizer)
    for group in inner.param_groups:
        out += [p.grad for p in group["params"] if p.grad is not None]
    return out + zero_buffers(optimizer, "gradients")


def _tensors_in(value, depth: int = 0) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 2:
        return []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v, depth + 1)]
    return []
