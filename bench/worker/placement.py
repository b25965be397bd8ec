"""Where saved activations and the optimizer step live: activation offloading, optimizer in
backward, and torch.compile of the decoder layers.

- ``offload_saved(session)``: torchtune's ``OffloadActivations`` (saved_tensors_hooks, as
  torch's ``save_on_cpu``): every tensor autograd saves in forward is copied to host memory
  and brought back in backward, with its forward and backward stashes (the class says what
  they keep alive). Parameters (and views of them) and tensors under 1 KiB stay where they
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
  would read real memory) passes its own backend (bench/worker/sim/fusion.py): the same dynamo
  graphs, inductor's decompositions and min-cut partitioner, so backward saves the same
  tensors; the graphs then run op by op, with the values inductor fuses into one kernel's
  registers left uncounted. The tracker sees compiled code because it declares itself outside
  compile internals (memtrack ``ignore_compile_internals``) and inductor's CPU buffers are
  allocated through ``torch.empty_strided`` (``route_inductor_allocations``), which the
  dispatch mode sees, instead of a C++ entry point that bypasses it.
"""
from __future__ import annotations

import itertools

import torch

from bench.worker.decoder import decoder_layers


class offload_saved(torch.autograd.graph.saved_tensors_hooks):
    """torchtune's ``OffloadActivations`` (its defaults: ``use_streams=True``,
    ``max_fwd_stash_size=5``, ``min_offload_size=1024``), its bookkeeping run as is, so the
    device copies it keeps alive for its copy stream live as long here:

    - forward: each saved tensor gets an id; one of 1024 bytes or more, not a parameter, is
      copied to the host and its device tensor stays in a *forward stash* until a tensor 5 ids
      later is offloaded (the copy is then surely done); what is left in the stash when forward
      ends stays until backward's first node that reloads a tensor has run;
    - backward: a tensor still in the forward stash is used as is; any other comes back to the
      device and stays in a *backward stash* until the next autograd node that reloads a
      tensor has run (torchtune waits on the previous node's events there), the rest when
      backward ends.

    On CUDA the copies are synchronous here (no side stream); memory is the same, the overlap
    is not. ``offloaded``: bytes the last forward copied to the host (the record's proof)."""

    FWD_STASH, MIN_BYTES = 5, 1024

    def __init__(self, model, tracker, device):
        keys = {p.untyped_storage()._cdata for p in model.parameters()}
        pin = torch.device(device).type == "cuda"
        self.offloaded = 0
        self.active = False  # inside the decoder body's forward
        ids = iter(())
        host_of = {}  # id -> (device, host copy) of an offloaded tensor, until it is unpacked
        fwd_stash: dict = {}  # id -> device tensor kept alive after its copy
        bwd_stash: dict = {}  # id -> reloaded device tensor
        node_of = {"node": None, "graph": None}
        base = model.get_base_model() if hasattr(model, "get_base_model") else model

        def start(*_):
            nonlocal ids
            self.active, self.offloaded, ids = True, 0, itertools.count(1)
            host_of.clear()
            fwd_stash.clear()
            bwd_stash.clear()
            node_of.update(node=None, graph=None)
        base.model.register_forward_pre_hook(start)
        base.model.register_forward_hook(lambda *_: setattr(self, "active", False))

        def pack(t):
            if not self.active or t.device.type == "meta":
                return (False, t)
            tid = next(ids)
            if t.untyped_storage()._cdata in keys or t.numel() * t.element_size() < self.MIN_BYTES:
                return (False, t)
            for old in [k for k in fwd_stash if k <= tid - self.FWD_STASH]:
                del fwd_stash[old]
            host = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=pin, device="cpu")
            host.copy_(t)
            tracker.to_host([host])
            self.offloaded += host.untyped_storage().nbytes()
            host_of[tid] = (t.device, host)
            fwd_stash[tid] = t
            return (True, tid)

        def unpack(packed):
            offloaded, tid = packed
            if offloaded is False:
                return tid
            where, host = host_of.pop(tid)
            graph, node = torch._C._current_graph_task_id(), torch._C._current_autograd_node()
            if node_of["graph"] != graph:  # a new backward: what is left goes when it ends
                node_of.update(graph=graph, node=None)
                torch.autograd.Variable._execution_engine.queue_callback(bwd_stash.clear)
            previous = []
            if node is not None and node is not node_of["node"]:
                node_of["node"], previous = node, list(bwd_stash)
            if tid in fwd_stash:
                t = fwd_stash[tid]
            else:
                t = bwd_stash[tid] = host.to(where, non_blocking=pin)

            def after_node(outputs, _inputs):
                if tid in bwd_stash and any(o is not None and o.untyped_storage() is t.untyped_storage()
                                            for o in outputs):
                    del bwd_stash[tid]  # an output is a view of it: it lives as long as that output
                fwd_stash.clear()
                for old in previous:
                    bwd_stash.pop(old, None)
            if node is not None:
                node.register_hook(after_node)
            return t

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
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile(backend=backend)
    return len(layers)
