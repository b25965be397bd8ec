"""The report's memory timeline (report/plot_timeline.py, report/timeline.py) on records whose
allocator_model comes from a real replay (bench/estimate/replay.py) of a hand-made growing trace."""
from __future__ import annotations

from bench.estimate import replay, verdicts
from report import GIB, plot_timeline, table
from report.timeline import timeline_section
from tests.test_allocator import trace
from tests.test_report import ok, spec

MiB = 2**20


def growing_trace(steps=4):
    """Each step allocates a longer activation and frees it: the staircase case."""
    events, serial = [("a", 1, 30 * MiB)], 2  # weights, kept
    for k in range(steps):
        events += [("a", serial, (12 + 2 * k) * MiB), ("f", serial)]
        serial += 1
    tr = trace(*events)
    tr["columns"]["step"] = [0] + [k for k in range(steps) for _ in (0, 1)]
    return tr


def story_record(techniques, conf=None):
    rec = ok(spec("tiny-llama", "sim", techniques, mode="sim"), {"activations": 0.05})
    model = replay.model(growing_trace(), conf, {"t4": {"memory_bytes": 16 * GIB}}, 576 * MiB)
    rec.update(modelled_reserved_peak_bytes=model["reserved_peak_bytes"], allocator_model=model)
    return rec


def test_timeline_draws_story_cells_with_reserved_and_capacity():
    df = table.to_frame([story_record(["padding-growing"]),
                         story_record(["padding-growing", "expandable-segments"], "expandable_segments:True"),
                         story_record(["gc"])])
    long = plot_timeline.timeline_long(df)
    assert set(long["technique"]) == {"padding-growing", "padding-growing+expandable-segments"}  # gc tells none
    plain = long[long["technique"] == "padding-growing"]
    grown = long[long["technique"] != "padding-growing"]
    # the staircase: 30 + 12 + 14 + 16 + 18 MiB of segments, never released; one 20 MiB-paged segment instead
    assert plain["reserved_gib"].max() * GIB == (30 + 12 + 14 + 16 + 18) * MiB
    assert grown["reserved_gib"].max() < plain["reserved_gib"].max()
    assert (long["allocated_gib"] <= long["reserved_gib"] + 1e-12).all()
    section = timeline_section(df, "sim")
    assert section["image"].startswith("data:image/png;base64,") and "reserved" in section["caption"]
    assert "no GPU runs out" in section["caption"]  # 16 GiB holds 90 MiB


def test_caption_says_where_each_gpu_runs_out():
    rec = story_record(["padding-growing"])
    blas = verdicts.blas_workspace_bytes({"kind": "cuda"})  # the card's cuBLAS workspaces come off it too
    rec["allocator_model"] = replay.model(growing_trace(), None, {"tiny": {"memory_bytes": 620 * MiB + blas}}, 576 * MiB)
    caption = timeline_section(table.to_frame([rec]), "sim")["caption"]
    # 44 MiB for the allocator beside 30 MiB of weights: 12 MiB fits, 14 MiB once the cached 12 MiB
    # segment is released, 16 MiB (s3) not even then
    assert "padding-growing: tiny at s3 (forward, aten.empty; 1 cache flush before)" in caption


def test_no_story_cells_no_section():
    assert timeline_section(table.to_frame([story_record(["gc"])]), "sim") is None
