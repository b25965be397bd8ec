"""Issue 27's report defects, each on made-up records (tests/records.py) or the built page.

    pytest tests/test_issue27_report.py -q
"""
from __future__ import annotations

import pytest

from report import lookup, plot_steps, recommend, table
from tests.records import CLAIM_BASE, answer, cpu, speed

OOM = {"rtx-4090": "oom", "h100-80gb": "oom", "t4": "oom"}
FITS = {"rtx-4090": "oom", "h100-80gb": "fits", "t4": "oom"}
GIB = 2**30


def test_padding_growing_cells_are_drawn_in_the_per_step_chart():
    """The chart looked for batching 'padding'; the knob of the 8B study is 'padding-growing'."""
    frame = table.to_frame([cpu(["padding-growing"], CLAIM_BASE, step_peak_bytes=[30, 35, 40]),
                            cpu(["packing"], CLAIM_BASE, step_peak_bytes=[30, 42, 42])])
    long = plot_steps.steps_long(frame)
    assert set(long["technique"]) == {"padding-growing", "packing"}
    assert set(long["batching"]) == {"padding-growing", "packing"}


def _short_step_frame():
    """Packing trains the whole 2048 tokens per step; padding-growing's modelled step trains 683
    of them, so its step is shorter and its tokens/s higher: not a like-for-like lead."""
    short = dict(speed(0.5, tokens=683))
    whole = speed(1.2)           # 2048 tokens in 1.2 s: 1707 tokens/s against 1366
    base = answer(["baseline"], {"parameters": 28, "gradients": 28, "optimizer": 56}, OOM, {})
    pg = answer(["lora", "bf16", "padding-growing"], {"parameters": 15}, FITS, {"h100-80gb": 1.0})
    pg["details"]["speed_model"]["h100-80gb"] = short
    pk = answer(["lora", "bf16", "packing"], {"parameters": 15}, FITS, {"h100-80gb": 1.0})
    pk["details"]["speed_model"]["h100-80gb"] = whole
    return table.to_frame([base, pg, pk])


def test_the_answer_table_does_not_rank_a_shorter_step_against_a_whole_one():
    sec = lookup.section(_short_step_frame())
    (g,) = [g for g in sec["groups"] if g["gpu"] == "h100-80gb"]
    assert g["answer"] == "recommended: lora+bf16+packing"
    pg = next(r for r in g["rows"] if r["technique"] == "lora+bf16+padding-growing")
    assert not pg["recommended"] and "not ranked: its modelled step trains 683 of 2048 tokens" in pg["tokens"]


def test_recommendations_rank_like_for_like_in_every_cell():
    (r,) = [r for r in recommend.recommend(_short_step_frame(), "sim") if r["gpu"] == "h100-80gb"]
    assert r["fastest"]["technique"] == "lora+bf16+packing"
