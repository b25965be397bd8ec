"""Facts that prove a cell's techniques acted, read from the live session after its steps.

``collect(session)`` returns the record's ``details`` dict. Each key is something a test
can check against the baseline, and that would read differently had the technique only
been configured (tests/test_techniques_runs.py does):

- compute_dtype: the dtype a Linear layer really produced (autocast, bf16, QLoRA's compute)
- param_dtypes / trainable_param_dtypes: the dtypes the weights are held in (pure bf16)
- optimizer_class, optimizer_state_dtypes, optimizer_state_bytes: what the optimizer keeps
  (uint8 states of the 8-bit optimizers, Adafactor's factored rows, SGD's one buffer)
- trainable_fraction, lora_modules: LoRA and QLoRA adapters in place, base frozen
- quantized_weights: QLoRA's 4-bit weights (count, quant type, storage dtype and bytes)
- gradient_checkpointing, activation_bytes_after_forward: what forward left alive for
  backward (falls with checkpointing and with accumulation's smaller micro-batches)
- attn_implementation: the attention kernel the model runs
- zero: ZeRO stage, offload, partitioned parameters (bench/worker/zeromem.py); fsdp_sharded_params
- grad_scaler_scale: the fp16 loss scale in use
- loaded_from, name_or_path, low_cpu_mem_usage_passed: how the weights got there
- dtypes: every parameter group's dtype: weights (frozen and trainable), gradients,
  optimizer state and master weights (DeepSpeed's fp32 partitions; sim adds its modelled ones)
- loss: the loss path (full | chunked | liger) the model's forward really took
- activation_offload_bytes: bytes the last forward copied to host memory (act-offload)
- optimizer_in_backward_steps: per-parameter steps taken inside backward (opt-in-bwd)
- compiled_layers, compiled_graphs: decoder layers under torch.compile, graphs dynamo built
- dora_modules: LoRA modules carrying DoRA magnitude vectors
- cuda_alloc_conf, cuda_expandable_segments (cuda only): the allocator setting the worker
  ran under, and whether the caching allocator's segments really are expandable
"""
from __future__ import annotations

import os

import torch

from bench.worker import optimizers, zeromem


def param_numel(p) -> int:
    """The weights a parameter stands for: ZeRO-3 leaves an empty placeholder (``ds_numel``
    says the full size), and a bitsandbytes NF4 weight packs two per byte (its quant_state
    keeps the unquantized shape)."""
    if hasattr(p, "ds_numel"):
        return p.ds_numel
    qs = getattr(p, "quant_state", None)
    if qs is not None and getattr(qs, "shape", None) is not None:
        return torch.Size(qs.shape).numel()
    return p.numel()


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def param_numels(model) -> list[int]:
    """``param_numel`` of every parameter of ``model``, in order; an FSDP2 shard of a 4-bit weight has
    lost its quant state to the DTensor, so its unquantized size comes from its module, where
    bitsandbytes keeps the state (a rank's QLoRA model counted 19.2B of Llama-3.1-70B's 70.6B)."""
    held = {id(m.weight): torch.Size(m.quant_state.shape).numel() for m in model.modules()
            if type(m).__name__ == "Linear4bit" and getattr(getattr(m, "quant_state", None), "shape", None) is not None}
    return [held.get(id(p)) or param_numel(p) for p in model.parameters()]


def collect(session) -> dict:
    model = session.model
    params = list(model.parameters())
    numel = param_numels(model)
    trainable = sum(n for n, p in zip(numel, params) if p.requires_grad)
    out = {
        "compute_dtype": session.compute_dtype,
        "param_dtypes": sorted({_name(p.dtype) for p in params}),
        "trainable_param_dtypes": sorted({_name(p.dtype) for p in params if p.requires_grad}),
        "trainable_fraction": trainable / max(1, sum(numel)),
        "gradient_checkpointing": bool(getattr(model, "is_gradient_checkpointing", False)),
        "activation_bytes_after_forward": session.forward_retained,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "engine": type(session.engine).__name__ if session.engine else None,
        "micro_batches": session.accum,
        **optimizer_facts(session.optimizer),
        **adapter_facts(model, params),
        "dtypes": dtype_facts(session, params),
    }
    out.update(recipe_facts(session, model))
    if session.engine is not None:
        out["zero"] = zeromem.facts(session.engine, model)
    sharded = [p for p in params if type(p).__name__ == "DTensor"]
    if sharded:
        out["fsdp_sharded_params"] = len(sharded)
    if session.scaler is not None:
        out["grad_scaler_scale"] = float(session.scaler.get_scale())
    out.update(getattr(model, "_bench_load_facts", {}))
    if session.device.type == "cuda":
        out.update(cuda_allocator_facts())
    return out


