"""The caching-allocator model (bench/estimate/allocator.py) on hand-made traces: every expected
figure follows from the rules its docstring cites from c10/cuda/CUDACachingAllocator.cpp."""
import pytest

from bench.estimate import replay
from bench.estimate.allocator import Allocator
from bench.estimate.pools import OutOfMemory, parse_conf

MiB = 2**20


def trace(*events, steps=None):
    """A trace of ("a", serial, bytes) / ("f", serial) events, one category and phase."""
    cols = {k: [] for k in ("kind", "serial", "bytes", "step", "phase", "op", "category")}
    sizes = {}
    for ev in events:
        alloc = ev[0] == "a"
        if alloc:
            sizes[ev[1]] = ev[2]
        for k, v in zip(cols, (int(alloc), ev[1], sizes[ev[1]], 0, 0, 0, 0)):
            cols[k].append(v)
    return {"columns": cols, "phases": ["forward"], "ops": ["aten.empty"], "categories": ["activations"],
            "reset_at": 0, "max_events": 10**6, "dropped_events": 0}


def run(events, conf=None, capacity=None):
    return replay.replay(trace(*events), conf, capacity)


def test_small_requests_round_to_512_and_share_a_2mib_segment():
    out = run([("a", 1, 100), ("a", 2, 1000), ("a", 3, MiB)])
    assert out["segment_allocs"] == 1 and out["reserved_peak_bytes"] == 2 * MiB
    assert out["allocated_peak_bytes"] == 512 + 1024 + MiB


def test_mid_size_requests_pack_into_20mib_segments():
    out = run([("a", i, 5 * MiB) for i in range(5)])
    assert out["segment_allocs"] == 2 and out["reserved_peak_bytes"] == 40 * MiB


def test_large_request_rounds_to_2mib_and_an_unsplit_remainder_counts_allocated():
    out = run([("a", 1, 11 * MiB)])  # 12 MiB segment; the 1 MiB rest is not > 1 MiB: not split
    assert out["reserved_peak_bytes"] == 12 * MiB and out["allocated_peak_bytes"] == 12 * MiB


def test_growing_requests_climb_a_staircase_that_expandable_segments_flatten():
    events = [("a", 1, 12 * MiB), ("f", 1), ("a", 2, 14 * MiB), ("f", 2), ("a", 3, 16 * MiB), ("f", 3)]
    plain = run(events)
    assert plain["segment_allocs"] == 3 and plain["reserved_peak_bytes"] == (12 + 14 + 16) * MiB
    assert plain["fragmentation_at_peak_bytes"] == (12 + 14) * MiB
    grown = run(events, "expandable_segments:True")  # one 20 MiB page holds each in turn
    assert grown["segment_allocs"] == 1 and grown["reserved_peak_bytes"] == 20 * MiB


def test_expandable_segment_maps_pages_as_it_grows():
    out = run([("a", 1, 30 * MiB), ("a", 2, 15 * MiB), ("a", 3, 100)], "expandable_segments:True")
    # large pool: 30 MiB -> 2 pages of 20 MiB, +15 MiB -> 1 more page; small pool: one 2 MiB page
    assert out["reserved_peak_bytes"] == 60 * MiB + 2 * MiB and out["segment_allocs"] == 3


def test_freed_neighbours_merge_and_serve_a_larger_request():
    out = run([("a", 1, 5 * MiB), ("a", 2, 5 * MiB), ("f", 1), ("f", 2), ("a", 3, 18 * MiB)])
    assert out["segment_allocs"] == 1 and out["reserved_peak_bytes"] == 20 * MiB


def test_out_of_capacity_frees_the_cache_retries_then_fails():
    events = [("a", 1, 12 * MiB), ("f", 1), ("a", 2, 20 * MiB), ("a", 3, 20 * MiB)]
    out = run(events, capacity=30 * MiB)
    assert out["alloc_retries"] == 2 and out["segment_frees"] == 1  # one retry that worked, one that did not
    assert out["oom"]["event"] == 3 and out["oom"]["reserved_bytes"] == 20 * MiB


def test_max_split_size_keeps_oversize_blocks_whole():
    conf = "max_split_size_mb:64"
    out = run([("a", 1, 100 * MiB), ("f", 1), ("a", 2, 30 * MiB)], conf)
    assert out["reserved_peak_bytes"] == 130 * MiB  # an oversize block is not split for a small request
    out = run([("a", 1, 100 * MiB), ("f", 1), ("a", 2, 90 * MiB)], conf)
    assert out["reserved_peak_bytes"] == 100 * MiB and out["allocated_peak_bytes"] == 100 * MiB
    with pytest.raises(ValueError):
        parse_conf("max_split_size_mb:20")


