"""Which stream an allocation is made on, as the tracker records it (None: the default stream): a
GPU's caching allocator keeps one pool per stream, and the allocator replay follows them.

    cpu_stream()    # FSDP2's streams on a cpu device (cpu runs and sim)
    cuda_stream()   # a real GPU's
    follow_streams()  # a GPU's backward stream semantics on torch.cpu's streams (cpu runs and sim)
    FollowsBackwardStreams  # the tracker's mixin: follow_streams while a cpu-stream tracker is entered
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
    gradient, a whole unit's size) runs there on a GPU, in that stream's pool.

    The mode is on only while a non-default cpu stream is entered (``follow_streams`` wraps
    ``torch.cpu.StreamContext``), so a step that never leaves the default stream, a compiled one
    among them, runs without it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not torch.is_grad_enabled():
            return out
        current = torch.cpu.current_stream()
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            node = getattr(t, "grad_fn", None) if isinstance(t, torch.Tensor) else None
            if node is not None and "ft_membench_stream" not in node.metadata:
                node.metadata["ft_membench_stream"] = current
                node.register_prehook(_enter(current))
                node.register_hook(_leave)
        return out


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


class follow_streams:
    """While active: entering a non-default cpu stream (``torch.cpu.stream(s)``, as FSDP enters its
    streams on a cpu device) also enters ``BackwardStreams``, left with the stream."""

    def __enter__(self):
        cls = torch.cpu.StreamContext
        self._saved = (vars(cls)["__enter__"], vars(cls)["__exit__"])
        enter, leave = self._saved

        def __enter__(ctx):
            out = enter(ctx)
            default = getattr(torch.cpu, "_default_cpu_stream", None)
            ctx._ft_membench_mode = None
            if ctx.stream is not None and ctx.stream is not default:
                ctx._ft_membench_mode = BackwardStreams()
                ctx._ft_membench_mode.__enter__()
            return out

        def __exit__(ctx, *exc):
            mode = getattr(ctx, "_ft_membench_mode", None)
            if mode is not None:
                ctx._ft_membench_mode = None
                mode.__exit__(*exc)
            return leave(ctx, *exc)
        cls.__enter__, cls.__exit__ = __enter__, __exit__
        return self

    def __exit__(self, *exc):
        torch.cpu.StreamContext.__enter__, torch.cpu.StreamContext.__exit__ = self._saved
        return False


class FollowsBackwardStreams:
    """A tracker mixin (``MemTracker``): while a tracker that reads torch.cpu's streams is entered,
    a node's backward runs on its forward's stream, as on a GPU (``follow_streams``)."""
    _backward_streams = None

    def __enter__(self):
        self._backward_streams = follow_streams() if self.stream_of is cpu_stream else None
        if self._backward_streams is not None:
            self._backward_streams.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        if self._backward_streams is not None:
            self._backward_streams.__exit__(*exc)
            self._backward_streams = None
        return out