def dtype_facts(session, params) -> dict:
    """The dtype of each parameter group: what the report shows beside the bytes."""
    from bench.worker import dist
    grads = set(session.grad_dtypes) | set(getattr(session.optimizer, "grad_dtypes", ()))
    master = dist.zero_buffers(session.optimizer, "optimizer")
    # FSDP2's shards of 4-bit weights carry no quant state: bitsandbytes keeps it on their module
    sharded_4bit = {id(m.weight) for m in session.model.modules()
                    if type(m).__name__ == "Linear4bit" and getattr(m, "quant_state", None) is not None}
    is_4bit = lambda p: getattr(p, "quant_state", None) is not None or id(p) in sharded_4bit  # noqa: E731
    quantized = [p for p in params if is_4bit(p)]
    return {
        "weights": sorted({_name(p.dtype) for p in params if not is_4bit(p)}),
        "quantized_weights": sorted({f"nf4 in {_name(p.dtype)}" for p in quantized}),
        "trainable_weights": sorted({_name(p.dtype) for p in params if p.requires_grad}),
        "gradients": sorted(_name(d) for d in grads),
        "optimizer_state": optimizer_facts(session.optimizer)["optimizer_state_dtypes"],
        "master_weights": sorted({_name(t.dtype) for t in master if t.dim() > 0}),
    }


def recipe_facts(session, model) -> dict:
    """The loss path, activation offload, optimizer in backward, compile and DoRA, as acted."""
    out = {}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base = getattr(base, "module", base)
    out["loss"] = getattr(base, "_bench_loss", "full")
    if getattr(base, "_bench_loss_compiled", False):
        out["loss_compiled"] = True
    if session.offload is not None:
        out["activation_offload_bytes"] = session.offload.offloaded
    if hasattr(session.optimizer, "steps_in_backward"):
        out["optimizer_in_backward_steps"] = session.optimizer.steps_in_backward
        out["optimizer_class"] = session.optimizer.inner_class
    if session.compiled_layers:
        from torch._dynamo.utils import counters
        out["compiled_layers"] = session.compiled_layers
        out["compiled_graphs"] = int(counters["stats"]["unique_graphs"])
    dora = [m for m in model.modules() if len(getattr(m, "lora_magnitude_vector", {}) or {})]
    if dora:
        out["dora_modules"] = len(dora)
    return out


def optimizer_facts(optimizer) -> dict:
    """The optimizer's class, and the dtypes and bytes of the state it keeps between steps."""
    inner = getattr(optimizer, "optimizer", optimizer)  # DeepSpeed wraps a torch optimizer
    own = [v for st in inner.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    kept = [t for t in optimizers.state_tensors(optimizer) if t.dim() > 0]  # + ZeRO's master partitions
    return {"optimizer_class": type(inner).__name__,
            "optimizer_state_dtypes": sorted({_name(t.dtype) for t in kept}),
            "optimizer_state_bytes": sum(t.untyped_storage().nbytes() for t in own)}


def adapter_facts(model, params) -> dict:
    """LoRA modules in place; QLoRA's 4-bit weights: how many, how stored, computed in what."""
    out = {}
    lora = [m for m in model.modules() if len(getattr(m, "lora_A", {}))]
    if lora:
        out["lora_modules"] = len(lora)
    quantized = [p for p in params if type(p).__name__ == "Params4bit"]
    if quantized:
        qs = quantized[0].quant_state
        compute = next(m.compute_dtype for m in model.modules() if hasattr(m, "compute_type_is_set"))
        out["quantized_weights"] = {
            "count": len(quantized), "quant_type": qs.quant_type, "double_quant": qs.nested,
            "storage_dtype": _name(quantized[0].dtype), "compute_dtype": _name(compute),
            "bytes": sum(p.untyped_storage().nbytes() for p in quantized),
            "numel_unquantized": sum(torch.Size(p.quant_state.shape).numel() for p in quantized)}
    else:  # FSDP2 made the 4-bit weights DTensor shards: bitsandbytes keeps their quant state on the module
        mods = [m for m in model.modules() if type(m).__name__ == "Linear4bit" and getattr(m, "quant_state", None)]
        if mods:
            qs, w = mods[0].quant_state, mods[0].weight
            local = getattr(w, "_local_tensor", w)
            out["quantized_weights"] = {
                "count": len(mods), "quant_type": qs.quant_type, "double_quant": qs.nested,
                "storage_dtype": _name(w.dtype), "compute_dtype": _name(mods[0].compute_dtype),
                "sharded": type(w).__name__ == "DTensor" or type(w.data).__name__ == "DTensor",
                "local_bytes": sum(getattr(m.weight, "_local_tensor", m.weight).untyped_storage().nbytes()
                                   for m in mods),
                "numel_unquantized": sum(torch.Size(m.quant_state.shape).numel() for m in mods),
                "local_shard_numel_first": local.numel()}
    return out


def cuda_allocator_facts() -> dict:
    segments = torch.cuda.memory._snapshot().get("segments", [])
    return {"cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            "cuda_expandable_segments": any(seg.get("is_expandable", False) for seg in segments)}
