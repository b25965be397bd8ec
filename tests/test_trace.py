"""The tracker's allocation trace (bench/worker/memtrack.py): each storage once, in order,
with its op, phase, step and the category resolved at the end; bounded, with what was
dropped counted. Real tensors under the real tracker."""
import torch

from bench.estimate import replay
from bench.worker import memtrace, memtrack


def test_each_storage_once_with_op_phase_step_and_final_category():
    t = memtrack.MemTracker()
    with t:
        t.start_step()
        with t.in_phase("forward"):
            a = torch.ones(1000)
            b = a.view(10, 100)  # a view: same storage, no event
            c = a * 2
        del c
        t.mark("parameters", [a])  # what a is gets decided after it was made
    tr = t.trace()
    col = tr["columns"]
    assert col["kind"] == [1, 1, 0] and col["serial"][1] == col["serial"][2]
    assert col["bytes"][:2] == [4000, 4000] and col["step"] == [0, 0, 0]
    assert [tr["ops"][i] for i in col["op"][:2]] == ["aten.ones.default", "aten.mul.Tensor"]
    assert [tr["phases"][i] for i in col["phase"][:2]] == ["forward", "forward"]
    assert [tr["categories"][i] for i in col["category"]] == ["parameters", "activations", "activations"]
    assert tr["dropped_events"] == 0 and b.shape == (10, 100)
    out = replay.replay(tr)
    assert out["reserved_peak_bytes"] == 2 * 2**20 and out["allocated_peak_bytes"] == 2 * 4096


def test_the_trace_is_bounded_and_says_what_it_dropped(monkeypatch):
    monkeypatch.setattr(memtrace, "MAX_TRACE_EVENTS", 3)
    t = memtrack.MemTracker()
    with t:
        xs = [torch.zeros(10) for _ in range(5)]
    tr = t.trace()
    assert len(tr["columns"]["kind"]) == 3 and tr["dropped_events"] == 2 and len(xs) == 5
    assert tr["max_events"] == 3


def test_frees_with_no_allocation_between_are_written_in_allocation_order():
    # autocast frees its cast-weight cache in address-hash order: the trace must not depend on it
    t = memtrack.MemTracker()
    with t:
        t.start_step()
        with t.in_phase("forward"):
            xs = [torch.ones(n) for n in (100, 300, 200)]
            for i in (2, 0, 1):  # freed out of allocation order
                xs[i] = None
            y = torch.ones(50)
            del y
    col = t.trace()["columns"]
    assert col["kind"] == [1, 1, 1, 0, 0, 0, 1, 0]
    assert col["serial"][3:6] == sorted(col["serial"][3:6]) == col["serial"][:3]


def test_canonical_frees_keeps_allocations_in_place_and_splits_runs_at_step_or_phase():
    ev = [(1, 1, 8, 0, 1, 0), (1, 2, 8, 0, 1, 0), (0, 2, 0, 1), (0, 1, 0, 2), (1, 3, 8, 0, 2, 0),
          (1, 4, 8, 0, 2, 0), (0, 4, 0, 2), (0, 3, 0, 2)]
    out = memtrace.canonical_frees(ev)
    assert [e[:2] for e in out] == [(1, 1), (1, 2), (0, 2), (0, 1), (1, 3), (1, 4), (0, 3), (0, 4)]
