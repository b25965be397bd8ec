"""What the CUDA caching allocator counts for one allocation: sim mode's rounding.

``torch.cuda.max_memory_allocated`` sums the sizes of the allocator's *blocks*, not the bytes
asked for. c10/cuda/CUDACachingAllocator.cpp rounds every request with ``round_size``:

    if size < kMinBlockSize (512):  return 512
    else:                           return 512 * ceil(size / 512)

(the ``roundup_power2_divisions`` option of PYTORCH_CUDA_ALLOC_CONF changes this; it is off
by default and sim does not model it). A request of 0 bytes never reaches the allocator
(``allocate(0)`` returns an empty pointer), so it counts 0.

Not modelled, and why: a block is split off a larger free block only when the remainder is
>= 512 B (small pool, requests <= 1 MiB) or > 1 MiB (large pool); an unsplit cached block is
counted whole, so a real run can count up to 1 MiB more per large block than its rounded
size. That depends on the order of frees and on which cached blocks exist, i.e. on the
allocator's history, not on the step. Segments (2 MiB for small requests, 20 MiB for 1-10 MiB
requests, 2 MiB multiples above) are *reserved* memory: ``max_memory_reserved``, not
``max_memory_allocated``. Both, splitting and segments, are what the allocator model replays
from the cell's trace (bench/estimate/allocator.py); the verdicts come from its reserved memory.
"""
from __future__ import annotations

from bench.estimate.pools import MIN_BLOCK as MIN_BLOCK_BYTES, round_size  # noqa: F401  (the one copy of the rule)
