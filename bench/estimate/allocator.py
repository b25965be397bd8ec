"""A model of PyTorch's CUDA caching allocator: replay an allocation trace, get reserved memory.

    Allocator(capacity=None, conf="expandable_segments:True") .malloc(nbytes) -> Block, .free(block)
    (bench/estimate/replay.py replays a cell's trace through it)

Torch-free (the worker, the parent side and the report import it). The rules are those of
``c10/cuda/CUDACachingAllocator.cpp`` for the torch the project pins (2.13; read at
pytorch/pytorch commit 001074d2), one device, no CUDA graphs:

- every request is rounded up to a multiple of 512 B (``round_size``; 0 B never reaches it);
- requests <= 1 MiB use the small pool, whose segments are 2 MiB; larger ones the large pool,
  whose segments are 20 MiB for requests under 10 MiB and the request rounded up to 2 MiB
  otherwise (``get_allocation_size``);
- a request takes the smallest cached free block that fits (best fit, ties by address); a
  block of at least ``max_split_size`` is never given to a smaller request, and a request of
  at least ``max_split_size`` takes an oversize block only if it wastes < 20 MiB
  (``get_free_block``); the block is split when the remainder is >= 512 B (small pool, or
  any pool with expandable segments) or > 1 MiB and the request is below ``max_split_size``
  (large pool; ``should_split``); otherwise the whole block is handed out (and counted
  allocated);
- a freed block merges with free neighbours of its segment (``free_block``);
- with no cached block, a new segment (cudaMalloc) is taken; when it does not fit under the
  capacity: oversize cached blocks are released (only with ``max_split_size_mb``), then every
  cached segment with no block in use, then the allocation is retried once, then OOM
  (``malloc``); ``garbage_collection_threshold`` releases the least recently reused unsplit
  cached blocks first when reserved memory passes that fraction of the capacity (torch does
  so only under ``set_per_process_memory_fraction``; the capacity here plays that part);
- ``expandable_segments:True``: one segment per pool that grows by mapping pages (2 MiB in
  the small pool, 20 MiB in the large) at its lowest free address; cached free pages are
  unmapped when an allocation would not fit (``try_allocate_expandable_block``,
  ``release_blocks``/``unmap_block``).

Reserved is what segments (or mapped pages) hold; allocated is the sum of handed-out block
sizes (what ``torch.cuda.memory_allocated`` counts). The capacity is what the process may
reserve: the GPU's memory minus the CUDA context and cuBLAS workspaces (bench/estimate/verdicts.py).
Not modelled: CUDA graphs' private pools,
``roundup_power2_divisions``, ``torch.cuda.empty_cache()`` calls (not in a trace), the
driver's own address-space fragmentation.

Streams: each segment belongs to the stream that allocated it, and a cached free block serves
requests of that stream only (the pools sort blocks by (stream, size, address): torch's
``BlockComparatorSize``; ``get_free_block`` takes the lower bound and gives up when its stream is
another; an expandable segment is per stream too). FSDP2 allocates its all-gather buffers on its
copy-in stream and its reduce-scatter buffers on its reduce-scatter stream: blocks the default
stream cannot reuse. Cross-stream uses (``record_stream``) are not modelled: a block returns to its
pool when the trace frees it.

A trace (bench/worker/memtrack.py writes it) is a dict of equal-length columns
(``kind`` 1 = alloc / 0 = free, ``serial``, ``bytes``, ``step``, ``phase``, ``op``,
``category``, and ``stream``: 0 the default stream) plus the name lists the small ints index; see ``replay``.
"""
from __future__ import annotations

from bisect import bisect_left

from bench.estimate.pools import (LARGE_BUFFER, MIN_BLOCK, NO_LIMIT, SMALL_BUFFER, SMALL_SIZE, STREAM_SHIFT, Block,
                                  OutOfMemory, Pool, Segment, allocation_size, block_key, parse_conf, round_size)

