"""A real run's time comes from steps the tracker does not see: the tracker's Python code
on every op would hold a GPU's steps to the CPU's pace. The same code path runs on the cpu device
here; on a GPU only the device differs."""
from __future__ import annotations

import torch

from bench.cells import matrix
from bench.worker import train
from bench.worker.memtrack import MemTracker
from tests.helpers import write_matrix


def test_a_stopped_tracker_counts_and_traces_nothing_more():
    tracker = MemTracker()
    with tracker:
        kept = torch.ones(1024)
        dropped = torch.ones(2048)
        del dropped
        tracker.stop()
        before = (tracker.total, tracker.peak, len(tracker.events), dict(tracker.live))
        later = torch.ones(4096)      # still inside the mode: not counted
        del kept                      # a counted storage freed after the stop: still counted as live
        tracker.mark("gradients", [later])
        with tracker.in_phase("backward"):
            torch.ones(8192)
    assert (tracker.total, tracker.peak, len(tracker.events), dict(tracker.live)) == before
    assert tracker.total == 1024 * 4 and tracker.peak == 3072 * 4
    assert not tracker.known["gradients"]


def test_cpu_run_times_untracked_steps_and_traces_the_measured_ones_only(tmp_path):
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["lora"],
             "steps": 2, "warmup_steps": 1}
    spec = matrix.load(write_matrix(tmp_path, {"s": study}))["tiny-llama__cpu__lora"]
    tracker = MemTracker()
    out = train.train(spec, "cpu", tracker)
    details = out["details"]
    assert len(details["tracked_step_s"]) == 2               # the measured steps' own times, kept beside
    assert details["timed_tokens"] == 2 * spec["batch_size"] * spec["seq_len"]
    assert out["tokens_per_s"] == details["timed_tokens"] / details["timed_s"]
    assert details["timed_s"] != sum(details["tracked_step_s"])  # not the tracked steps' clock
    trace = tracker.trace()
    assert trace["steps"] == 3 and max(trace["columns"]["step"]) == 2  # warm-up + 2 measured, no timed step
    assert len(details["losses"]) == 3                       # the measured run's losses, not the timing's
