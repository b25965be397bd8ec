"""Where a DeepSpeed ZeRO engine keeps its tensors, for the tracker: what lives on the host
under offload, which storages are gathered parameters, and what proves the stage acted.

In cpu mode the "device" and the host are the same RAM, so DeepSpeed's offload cannot be
seen from a tensor's device. DeepSpeed names its host-side buffers, though, and its
offloaded optimizer step runs on the host; ``watch`` hands those to the tracker as host
bytes, which leave the device peak and are reported apart (record ``details``). Under
ZeRO-3 a layer's full parameters are gathered just before it runs; ``watch`` marks those
storages as parameters, not as activations or temporaries.

    watch(engine, tracker)     # after deepspeed.initialize, before the first step
    facts(engine, model)       # {"zero_stage": 3, "partitioned_params": ..., ...}
"""
from __future__ import annotations

import torch

from bench.worker.dist import _tensors_in

# DeepSpeed optimizer attributes that hold host memory when the named offload is on.
HOST_BUFFERS = {
    # ZeRO-1/2 (stage_1_and_2.py), offload_optimizer: fp32 master partition and its gradient,
    # a 16-bit staging copy for the way back, and the gradient staging buffer
    "cpu_offload": ("single_partition_of_fp32_groups", "param_buffer_of_bit16_for_cpu_offload_groups",
                    "temp_grad_buffer_for_cpu_offload", "offload_gradient_dict"),
    # ZeRO-3 (stage3.py), offload_optimizer: fp32 partitions, their gradients
    "offload_optimizer": ("fp32_partitioned_groups_flat", "grad_partitions_flat_buffer",
                          "_DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition"),
    # ZeRO-3, offload_param: the partitioned 16-bit (here: training-dtype) parameters
    "offload_param": ("param_groups_fp16_flat_cpu_memory", "fp16_partitioned_groups_flat",
                      "fp16_partitioned_groups"),
}


def offloads(optimizer) -> dict:
    """{"optimizer": bool, "param": bool}: what this ZeRO optimizer keeps on the host."""
    return {"optimizer": bool(getattr(optimizer, "cpu_offload", False) or getattr(optimizer, "offload_optimizer", False)),
            "param": bool(getattr(optimizer, "offload_param", False))}


def host_tensors(optimizer, model) -> list:
    """Tensors DeepSpeed keeps in host memory under its offload settings."""
    out = []
    for flag, names in HOST_BUFFERS.items():
        if getattr(optimizer, flag, False):
            for name in names:
                for t in _tensors_in(getattr(optimizer, name, None)):
                    out += [t] + ([t.grad] if t.grad is not None else [])
    if getattr(optimizer, "offload_param", False):
        out += [p.ds_tensor for p in model.parameters() if isinstance(getattr(p, "ds_tensor", None), torch.Tensor)]
    return out


def watch(engine, tracker) -> None:
    """Tell ``tracker`` what DeepSpeed keeps on the host and which storages are gathered
    ZeRO-3 parameters."""
    optimizer, model = engine.optimizer, engine.module
    if offloads(optimizer)["optimizer"]:
        tracker.host_phases.add("optimizer")  # the offloaded optimizer step runs on the host
    tracker.to_host(host_tensors(optimizer, model))
    # ZeRO hands its torch optimizer a gradient it flattens inside step(): mark it there
    optimizer.optimizer.register_step_pre_hook(lambda opt, _args, _kwargs: tracker.mark(
        "gradients", [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]))
    offload = getattr(optimizer, "parameter_offload", None)
    if offload is None:
        return
    copy = offloads(optimizer)["param"]
    for name in ("pre_sub_module_forward_function", "pre_sub_module_backward_function"):
        gather = getattr(offload, name)

        def gathered(module, _gather=gather):
            _gather(module)
            params = [p for p in module.parameters(recurse=False) if p.data.numel()]
            if copy:  # one rank "gathers" with .to(device): a copy of the host partition on a GPU,
                for p in params:  # the partition itself when device and host are one RAM
                    if not getattr(p, "ds_persist", False) and tracker.is_host(p.data):
                        p.data = p.data.clone()
            tracker.mark("parameters", [p.data for p in params])
        setattr(offload, name, gathered)


def facts(engine, model) -> dict:
    """What proves the stage acted: parameters held as partitions (ZeRO-3 leaves empty
    placeholders in the module), where state lives."""
    optimizer = engine.optimizer
    params = list(model.parameters())
    out = {"zero_stage": engine.zero_optimization_stage(), "offload": offloads(optimizer)}
    partitioned = [p for p in params if hasattr(p, "ds_tensor")]
    if partitioned:
        out["partitioned_params"] = len(partitioned)
        out["params_full_numel"] = sum(p.ds_numel for p in partitioned)
        out["params_partition_numel"] = sum(p.ds_tensor.numel() for p in partitioned)
        out["params_materialized_numel"] = sum(p.data.numel() for p in partitioned)  # placeholders are empty
    return out
