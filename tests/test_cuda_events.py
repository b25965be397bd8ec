"""bench/records/cuda_events.py: a snapshot's device trace reduced to what the allocator model replays."""
import pytest

from bench.records import cuda_events


def entry(action, addr, size, stream=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "frames": []}


def test_a_device_trace_reduces_to_numbered_blocks_and_streams_in_order_of_use():
    trace = [entry("segment_alloc", 100, 2 << 20), entry("alloc", 100, 512), entry("free_requested", 100, 512),
             entry("free_completed", 100, 512), entry("alloc", 100, 1024, stream=77), entry("alloc", 200, 4096, stream=55),
             entry("free_completed", 999, 8),   # allocated before the history began: left out
             entry("free_completed", 200, 4096, stream=55), entry("segment_free", 100, 2 << 20)]
    doc = cuda_events.reduce({"device_traces": [trace]}, "c")
    cols = doc["columns"]
    assert [doc["actions"][a] for a in cols["action"]] == ["segment_alloc", "alloc", "free_completed", "alloc", "alloc",
                                                          "free_completed", "segment_free"]
    assert cols["block"] == [0, 1, 1, 2, 3, 3, 0]
    assert cols["stream"] == [0, 0, 0, 1, 2, 2, 0]
    assert cols["size"][3:5] == [1024, 4096]


def test_a_full_ring_buffer_is_refused():
    with pytest.raises(ValueError, match="ring buffer"):
        cuda_events.reduce({"device_traces": [[entry("alloc", 1, 8)] * 3]}, "c", max_entries=3)


def test_the_reader_knows_the_ring_buffer_the_worker_records_with():
    from bench.worker import alloctrace
    assert cuda_events.CUDA_HISTORY_ENTRIES is alloctrace.CUDA_HISTORY_ENTRIES
