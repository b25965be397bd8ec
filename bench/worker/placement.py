"""Where saved activations and the optimizer step live: activation offloading, optimizer in
backward, and torch.compile of the decoder layers.

- ``offload_saved(session)``: torch's ``save_on_cpu`` mechanism (saved_tensors_hooks): every
  tensor autograd saves in forward is copied to host memory and brought back in backward.
  As torchtune's ``OffloadActivations`` does, parameters (and views of them) stay where they
  are. Only the decoder body offloads: torchtune keeps the output projection's saved tensors
  on the device (its ``NoOpManager``) and computes the loss outside its offloading context,
  since backward needs them first; here the hooks pass through outside the decoder's
  forward. The host copies are counted as host memory (``tracker.to_host``); on a CPU run
  device and host are the same RAM, so the copy is what moves. Under checkpointing the saved
  tensors are the checkpoints (each layer's input): offloaded checkpoints.
- ``InBackward``: torchtune's optimizer-in-backward: one optimizer per parameter, stepped by
  ``register_post_accumulate_grad_hook`` as soon as that gradient is complete, which then
  frees it. ``step`` and ``zero_grad`` do nothing; ``state`` and ``param_groups`` span all the
  per-parameter optimizers, so the record reads the state as for any optimizer.
- ``compile_layers(model)``: ``torch.compile`` of each decoder layer, as torchtune's
  ``compile_model``. Inductor on cpu and cuda. Sim mode (fake tensors: inductor's kernels
  would read real memory) swaps ``COMPILE_BACKEND`` for ``aot_eager_decomp_partition``: the
  same dynamo graphs, decompositions and min-cut partitioner inductor uses, so backward saves
  the same tensors; the graphs then run op by op, so the transients inductor fuses away
  inside a kernel are counted (an upper bound on those). The tracker sees compiled code because it declares itself outside
  compile internals (memtrack ``ignore_compile_internals``) and inductor's CPU buffers are
  allocated through ``torch.empty_strided`` (``route_inductor_allocations``), which the
  dispatch mode sees, instead of a C++ entry point that bypasses it.
"""
from __future__ import annotations

import weakref

import torch


class offload_saved(torch.autograd.graph.saved_tensors_hooks):
    def __init__(self, model, tracker, device):
        keys = {p.untyped_storage()._cdata for p in model.parameters()}
        pin = torch.device(device).type == "cuda"
        self.offloaded = 0  # bytes copied to the host by the last forward (the record's proof)
        self.active = False  # inside the decoder body's forward
        copies = {}  # id(tensor) -> (weakref to it, weakref to its host copy): one copy per tensor
        base = model.get_base_model() if hasattr(model, "get_base_model") else model

        def start(*_):
            self.active, self.offloaded = True, 0
            copies.clear()
        base.model.register_forward_pre_hook(start)
        base.model.register_forward_hook(lambda *_: setattr(self, "active", False))

        def pack(t):
            if not self.active or t.untyped_storage()._cdata in keys or t.device.type == "meta":
                return (False, t)
            seen = copies.get(id(t))
            host = seen[1]() if seen and seen[0]() is t else None
            if host is None:  # a tensor several ops save (a linear's input for q, k and v) moves once
                host = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=pin, device="cpu")
                host.copy_(t)
                tracker.to_host([host])
                self.offloaded += host.untyped_storage().nbytes()
                copies[id(t)] = (weakref.ref(t), weakref.ref(host))
            return (t.device, host)

        def unpack(packed):
            where, t = packed
            return t if where is False else t.to(where, non_blocking=pin)

        super().__init__(pack, unpack)


class InBackward:
    """Per-parameter optimizers stepped from backward (see the module docstring)."""

    def __init__(self, make, params):
        self.per_param = {p: make([p]) for p in params}
        for p in self.per_param:
            p.register_post_accumulate_grad_hook(self._step)
        self.steps_in_backward = 0
        self.grad_dtypes: set = set()

    def _step(self, p):
        self.grad_dtypes.add(p.grad.dtype)
        opt = self.per_param[p]
        opt.step()
        opt.zero_grad(set_to_none=True)
        self.steps_in_backward += 1

    @property
    def state(self):
        return {p: st for opt in self.per_param.values() for p, st in opt.state.items()}

    @property
    def param_groups(self):
        return [g for opt in self.per_param.values() for g in opt.param_groups]

    @property
    def inner_class(self):
        return type(next(iter(self.per_param.values()))).__name__

    def step(self):
        pass

    def zero_grad(self, set_to_none=True):
        pass

    def __getattr__(self, name):  # bitsandbytes' name2qmap and the like, from any one of them
        if name == "per_param":
            raise AttributeError(name)
        return getattr(next(iter(self.per_param.values())), name)


def route_inductor_allocations() -> None:
    """Inductor's generated CPU wrappers bind ``torch._C._dynamo.guards._empty_strided_cpu``
    when their module loads; pointing it at ``torch.empty_strided`` keeps the same
    buffers visible to the dispatch-level tracker."""
    guards = torch._C._dynamo.guards
    if not getattr(guards, "_bench_routed", False):
        guards._empty_strided_cpu = lambda size, stride, dtype: torch.empty_strided(
            size, stride, dtype=dtype, device="cpu")
        guards._bench_routed = True


COMPILE_BACKEND = "inductor"


def compile_layers(model, backend: str = COMPILE_BACKEND) -> int:
    """torch.compile each decoder layer in place; returns how many were compiled. ``backend``:
    inductor for a real run; sim passes its own (see the module docstring)."""
    route_inductor_allocations()
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for layer in base.model.layers:
        layer.compile(backend=backend)
    return len(base.model.layers)
