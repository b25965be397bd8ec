"""How far to trust a modelled tokens/s: the speed model's out-of-sample error. Torch-free.

The speed model (bench/estimate/speedmodel.py) divides the device time by one efficiency factor per
GPU class, fitted on published throughput. The residuals of the rows a factor was fitted on are
in-sample: one parameter fitted on three rows can barely miss them. What a user needs is the
error on a row the factor never saw:

- a calibrated class: the leave-one-out error of its factor. For each of its rows, refit the
  factor on the others (``speedmodel.fit``) and predict that row (``loo``);
- an uncalibrated class (no published row of its own, it takes ``speedmodel.REFERENCE_CLASS``'s
  factor): the error of using another class's factor, measured on the classes that have rows:
  each calibrated class's rows predicted with each other calibrated class's factor (``transfer``).

A row is ``(device_s, published_s, fixed_s)``: the modelled device seconds at efficiency 1 (the
terms the factor divides), the published step time (tokens per step / published tokens/s), and
the modelled seconds the factor does not scale (paging, collectives, host traffic). Its error is
modelled tokens/s / published - 1 = published_s / (device_s / factor + fixed_s) - 1.

``CV`` holds the figures, computed from the sim of the calibration rows (torchtune's tables:
study ``sim-torchtune-3b`` on the A100, ``sim-torchtune-8b-4090`` on the RTX 4090);
tests/test_speed_calibration.py and tests/test_published_answers.py recompute them from the sim
and fail when they drift. ``note`` is the sentence the CLI and the report print beside a
modelled tokens/s. This module is not part of the engine digest: it changes no record.
"""
from __future__ import annotations

import math
import statistics

from bench.estimate import speedmodel

# gpu_class -> leave-one-out errors of its factor, one per calibration row, in row order
# (sim-torchtune-3b's 8 matched rows; sim-torchtune-8b-4090's full, LoRA, QLoRA rows)
LOO = {
    "ampere-datacenter": (+0.1138, -0.0067, -0.0344, -0.0052, -0.0206, -0.0236, +0.0353, -0.0495),
    "ada": (-0.0148, -0.1174, +0.1590),
}
# (factor of class, rows of class) -> errors of those rows predicted with that factor
TRANSFER = {
    ("ampere-datacenter", "ada"): (-0.1726, -0.2907, -0.1495),
    ("ada", "ampere-datacenter"): (+0.4255, +0.2896, +0.2582, +0.2913, +0.2739, +0.2704, +0.3373, +0.2409),
}
TOLERANCE = 0.001   # the tests' bound on drift of a stored error from its recomputation


SCALED = ("compute", "memory", "recompute", "nf4_dequant")   # the parts speedmodel divides by the factor


def row_of(est: dict, published_tokens_per_s: float) -> tuple[float, float, float]:
    """(device_s, published_s, fixed_s) of one calibration row from its speed-model estimate
    (``details.speed_model[gpu]``) and the published tokens/s."""
    parts = est["parts"]
    device = sum(parts[k] for k in SCALED) * est["efficiency"]
    fixed = sum(v for k, v in parts.items() if k not in SCALED)
    return device, est["step_s"] * est["tokens_per_s"] / published_tokens_per_s, fixed


def error(row: tuple[float, float, float], factor: float) -> float:
    """Signed error of modelled tokens/s against published for one row, at ``factor``."""
    device_s, published_s, fixed_s = row
    return published_s / (device_s / factor + fixed_s) - 1


def fit(rows: list[tuple[float, float, float]]) -> float:
    """The efficiency factor of ``rows`` as speedmodel fits it: device seconds against the published
    time less the time the factor does not scale."""
    return speedmodel.fit([(d, p - fixed) for d, p, fixed in rows])


def loo(rows: list[tuple[float, float, float]]) -> list[float]:
    """Each row's error with the factor refitted without it (needs 2 rows or more)."""
    if len(rows) < 2:
        raise ValueError("leave-one-out needs at least 2 rows")
    return [error(r, fit(rows[:i] + rows[i + 1:])) for i, r in enumerate(rows)]


def transfer(rows_by_class: dict[str, list]) -> dict[tuple[str, str], list[float]]:
    """{(factor's class, rows' class): errors} for every ordered pair of distinct classes."""
    factors = {c: fit(rows) for c, rows in rows_by_class.items()}
    return {(a, b): [error(r, factors[a]) for r in rows_by_class[b]]
            for a in rows_by_class for b in rows_by_class if a != b}


def _figures(errors) -> dict:
    errors = list(errors)
    return {"rows": len(errors), "median_abs": statistics.median(abs(e) for e in errors),
            "worst": max(errors, key=abs)}


def figures(gpu_class: str | None) -> dict:
    """The out-of-sample error that applies to a modelled tokens/s on ``gpu_class``: {kind, rows,
    median_abs, worst, what}. kind ``leave-one-out`` for a calibrated class; ``transfer`` (all
    cross-class errors pooled) for any other, since it takes another class's factor."""
    if gpu_class in LOO:
        return {"kind": "leave-one-out", **_figures(LOO[gpu_class]),
                "what": f"leave-one-out over the {len(LOO[gpu_class])} published rows its factor is fitted on"}
    pooled = [e for errs in TRANSFER.values() for e in errs]
    pairs = ", ".join(f"{a}'s factor on {b}'s rows" for a, b in TRANSFER)
    return {"kind": "transfer", **_figures(pooled),
            "what": f"uncalibrated: another class's factor, measured where two classes have rows ({pairs})"}


def class_of(calibration: str | None) -> str | None:
    """The calibrated class a speed model's ``calibration`` string names ('calibrated: <class> (...)'),
    None for 'uncalibrated: ...' or none."""
    if calibration and calibration.startswith("calibrated: "):
        return calibration.removeprefix("calibrated: ").split(" ", 1)[0]
    return None


def note(calibration: str | None) -> str:
    """The sentence beside a modelled tokens/s: its out-of-sample error and how it was measured."""
    f = figures(class_of(calibration))
    return f"out-of-sample error: median {f['median_abs']:.0%}, worst {f['worst']:+.0%} ({f['what']})"


def short(calibration: str | None) -> str:
    """The parenthesis a CLI column prints after a modelled speed."""
    f = figures(class_of(calibration))
    label = "leave-one-out" if f["kind"] == "leave-one-out" else "uncalibrated, other class's factor"
    return f"modelled; {label} error median {f['median_abs']:.0%}, worst {f['worst']:+.0%}"


def _check_consistent() -> None:   # the tables name only classes the speed model knows
    assert set(LOO) <= set(speedmodel.EFFICIENCY), set(LOO) - set(speedmodel.EFFICIENCY)
    assert all(math.isfinite(e) for errs in (*LOO.values(), *TRANSFER.values()) for e in errs)


_check_consistent()
