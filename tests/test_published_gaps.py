"""Why a corpus row is not simulated: the source's silence or our lack, said on every such row, and true."""
from __future__ import annotations

import re

import pytest

from bench.corpus import coverage, published, published_matrix
from tests.test_published_corpus import corrupted, refused, typed_row


@pytest.fixture(scope="module")
def rows():
    return published.load()


def test_every_row_not_simulated_carries_its_gap_and_no_simulated_row_does(rows):
    reasons = {e["row"]: e["reason"] for e in published_matrix.plan(rows)}
    for r in rows:
        why = reasons[r.id]
        if why is None:
            assert r.gap is None, f"{r.id} is simulated but says gap {r.gap}"
        else:
            assert r.gap in coverage.GAPS, f"{r.id} is not simulated ({why}) and names no gap"


def _names(config: str) -> set[str]:
    """The ways a source or a note spells a config's model: llama-2-7b -> 'llama-2-7b', 'llama 2 7b', 'llama2-7b'."""
    base = config.lower()
    spaced = base.replace("-", " ")
    return {base, spaced, re.sub(r"^(llama|mistral|qwen2\.5|phi)-", r"\1", base), base.replace("-v0.1", "")}


def test_no_row_says_we_lack_a_config_we_have(rows):
    """A reason that names a missing config must be true: 'no Llama-2-7B config in matrix/models' stood on
    rows for weeks after matrix/models/llama-2-7b.json was added."""
    have = sorted(p.stem for p in published.MODELS_DIR.glob("*.json"))
    for r in rows:
        said = " ".join([r.unmatched or "", *(r.lacks_ours or [])]).lower()
        for config in have:
            for name in _names(config):
                for claim in (f"no {name} config", f"{name} has no model config", f"{name} has no config",
                              f"model config: {name}"):
                    assert claim not in said, f"{r.id} says '{claim}', but matrix/models/{config}.json exists"


def test_a_gap_that_disagrees_with_its_lists_is_refused(tmp_path):
    def bad(rows):
        row = next(r for r in rows if r.get("gap") == "source")
        row["lacks_ours"] = ["technique: warp drive"]
    refused(corrupted(tmp_path, bad), "lacks_ours", "gap source takes no lacks_ours")


def test_lists_without_a_gap_are_refused(tmp_path):
    def bad(rows):
        row = next(r for r in rows if r.get("gap") == "ours")
        del row["gap"]
    refused(corrupted(tmp_path, bad), "lacks_ours", "set without a gap")


def test_coverage_counts_each_row_once_per_role():
    base = {"model_config": "llama-3.1-8b", "techniques": "lora", "gpu_profile": "rtx-4090", "batch_size": 1,
            "seq_len": 512, "n_gpus": 1, "unmatched": None}
    rows = [typed_row(**dict(base, id="tt-8b-a", role="development")),
            typed_row(**dict(base, id="x-b", seq_len=None, gap="source", lacks_source=["sequence length"])),
            typed_row(**dict(base, id="x-c", model_config=None, gap="ours",
                             lacks_ours=["model config: Pythia (GPT-NeoX)", "GPU profile: V100"])),
            typed_row(**dict(base, id="x-d", model_config=None, seq_len=None, gap="both",
                             lacks_source=["sequence length"], lacks_ours=["model config: GPT-J"]))]
    cov = coverage.coverage(rows)
    got = {e["role"]: (e["rows"], e["simulated"], e["source"], e["ours"], e["both"]) for e in cov["roles"]}
    assert got == {"development": (1, 1, 0, 0, 0), "held-out": (3, 0, 1, 1, 1), "all": (4, 1, 1, 1, 1)}
    assert dict(cov["lacks"]) == {"model config": 2, "GPU profile": 1}
    text = coverage.markdown(cov)
    assert "| held-out | 3 | 0 (0%) | 1 (33%) | 1 (33%) | 1 (33%) |" in text
    assert "model config 2, GPU profile 1" in text
