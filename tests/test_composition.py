"""Techniques compose: every pair of catalogue techniques is either accepted (a valid
set of knobs) or refused with the reason, and the accepted pairs that cross the independent
choices people combine (adapter/base quantization, optimizer, sharding engine, offload) run in
sim on tiny-llama through the warm sim worker.

    pytest tests/test_composition.py -q      # about a minute: the sim runs are marked slow

Which accepted pairs run in sim (the rule): every accepted pair in which one side is in
``ENGINES`` (qlora, the sharding engines and their offloads) and the other in ``ENGINES`` or
``OPTIMIZERS``; running every accepted pair of the catalogue (several hundred simulations) would
take many minutes on two cores. Pairs sim cannot run at all are skipped records with the reason
(``techniques.skip_reason``), which counts as a reason.
"""
from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from bench.records import checks
from bench.cells import matrix, techniques
from tests.helpers import REPO, write_matrix

NAMES = sorted(techniques.CATALOG)
OPTIMIZERS = sorted(n for n, t in techniques.CATALOG.items() if "optimizer" in t.sets)
ENGINES = ["qlora", "qlora-fp32", "zero2", "zero3", "zero3-offload", "fsdp", "fsdp-offload", "fsdp1"]


def resolve(pair):
    try:
        return techniques.knobs(list(pair)), None
    except ValueError as exc:
        return None, str(exc)


@pytest.mark.parametrize("first", NAMES)
def test_every_pair_is_accepted_or_refused_with_a_reason(first):
    for second in NAMES:
        if second == first:
            continue
        k, why = resolve((first, second))
        if k is None:
            assert len(why) > 20 and any(w in why.lower() for w in (first, second, *first.split("-"), *second.split("-"))), \
                (first, second, why)
        else:
            assert set(k) == set(techniques.DEFAULT_KNOBS), (first, second)


@pytest.mark.parametrize("adapter", ["qlora", "qlora-fp32"])
def test_an_explicit_optimizer_overrides_qlora_default(adapter):
    assert techniques.knobs([adapter])["optimizer"] == "paged-adamw8bit"
    for opt in OPTIMIZERS:
        k, why = resolve((adapter, opt))
        assert why is None and k["optimizer"] == techniques.CATALOG[opt].sets["optimizer"], (opt, why)


def test_fsdp_qlora_trains_with_torch_adamw_and_shards_bf16_storage():
    k = techniques.knobs(["qlora", "fsdp", "gc", "w2"])
    assert (k["optimizer"], k["dist"], k["quant_storage"], k["world_size"]) == ("adamw", "fsdp", "bf16", 2)
    assert techniques.knobs(["qlora", "zero3", "w4"])["quant_storage"] == "bf16"
    assert techniques.knobs(["qlora", "zero2", "w4"])["quant_storage"] is None  # ZeRO-2 keeps whole weights
    assert techniques.knobs(["qlora", "fsdp-offload", "adamw-fused"])["optimizer"] == "adamw-fused"
    for bnb in ("adamw8bit", "paged-adamw8bit", "paged-adamw32bit"):
        _, why = resolve(("qlora", "fsdp", bnb))
        assert why and "DTensor" in why and "bitsandbytes" in why


def test_catalogue_table_in_docs_is_the_catalogue():
    out = subprocess.run([sys.executable, "-m", "bench.cells.techniques", "--markdown"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    assert out == techniques.markdown_table()
    docs = (REPO / "docs" / "composing.md").read_text()
    assert out in docs, "docs/composing.md's table differs: paste `python -m bench.cells.techniques --markdown` into it"


def sim_pairs():
    out = []
    for a, b in itertools.combinations(NAMES, 2):
        if ({a, b} & set(ENGINES)) and {a, b} <= set(ENGINES) | set(OPTIMIZERS) and resolve((a, b))[0]:
            out.append(f"{a}+{b}")
    return out


@pytest.mark.slow
def test_accepted_pairs_run_in_sim(tmp_path):
    from bench.search.simpool import SimPool
    combos = sim_pairs()
    cells = matrix.load(write_matrix(tmp_path, {"s": {"mode": "sim", "models": ["tiny-llama"],
                                                      "gpus": ["rtx-4090"], "techniques": combos}}))
    bad = {}
    with SimPool(jobs=2) as pool:
        mine = [spec for spec in cells.values() if "+".join(spec["techniques"]) in combos]  # not the study's baseline
        todo = [(spec, None) for spec in mine if not spec["skip_reason"]]
        recs = pool.run_many(todo)
    for (spec, _), rec in zip(todo, recs):
        if rec.get("status") != "ok" or checks.problems(rec):
            bad[spec["cell"]] = (rec.get("status"), rec.get("reason"))
    skipped = {s["cell"]: s["skip_reason"] for s in mine if s["skip_reason"]}
    assert all(len(why) > 20 for why in skipped.values())
    assert not bad, bad
    assert len(todo) + len(skipped) == len(combos)
