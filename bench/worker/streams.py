"""Which stream an allocation is made on, as the tracker records it (None: the default stream): a
GPU's caching allocator keeps one pool per stream, and the allocator replay follows them.

    cpu_stream()    # FSDP2's streams on a cpu device (cpu runs and sim)
    cuda_stream()   # a real GPU's
    BackwardStreams  # a GPU's backward stream semantics on torch.cpu's streams (cpu runs and sim)
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode


def cpu_stream():
    """torch.cpu's current stream, None when it is the default: FSDP2 on a cpu device makes its
    all-gather and reduce-scatter streams with torch.cpu.Stream and enters them as on a GPU, so a
    cpu or sim trace says which allocations a GPU run would make on them."""
    current = torch.cpu.current_stream()
    return None if current is getattr(torch.cpu, "_default_cpu_stream", current) else id(current)


def cuda_stream():
    """torch.cuda's current stream on the current device, None when it is the default."""
    current = torch.cuda.current_stream()
    return None if current == torch.cuda.default_stream() else current.stream_id


class BackwardStreams(TorchFunctionMode):
    """CUDA's stream semantics for backward passes, on torch.cpu's streams (cpu runs and sim): on a GPU
    each autograd node's backward runs on the stream that was current when its forward made it
    (torch/csrc/autograd/engine.cpp, ``evaluate_function``: an ``OptionalStreamGuard`` onto the node's
    stream around its hooks and its apply). torch.cpu's streams have no such guard, so a node made
    under a non-default cpu stream is given one here: its backward enters that stream.

    Where it shows: FSDP1 with ``use_orig_params`` makes its parameters as views of the gathered flat
    parameter on its unshard stream, so their backward (the cat of the gradients into the flat
    gradient, a whole unit's size) runs there on a GPU, in that stream's pool."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        current = torch.cpu.current_stream()
        if current is _DEFAULT_CPU or not torch.is_grad_enabled():
            return out
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            node = getattr(t, "grad_fn", None) if isinstance(t, torch.Tensor) else None
            if node is not None and "ft_membench_stream" not in node.metadata:
                node.metadata["ft_membench_stream"] = current
                node.register_prehook(_enter(current))
                node.register_hook(_leave)
        return out


_DEFAULT_CPU = getattr(torch.cpu, "_default_cpu_stream", None)
_ENTERED: list = []


def _enter(stream):
    def prehook(grad_outputs):
        ctx = torch.cpu.stream(stream)
        ctx.__enter__()
        _ENTERED.append(ctx)
    return prehook


def _leave(grad_inputs, grad_outputs):
    if _ENTERED:
        _ENTERED.pop().__exit__(None, None, None)