SOURCE = ("c10/cuda/CUDACachingAllocator.cpp (torch 2.13; read at pytorch/pytorch commit "
          "001074d25084fdb87a799823e395a50f5ec044d3): round_size, get_allocation_size, get_free_block, "
          "should_split, free_block, alloc_block, release_available_cached_blocks, release_cached_blocks, "
          "garbage_collect_cached_blocks, try_allocate_expandable_block, unmap_block")


class Allocator:
    """One device's caching allocator. ``malloc(nbytes)`` -> Block, ``free(block)``;
    ``allocated``, ``reserved`` and the counters below follow torch's DeviceStats."""

    def __init__(self, capacity: int | None = None, conf: str | None = None, log: list | None = None):
        c = parse_conf(conf)
        self.expandable, self.max_split, self.gc = c["expandable"], c["max_split"], c["gc"]
        self.capacity = NO_LIMIT if capacity is None else capacity
        self.gc_on = self.gc > 0 and capacity is not None
        self.small, self.large = Pool(True), Pool(False)
        self.allocated = self.reserved = 0
        self.device_allocs = self.device_frees = self.retries = 0
        self.segments: dict[int, Segment] = {}  # base -> live segment
        self._next_addr = 1 << 30
        self.log = log  # torch snapshot trace entries, when exporting a timeline

    # -- malloc -------------------------------------------------------------------------
    def malloc(self, nbytes: int, stream: int = 0) -> Block:
        size = round_size(nbytes)
        pool = self.small if size <= SMALL_SIZE else self.large
        block = self._get_free_block(pool, size, stream)
        if block is None:
            if self.gc_on:
                self._garbage_collect()
            block = (self._alloc_block(pool, size, stream)
                     or (self._release_available(pool, size, stream) and self._alloc_block(pool, size, stream))
                     or (self._release_cached() and self._alloc_block(pool, size, stream, retry=True)))
            if not block:
                if self.log is not None:
                    self.log.append({"action": "oom", "addr": 0, "size": size, "stream": stream,
                                     "device_free": self.capacity - self.reserved, "frames": []})
                raise OutOfMemory(f"{size} B on top of {self.reserved} B reserved, capacity {self.capacity} B")
        if self._should_split(block, pool, size):
            rest = Block(block.addr + size, block.size - size, block.seg, block, block.next, True)
            if block.next is not None:
                block.next.prev = rest
            block.next, block.size = rest, size
            pool.add(rest)
        block.allocated, block.requested = True, nbytes
        self.allocated += block.size
        if self.log is not None:
            self.log.append({"action": "alloc", "addr": block.addr, "size": block.size, "stream": stream})
        return block

    def _get_free_block(self, pool: Pool, size: int, stream: int = 0):
        if self.gc_on:
            pool.calls += 1
        keys = pool.keys
        i = bisect_left(keys, block_key(stream, size))
        if i == len(keys) or keys[i] >> STREAM_SHIFT != stream:
            return None  # none cached of this size on this stream
        b = pool.by_key[keys[i]]
        if self.expandable and b.seg.page:
            # best fit counts what an expandable tail block could grow to (get_free_block)
            def grow(x):
                return x.size + (x.next.size if x.next is not None and not x.next.mapped else 0)
            while (i + 1 < len(keys) and keys[i + 1] >> STREAM_SHIFT == stream
                   and grow(pool.by_key[keys[i + 1]]) < grow(b)):
                i += 1
                b = pool.by_key[keys[i]]
        if size < self.max_split <= b.size:
            return None  # no oversize block for a smaller request
        if size >= self.max_split and b.size >= size + LARGE_BUFFER:
            return None  # an oversize block may be rounded up, but by less than 20 MiB
        pool.remove(b)
        return b

    def _should_split(self, b: Block, pool: Pool, size: int) -> bool:
        rest = b.size - size
        if pool.small or self.expandable:
            return rest >= MIN_BLOCK
        return size < self.max_split and rest > SMALL_SIZE

    def _alloc_block(self, pool: Pool, size: int, stream: int = 0, retry: bool = False):
        if retry:
            self.retries += 1
        if self.expandable:
            return self._expandable_block(pool, size, stream)
        alloc = allocation_size(size)
        if self.reserved + alloc > self.capacity:
            return None
        seg = Segment(self._take_addresses(alloc), alloc, pool.small, stream=stream)
        self.segments[seg.base] = seg
        self.reserved += alloc
        self.device_allocs += 1
        if self.log is not None:
            self.log.append({"action": "segment_alloc", "addr": seg.base, "size": alloc, "stream": stream})
        return Block(seg.base, alloc, seg)

    def _take_addresses(self, nbytes: int) -> int:
        base = self._next_addr
        self._next_addr += -(-nbytes // LARGE_BUFFER) * LARGE_BUFFER + LARGE_BUFFER  # never adjacent
        return base

    # -- expandable segments ------------------------------------------------------------
    def _expandable_block(self, pool: Pool, size: int, stream: int = 0):
        cand = self._find_expandable(pool, size, stream)
        if not cand.mapped and not self._map(pool, cand, min(cand.size, size)):
            return None
        while cand.size < size:
            nxt = cand.next
            if not self._map(pool, nxt, min(size - cand.size, nxt.size)):
                return None
            cand = nxt  # it merged with cand
        pool.remove(cand)
        return cand

    def _find_expandable(self, pool: Pool, size: int, stream: int = 0) -> Block:
        """The lowest address where ``size`` fits in free and unmapped blocks of ``stream``'s
        segment; a new segment (address space only) when there is none."""
        for _, _, u in pool.unmapped:
            if u.seg.stream != stream:
                continue
            c = u.prev if u.prev is not None and not u.prev.allocated else u
            room, b = 0, c
            while room < size and b is not None and not b.allocated:
                room, b = room + b.size, b.next
            if room >= size:
                return c
        page = SMALL_BUFFER if pool.small else LARGE_BUFFER
        space = min(self.capacity + self.capacity // 8, 2**44)
        space = -(-space // page) * page
        seg = Segment(self._take_addresses(space), space, pool.small, page, stream)
        self.segments[seg.base] = seg
        b = Block(seg.base, space, seg, mapped=False)
        pool.add_unmapped(b)
        return b

    def _map(self, pool: Pool, b: Block, size: int) -> bool:
        seg, page = b.seg, b.seg.page
        first = (b.addr - seg.base) // page
        last = -(-(b.addr + size - seg.base) // page)
        nbytes = (last - first) * page
        if self.reserved + nbytes > self.capacity:
            return False  # cuMemCreate fails: this call maps nothing
        pool.remove_unmapped(b)
        b.mapped = True
        if nbytes < b.size:
            rest = Block(b.addr + nbytes, b.size - nbytes, seg, b, b.next, mapped=False)
            if b.next is not None:
                b.next.prev = rest
            b.next, b.size = rest, nbytes
            pool.add_unmapped(rest)
        self._merge(pool, b, b.prev)
        self._merge(pool, b, b.next)
        pool.add(b)
        self.reserved += nbytes
        self.device_allocs += 1
        if self.log is not None:
            self.log.append({"action": "segment_map", "addr": seg.base + first * page, "size": nbytes,
                             "stream": seg.stream})
        return True

    def _unmap(self, pool: Pool, b: Block) -> None:
        seg, page = b.seg, b.seg.page
        first = -(-(b.addr - seg.base) // page)
        last = (b.addr + b.size - seg.base) // page
        if first >= last:
            return
        pool.remove(b)
        start, nbytes = seg.base + first * page, (last - first) * page
        if start > b.addr:
            before = Block(b.addr, start - b.addr, seg, b.prev, b)
            if b.prev is not None:
                b.prev.next = before
            b.prev = before
            pool.add(before)
        after = b.addr + b.size - (start + nbytes)
        if after > 0:
            tail = Block(start + nbytes, after, seg, b, b.next)
            if b.next is not None:
                b.next.prev = tail
            b.next = tail
            pool.add(tail)
        b.addr, b.size, b.mapped = start, nbytes, False
        self._merge(pool, b, b.prev)
        self._merge(pool, b, b.next)
        pool.add_unmapped(b)
        self.reserved -= nbytes
        self.device_frees += 1
        if self.log is not None:
            self.log.append({"action": "segment_unmap", "addr": start, "size": nbytes, "stream": seg.stream})

    # -- free ---------------------------------------------------------------------------
    def free(self, b: Block) -> None:
        b.allocated = False
        self.allocated -= b.size
        if self.log is not None:
            self.log.append({"action": "free_requested", "addr": b.addr, "size": b.size, "stream": b.seg.stream})
            self.log.append({"action": "free_completed", "addr": b.addr, "size": b.size, "stream": b.seg.stream})
        pool = self.small if b.seg.small else self.large
        self._merge(pool, b, b.prev)
        self._merge(pool, b, b.next)
        pool.add(b)

    def _merge(self, pool: Pool, dst: Block, src) -> None:
        """try_merge_blocks: ``dst`` absorbs its free neighbour ``src`` of the same mapping."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return
        if src.mapped:
            pool.remove(src)
        else:
            pool.remove_unmapped(src)
        if dst.prev is src:
            dst.addr, dst.prev = src.addr, src.prev
            if src.prev is not None:
                src.prev.next = dst
        else:
            dst.next = src.next
            if src.next is not None:
                src.next.prev = dst
        dst.size += src.size

    # -- giving memory back -------------------------------------------------------------
    def _release_segment(self, pool: Pool, b: Block) -> None:
        pool.remove(b)
        del self.segments[b.seg.base]
        self.reserved -= b.size
        self.device_frees += 1
        if self.log is not None:
            self.log.append({"action": "segment_free", "addr": b.addr, "size": b.size, "stream": b.seg.stream})

    def _release_available(self, pool: Pool, size: int, stream: int = 0) -> bool:
        """Release oversize cached blocks of ``stream``, enough for ``size`` (only with max_split_size_mb)."""
        if self.max_split == NO_LIMIT:
            return False
        key = max(size, self.max_split)
        keys = pool.keys
        i = bisect_left(keys, block_key(stream, key))
        whole = [pool.by_key[k] for k in keys if not pool.by_key[k].seg.page and k >> STREAM_SHIFT == stream]
        if (i < len(keys) and keys[i] >> STREAM_SHIFT == stream and pool.by_key[keys[i]].prev is None
                and pool.by_key[keys[i]].next is None):
            self._release_segment(pool, pool.by_key[keys[i]])
            return True
        total = 0
        for b in sorted((b for b in whole if b.size >= self.max_split and b.prev is None and b.next is None),
                        key=lambda b: (b.size, b.addr), reverse=True):
            if total >= key:
                break
            total += b.size
            self._release_segment(pool, b)
        return total >= key

    def _release_cached(self) -> bool:
        """release_cached_blocks: every cached segment with nothing in use; expandable free
        pages are unmapped, and an expandable segment left empty goes too."""
        for pool in (self.large, self.small):
            to_unmap = []
            for k in list(pool.keys):
                b = pool.by_key[k]
                if b.seg.page:
                    to_unmap.append(b)
                elif b.prev is None and b.next is None:
                    self._release_segment(pool, b)
            for b in to_unmap:
                self._unmap(pool, b)
                if b.prev is None and b.next is None and not b.mapped:
                    pool.remove_unmapped(b)
                    del self.segments[b.seg.base]
        return True

    def _garbage_collect(self) -> None:
        """garbage_collect_cached_blocks: above gc * capacity, release the unsplit cached
        large blocks at least as old (in free-block searches) as the average."""
        threshold = int(self.gc * self.capacity)
        if self.reserved <= threshold:
            return
        target, reclaimed = self.reserved - threshold, 0
        pool = self.large
        free = [pool.by_key[k] for k in pool.keys
                if pool.by_key[k].prev is None and pool.by_key[k].next is None and not pool.by_key[k].seg.page]
        ages = {id(b): pool.calls - b.gc_base for b in free}
        total, count = sum(ages.values()), len(free)
        freed = True
        while reclaimed < target and freed and count > 0:
            threshold_age, freed = total / count, False
            for b in list(free):
                if ages[id(b)] >= threshold_age:
                    freed = True
                    reclaimed += b.size
                    total -= ages[id(b)]
                    count -= 1
                    free.remove(b)
                    self._release_segment(pool, b)
