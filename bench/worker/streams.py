"""Which stream an allocation is made on, as the tracker records it (None: the default stream): a
GPU's caching allocator keeps one pool per stream, and the allocator replay follows them.

    cpu_stream()    # FSDP2's streams on a cpu device (cpu runs and sim)
    cuda_stream()   # a real GPU's
"""
from __future__ import annotations

import torch


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
