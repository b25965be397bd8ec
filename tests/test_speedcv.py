"""The speed model's out-of-sample error (bench/estimate/speedcv.py): leave-one-out per
calibrated GPU class, another class's factor for the uncalibrated ones, and the sentence the CLI
and the report print beside a modelled tokens/s.

The stored figures are recomputed here from the reference records of the calibration studies
(results/reference/cells) and, from a fresh sim, by tests/test_speed_calibration.py (A100) and
tests/test_published_answers.py (RTX 4090).

    python -m pytest tests/test_speedcv.py
"""
from __future__ import annotations

import json
import math

import pytest

from bench.estimate import speedcv, speedmodel
from bench.cells import matrix
from tests.helpers import REPO, TORCHTUNE_3B_NOT_HELD

BOUND = 0.25       # every calibration row's leave-one-out error, as the calibration tests held residuals
CELLS = REPO / "results" / "reference" / "cells"
STUDIES = {"ampere-datacenter": ("sim-torchtune-3b", "a100-80gb"), "ada": ("sim-torchtune-8b-4090", "rtx-4090")}
# rows printed, never fitted on (tests/helpers.py)
NOT_FITTED = set(TORCHTUNE_3B_NOT_HELD)


def test_loo_of_rows_with_one_ratio_is_exact():
    rows = [(1.0, 2.0, 0.0), (3.0, 6.0, 0.0), (0.5, 1.0, 0.0)]
    assert speedcv.fit(rows) == pytest.approx(0.5)
    assert speedcv.loo(rows) == pytest.approx([0, 0, 0], abs=1e-12)


def test_loo_is_never_smaller_than_the_in_sample_residual():
    rows = [(1.0, 2.0, 0.0), (1.0, 2.4, 0.0), (1.0, 1.7, 0.1)]
    f = speedcv.fit(rows)
    for row, out in zip(rows, speedcv.loo(rows)):
        assert abs(out) >= abs(speedcv.error(row, f)) - 1e-12


def test_transfer_uses_the_other_class_factor():
    got = speedcv.transfer({"a": [(1.0, 2.0, 0.0)], "b": [(1.0, 1.0, 0.0)]})
    assert got[("a", "b")] == pytest.approx([-0.5]) and got[("b", "a")] == pytest.approx([1.0])


def test_every_calibrated_class_has_its_leave_one_out_figures():
    assert set(speedcv.LOO) == set(speedmodel.EFFICIENCY)
    for cls, errs in speedcv.LOO.items():
        assert len(errs) >= 3, cls
        assert max(abs(e) for e in errs) <= BOUND, (cls, errs)


def test_uncalibrated_takes_the_cross_class_error():
    f = speedcv.figures("hopper")
    assert f["kind"] == "transfer" and f["rows"] == sum(len(v) for v in speedcv.TRANSFER.values())
    assert abs(f["worst"]) > max(abs(e) for errs in speedcv.LOO.values() for e in errs)
    est = speedmodel.estimate(None, {"kind": "cuda"})   # no step cost: no calibration to state
    assert est["tokens_per_s"] is None
    _, cal = speedmodel.efficiency({"gpu_class": "hopper"})
    assert "another class's factor" in speedcv.note(cal) and "uncalibrated" in speedcv.short(cal)
    _, cal = speedmodel.efficiency({"gpu_class": "ada"})
    assert "leave-one-out over the 3" in speedcv.note(cal) and speedcv.short(cal).startswith("modelled; leave-one-out")


def _reference_rows() -> dict[str, list]:
    cells = matrix.load()
    out = {}
    for cls, (study, gpu) in STUDIES.items():
        rows = []
        for cid, spec in cells.items():
            if spec["study"] != study or not spec.get("published") or "+".join(spec["techniques"]) in NOT_FITTED:
                continue
            path = CELLS / f"{cid}.json"
            if not path.exists():
                pytest.skip(f"no reference record {path.name}")
            doc = json.loads(path.read_text())
            rec = doc["benchmarks"][0]["extra_info"] if "benchmarks" in doc else doc
            rows.append(speedcv.row_of(rec["details"]["speed_model"][gpu], spec["published"]["tokens_per_s"]))
        out[cls] = rows
    return out


def test_stored_figures_are_the_reference_records_figures():
    rows = _reference_rows()
    for cls, got in rows.items():
        assert speedcv.fit(got) == pytest.approx(speedmodel.EFFICIENCY[cls][0], abs=0.005)
        assert speedcv.loo(got) == pytest.approx(list(speedcv.LOO[cls]), abs=speedcv.TOLERANCE), cls
    for pair, errs in speedcv.transfer(rows).items():
        assert errs == pytest.approx(list(speedcv.TRANSFER[pair]), abs=speedcv.TOLERANCE), pair
    assert all(math.isfinite(e) for errs in speedcv.TRANSFER.values() for e in errs)