def test_oversize_blocks_are_released_first_under_max_split_size():
    a = Allocator(capacity=150 * MiB, conf="max_split_size_mb:64")
    a.free(a.malloc(100 * MiB))
    a.malloc(90 * MiB)  # the 100 MiB block wastes < 20 MiB: reused whole
    assert a.reserved == 100 * MiB
    for conf, retries in (("max_split_size_mb:64", 0), ("", 1)):
        b = Allocator(capacity=250 * MiB, conf=conf)
        x, y = b.malloc(100 * MiB), b.malloc(80 * MiB)
        b.free(x)
        b.free(y)
        b.malloc(150 * MiB)  # fits only once both cached segments go
        # with max_split_size the oversize blocks go first, largest first, before any full flush
        assert (b.reserved, b.device_frees, b.retries) == (150 * MiB, 2, retries)


def test_garbage_collection_threshold_releases_old_cached_segments():
    events = [("a", 1, 40 * MiB), ("f", 1), ("a", 2, 50 * MiB)]
    assert run(events, capacity=100 * MiB)["reserved_peak_bytes"] == 90 * MiB
    gc = run(events, "garbage_collection_threshold:0.3", capacity=100 * MiB)
    assert gc["reserved_peak_bytes"] == 50 * MiB and gc["alloc_retries"] == 0


def test_expandable_segments_unmap_free_pages_when_full():
    # address space: 1 1/8 of the capacity, in 20 MiB pages: 6 pages for 100 MiB
    a = Allocator(capacity=100 * MiB, conf="expandable_segments:True")
    x = a.malloc(40 * MiB)  # pages 0-1
    y = a.malloc(10 * MiB)  # page 2
    a.free(x)  # pages 0-1 free but still mapped
    assert a.reserved == 60 * MiB
    a.malloc(70 * MiB)  # from page 2's free tail on: 3 more pages do not fit beside 0-2
    assert a.retries == 1 and a.device_frees == 1  # pages 0-1 unmapped, then the segment grew
    assert a.reserved == 80 * MiB
    a.free(y)
    with pytest.raises(OutOfMemory):
        a.malloc(90 * MiB)


def test_snapshot_accounts_for_every_reserved_byte():
    out = replay.replay(trace(("a", 1, 5 * MiB), ("a", 2, 300), ("f", 1), ("a", 3, 12 * MiB)), snapshot=True)
    snap = out["snapshot"]
    assert sum(s["total_size"] for s in snap["segments"]) == out["reserved_peak_bytes"]
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions.count("segment_alloc") == out["segment_allocs"] and "free_completed" in actions


def stream_trace(*events):
    """("a", serial, bytes, stream) / ("f", serial) events: a trace with its stream column."""
    t = trace(*[ev[:3] if ev[0] == "a" else ev for ev in events])
    streams = {ev[1]: ev[3] for ev in events if ev[0] == "a"}
    t["columns"]["stream"] = [streams[s] for s in t["columns"]["serial"]]
    return t


def test_a_block_cached_on_one_stream_does_not_serve_another():
    """torch's pools sort blocks by (stream, size, address) and get_free_block gives up on a block
    of another stream: a 100 MiB buffer freed on FSDP's all-gather stream stays reserved while the
    default stream allocates as much again."""
    one = [("a", 1, 100 * MiB, 1), ("f", 1), ("a", 2, 100 * MiB, 0)]
    assert replay.replay(stream_trace(*one))["reserved_peak_bytes"] == 200 * MiB
    same = [("a", 1, 100 * MiB, 1), ("f", 1), ("a", 2, 100 * MiB, 1)]
    assert replay.replay(stream_trace(*same))["reserved_peak_bytes"] == 100 * MiB
    assert run([("a", 1, 100 * MiB), ("f", 1), ("a", 2, 100 * MiB)])["reserved_peak_bytes"] == 100 * MiB


def test_streams_hold_their_own_small_segments_and_expandable_segments():
    small = [("a", 1, 1000, 0), ("a", 2, 1000, 1)]
    assert replay.replay(stream_trace(*small))["reserved_peak_bytes"] == 4 * MiB   # a 2 MiB segment each
    grow = [("a", 1, 30 * MiB, 1), ("f", 1), ("a", 2, 30 * MiB, 0)]
    out = replay.replay(stream_trace(*grow), "expandable_segments:True")
    assert out["reserved_peak_bytes"] == 80 * MiB   # 40 MiB of 20 MiB pages on each stream's segment


def test_releasing_cached_blocks_frees_every_streams_segments():
    """Under a capacity, the retry after release_cached_blocks frees other streams' cached segments."""
    events = [("a", 1, 100 * MiB, 1), ("f", 1), ("a", 2, 100 * MiB, 0)]
    out = replay.replay(stream_trace(*events), capacity=150 * MiB)
    assert out["oom"] is None and out["alloc_retries"] == 1 and out["reserved_peak_bytes"] == 100 * MiB
