"""The caching allocator's state, as bench/estimate/allocator.py's ``Allocator`` keeps it: the
size rules (``round_size``, ``allocation_size``: torch's ``round_size`` and
``get_allocation_size``), the allocator settings parsed from PYTORCH_CUDA_ALLOC_CONF,
blocks, segments and the two pools, and one segment as ``torch.cuda.memory._snapshot()``
reports it. The constants are c10/cuda/CUDACachingAllocator.cpp's (its k-names beside each).
Torch-free.
"""
from __future__ import annotations

from bisect import bisect_left, insort


MiB = 2**20
MIN_BLOCK = 512            # kMinBlockSize
SMALL_SIZE = MiB           # kSmallSize: largest small-pool request
SMALL_BUFFER = 2 * MiB     # kSmallBuffer: small-pool segment, and its expandable page
LARGE_BUFFER = 20 * MiB    # kLargeBuffer: segment for 1-10 MiB requests, large expandable page
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
ROUND_LARGE = 2 * MiB      # kRoundLarge
NO_LIMIT = 2**62
KEY_SHIFT = 48             # free-block keys: size << 48 | address (one int sorts like (size, addr))
STREAM_SHIFT = KEY_SHIFT + 52  # ... with the stream above both: (stream, size, addr), as torch's BlockComparatorSize


def round_size(nbytes: int) -> int:
    """Bytes the caching allocator counts as allocated for a request of ``nbytes``: at least
    kMinBlockSize, a multiple of it; an empty request allocates nothing (CUDACachingAllocator's
    ``allocate`` calls ``malloc`` only for a size above 0). The one copy of the rule: the worker's
    tracker (bench/worker/cuda_alloc.py) and the allocator replay both read it here."""
    if nbytes <= 0:
        return 0
    return -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def allocation_size(size: int) -> int:
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def parse_conf(conf: str | None) -> dict:
    """PYTORCH_CUDA_ALLOC_CONF's keys that the model follows: {expandable, max_split, gc}."""
    out = {"expandable": False, "max_split": NO_LIMIT, "gc": 0.0}
    for item in (conf or "").split(","):
        if not item.strip():
            continue
        key, _, value = item.partition(":")
        key, value = key.strip(), value.strip()
        if key == "expandable_segments":
            out["expandable"] = value == "True"
        elif key == "max_split_size_mb":
            if int(value) <= LARGE_BUFFER // MiB:  # CUDAAllocatorConfig refuses it too
                raise ValueError(f"max_split_size_mb must be > {LARGE_BUFFER // MiB}, got {value}")
            out["max_split"] = int(value) * MiB
        elif key == "garbage_collection_threshold":
            out["gc"] = float(value)
        else:
            raise ValueError(f"PYTORCH_CUDA_ALLOC_CONF key {key!r} is not modelled")
    return out


class Block:
    __slots__ = ("addr", "allocated", "gc_base", "mapped", "next", "prev", "requested", "seg", "size")

    def __init__(self, addr, size, seg, prev=None, nxt=None, mapped=True):
        self.addr, self.size, self.seg = addr, size, seg
        self.prev, self.next = prev, nxt
        self.allocated, self.mapped = False, mapped
        self.gc_base = self.requested = 0


class Segment:
    """A cudaMalloc'd segment, or an expandable one (``page`` > 0) with its address space, of the
    stream that allocated it: its blocks serve that stream's requests only."""
    __slots__ = ("base", "page", "size", "small", "stream")

    def __init__(self, base, size, small, page=0, stream=0):
        self.base, self.size, self.small, self.page, self.stream = base, size, small, page, stream


def block_key(stream: int, size: int, addr: int = 0) -> int:
    """A free block's sort key: by stream, then size, then address (one int)."""
    return stream << STREAM_SHIFT | size << KEY_SHIFT | addr


class Pool:
    """Cached free blocks sorted by (size, address), as torch's BlockPool.blocks."""
    __slots__ = ("by_key", "calls", "keys", "small", "unmapped")

    def __init__(self, small: bool):
        self.small, self.keys, self.by_key, self.calls = small, [], {}, 0
        self.unmapped: list = []  # (addr, Block) of unmapped expandable ranges, by address

    def add(self, b: Block) -> None:
        k = block_key(b.seg.stream, b.size, b.addr)
        insort(self.keys, k)
        self.by_key[k] = b
        b.gc_base = self.calls

    def remove(self, b: Block) -> None:
        k = block_key(b.seg.stream, b.size, b.addr)
        del self.keys[bisect_left(self.keys, k)]
        del self.by_key[k]

    def add_unmapped(self, b: Block) -> None:
        insort(self.unmapped, (b.addr, id(b), b))

    def remove_unmapped(self, b: Block) -> None:
        self.unmapped.remove((b.addr, id(b), b))


class OutOfMemory(Exception):
    pass


def _segment_entry(run: list, seg: Segment) -> dict:
    blocks = [{"address": b.addr, "size": b.size, "state": "active_allocated" if b.allocated else "inactive",
               "requested_size": b.requested if b.allocated else 0, "frames": []} for b in run]
    active = sum(x["size"] for x in blocks if x["state"] == "active_allocated")
    return {"device": 0, "address": run[0].addr, "total_size": sum(b.size for b in run), "stream": seg.stream,
            "segment_type": "small" if seg.small else "large", "allocated_size": active,
            "active_size": active, "requested_size": sum(x["requested_size"] for x in blocks),
            "is_expandable": bool(seg.page), "frames": [], "blocks": blocks}


# -- the final state, as torch.cuda.memory._snapshot() gives it ------------------------
def segments_snapshot(alloc, live_blocks) -> list[dict]:
    """torch's snapshot ``segments``: one per cudaMalloc segment, one per mapped run of an
    expandable segment (as torch reports them), of ``alloc`` (an ``Allocator``); ``live_blocks``:
    the blocks in use."""
    heads = {}
    for b in [*live_blocks, *alloc.small.by_key.values(), *alloc.large.by_key.values(),
              *(u for p in (alloc.small, alloc.large) for _, _, u in p.unmapped)]:
        if b.seg.base not in heads:
            while b.prev is not None:
                b = b.prev
            heads[b.seg.base] = b
    out = []
    for base in sorted(heads):
        run, b = [], heads[base]
        while b is not None:
            if b.mapped:
                run.append(b)
            if run and (b.next is None or not b.next.mapped):
                out.append(_segment_entry(run, b.seg))
                run = []
            b = b.next
    return out
