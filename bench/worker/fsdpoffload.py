"""Where FSDP2 with CPU offload (``fsdp-offload``) keeps its tensors, for the tracker: the device
and the host apart where they are one RAM (a cpu run, and sim, whose fake device is the CPU).

On a GPU, ``CPUOffloadPolicy`` keeps each rank's shards, their gradients and the optimizer state in
host memory (torch/distributed/fsdp/_fully_shard, torch 2.13):

- ``FSDPParam.all_gather_inputs``: before each all-gather, each shard is copied to the device
  (``sharded_param_data.to(self.device, non_blocking=True)``), and that copy is dropped once
  ``foreach_all_gather`` has copied it into the all-gather buffer;
- ``foreach_reduce``: after each reduce-scatter, each gradient shard is copied to the host
  (``new_sharded_grad.to(torch.device("cpu"))``) and the device's reduce-scatter output dropped;
- the optimizer steps the host shards with their host gradients, on the host.

Where the device is the CPU both ``.to`` calls return the tensor itself: no copy is made, and the
host's shards and gradients are the "device's". So ``watch`` keeps the two apart as a GPU does:

- the shards are counted as host memory from the wrap on (``MemTracker.to_host``);
- the shard's copy to the device is made as a GPU makes it: a copy (``.to(device, copy=True)``),
  alive until the all-gather has read it;
- the gradient shards are counted as host memory as each unit's post-backward ends: on the CPU
  they are views of the reduce-scatter output, so that storage leaves the device there, when a
  GPU frees its own after the copy to the host;
- the optimizer phase's new storages are born on the host (``host_phases``), as DeepSpeed's
  offloaded step is counted (bench/worker/zeromem.py).

On a CUDA device none of this is installed: the real ``.to`` calls copy.
"""
from __future__ import annotations

import torch

_PATCHED = {}


def _install_device_copy() -> None:
    """``FSDPParam.all_gather_inputs`` with the shard's copy to the device made where the device is
    the CPU (once per process; it changes nothing for any other parameter)."""
    if _PATCHED:
        return
    from torch.distributed.fsdp._fully_shard import _fsdp_param
    original = _fsdp_param.FSDPParam.all_gather_inputs

    def all_gather_inputs(self):
        if (self.offload_to_cpu and self.device.type == "cpu"
                and self.sharded_state == _fsdp_param.ShardedState.SHARDED
                and not hasattr(self._sharded_local_tensor, "fsdp_pre_all_gather")):
            data = self._sharded_param_data.to(self.device, copy=True)  # the copy a GPU makes of the host shard
            return [_fsdp_param._to_dtype_if_needed(data, self.param_dtype)]
        return original.fget(self)

    _fsdp_param.FSDPParam.all_gather_inputs = property(all_gather_inputs)
    _PATCHED["all_gather_inputs"] = original


def groups(model) -> list:
    """FSDP2's parameter groups of ``model``, in module order."""
    out = []
    for module in model.modules():
        get_state = getattr(module, "_get_fsdp_state", None)
        group = get_state()._fsdp_param_group if get_state else None
        if group is not None:
            out.append(group)
    return out


def watch(model, tracker, device) -> dict:
    """Tell ``tracker`` what FSDP2's CPU offload keeps on the host (the module docstring); returns
    what was handed over, for the record (``details.fsdp_offload``)."""
    if torch.device(device).type != "cpu":
        return {"host_counting": "the device's own: .to copies between the GPU and the host"}
    _install_device_copy()
    shards = []
    for group in groups(model):
        params = [p for p in group.fsdp_params if p.offload_to_cpu]
        shards += [p._sharded_param_data for p in params]
        if params:
            group.post_backward = _gradients_to_host(group, params, tracker)
    tracker.to_host(shards)
    tracker.host_phases.add("optimizer")  # the optimizer steps the host shards on the host
    return {"host_counting": "shards, gradient shards and optimizer state counted as host memory; the shard's "
                             "copy to the device made as a GPU makes it (bench/worker/fsdpoffload.py)",
            "host_shard_tensors": len(shards)}


def _gradients_to_host(group, params, tracker):
    post_backward = group.post_backward  # the bound method

    def wrapped(*args, **kwargs):
        out = post_backward(*args, **kwargs)
        grads = [p.sharded_param.grad for p in params if p.sharded_param.grad is not None]
        tracker.to_host([getattr(g, "_local_tensor", g) for g in grads])
        return out
    return wrapped
