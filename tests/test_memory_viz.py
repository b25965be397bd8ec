"""A cell's timeline opens in PyTorch's memory visualizer: the replay of a real tracker trace,
exported as a torch.cuda.memory._snapshot() dict (bench/estimate/replay.py), rendered by
torch.cuda._memory_viz itself. In cuda mode the record carries the real allocator's snapshot
and its max_memory_reserved beside the model's reserved peak.

    pytest tests/test_memory_viz.py -q      # the @pytest.mark.cuda test skips without a GPU
"""
from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from torch.cuda import _memory_viz

from bench.estimate import replay
from bench.runner import launch
from bench.cells import matrix
from bench.worker.sim import measure
from tests.helpers import write_matrix

MiB = 2**20


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    """A tiny-llama sim step's trace, as the worker writes it beside a record."""
    folder = tmp_path_factory.mktemp("viz")
    path = write_matrix(folder, {"v": {"mode": "sim", "models": ["tiny-llama"], "gpus": ["t4"],
                                       "techniques": ["baseline"], "seq_len": 64}})
    spec = measure.single_process(matrix.load(path)["tiny-llama__sim__baseline"])
    _, tracker, _ = measure.simulate_step(spec)
    out = folder / "trace.json.gz"
    replay.dump(tracker.trace(), out)
    return out


@pytest.mark.parametrize("conf", [None, "expandable_segments:True"])
def test_snapshot_renders_with_torchs_memory_viz(trace_file, tmp_path, conf):
    snap_path = tmp_path / "snap.pickle"
    cmd = [sys.executable, "-m", "bench.estimate.replay", str(trace_file), "--snapshot", str(snap_path)]
    summary = subprocess.run(cmd + (["--alloc-conf", conf] if conf else []), check=True,
                             capture_output=True, text=True).stdout
    assert '"reserved_peak_bytes"' in summary
    snap = pickle.loads(snap_path.read_bytes())
    text = _memory_viz.segsum(snap)  # raises if blocks do not add up to their segments
    final_reserved = sum(s["total_size"] for s in snap["segments"])
    assert f"segments: {len(snap['segments'])}" in text and final_reserved > 0
    assert all(s["is_expandable"] == bool(conf) for s in snap["segments"])
    listing = _memory_viz.trace(snap)
    assert re.search(r"= cudaMalloc\(", listing) if not conf else "segment_map" in listing
    assert "aten." in listing or any(e.get("frames") for e in snap["device_traces"][0])
    for html in (_memory_viz.trace_plot(snap), _memory_viz.segment_plot(snap)):
        assert "MemoryViz.js" in html and len(html) > 1000
    actions = {e["action"] for e in snap["device_traces"][0]}
    assert {"alloc", "free_requested", "free_completed"} <= actions


@pytest.mark.cuda
def test_cuda_record_keeps_measured_and_modelled_reserved_side_by_side(tmp_path):
    path = write_matrix(tmp_path, {"c": {"mode": "cuda", "models": ["tiny-llama"], "gpus": ["h100-80gb"],
                                         "techniques": ["baseline"]}})
    spec = matrix.load(path)["tiny-llama__h100-80gb__baseline"]
    rec = launch.run_cell(spec, tmp_path / "logs" / "cell.worker.log")
    assert rec["status"] == "ok", rec["reason"] + rec["log_tail"]
    measured, modelled = rec["reserved_peak_bytes"], rec["modelled_reserved_peak_bytes"]
    assert measured > 0 and modelled > 0
    assert 0.5 < modelled / measured < 1.5, (measured, modelled)  # the model's first check on a GPU
    snap = pickle.loads(Path(rec["details"]["snapshot_file"]).read_bytes())
    assert "total_reserved" in _memory_viz.segsum(snap)
