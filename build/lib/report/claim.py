"""What a claim is and the words it is judged in: the ``Claim`` type, the verdicts (holds |
partly | does not hold | not measurable here | not measured here), and the helpers every
check builds its result with. Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from report.fmt import missing, provenance

HOLDS, PARTLY, NOT, UNMEASURED = "holds", "partly", "does not hold", "not measured here"
# the run has the cells, but they cannot tell: the installed library ignores the flag, or the
# effect is within the measured noise
UNMEASURABLE = "not measurable here"
MAX_LINES = 8


@dataclass(frozen=True)
class Claim:
    key: str
    statement: str
    limits: dict            # the numbers the check applies, by name
    text: str               # the thresholds in words: a str.format template over ``limits``
    needs: str
    check: Callable[[pd.DataFrame, dict], list]

    @property
    def thresholds(self) -> str:
        return self.text.format(**self.limits)


def result(rows, verdict: str, evidence: list[str], why: str) -> dict:
    rows = list(rows)
    return {"mode": rows[0]["mode"], "provenance": ", ".join(dict.fromkeys(provenance(r) for r in rows)),
            "verdict": verdict, "evidence": capped(evidence), "why": why,
            "models": sorted({r["model"] for r in rows}), "cells": [r["cell"] for r in rows]}


def capped(lines: list[str]) -> list[str]:
    return lines if len(lines) <= MAX_LINES else lines[:MAX_LINES] + [f"… and {len(lines) - MAX_LINES} more"]


def by_mode(pair_list):
    """{mode: [(with, without), ...]} in the record's mode order."""
    out: dict[str, list] = {}
    for w, wo in pair_list:
        out.setdefault(w["mode"], []).append((w, wo))
    return out


def band(value: float, holds: tuple, partly: tuple) -> str:
    """HOLDS if value is in the closed range ``holds``, PARTLY if in ``partly``, else NOT."""
    if holds[0] <= value <= holds[1]:
        return HOLDS
    return PARTLY if partly[0] <= value <= partly[1] else NOT


def overall(outcomes: list[str]) -> str:
    """All hold: holds; none holds or partly: does not hold; anything between: partly."""
    if outcomes and all(o == HOLDS for o in outcomes):
        return HOLDS
    return NOT if all(o == NOT for o in outcomes) else PARTLY


def ratio(a, b):
    return None if missing(a) or missing(b) or float(b) == 0 else float(a) / float(b)


def lower(fraction: float) -> str:
    return f"{fraction * 100:.1f}% lower" if fraction >= 0 else f"{-fraction * 100:.1f}% higher"


def step(w, wo) -> str:
    return f"{w['model']}: {wo['technique']} → {w['technique']}"


def per_technique(items: list[tuple[str, str]]) -> str:
    """'bf16: holds; amp-bf16: does not hold' from (technique, outcome) pairs."""
    seen: dict[str, list] = {}
    for tech, outcome in items:
        seen.setdefault(tech, [])
        if outcome not in seen[tech]:
            seen[tech].append(outcome)
    return "; ".join(f"{t}: {' / '.join(o)}" for t, o in seen.items())


def in_range(value, bounds) -> bool:
    return not missing(value) and bounds[0] <= float(value) <= bounds[1]
