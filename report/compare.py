"""Which cells compare with which: baselines, one-technique pairs, and the catalogue's metadata.

The long-form table (report.table) has one row per cell. A comparison is only ever made
between rows of the same mode, model and device (and, unless the difference is the shape
itself, the same batch and sequence length): a simulated number is never set against a
measured one.
"""
from __future__ import annotations

import re

import pandas as pd

from bench import record, techniques
from report.fmt import DASH, MINUS, fmt_gib, missing

DIFFICULTY_ORDER = ("low", "medium", "high")
SHAPE = re.compile(r"[bs][1-9][0-9]*")     # b<N> / s<N>: they change the workload itself
SEQ = re.compile(r"s([1-9][0-9]*)")
WORLD = re.compile(r"w([1-9][0-9]*)")


def parts(technique: str) -> list[str]:
    return [p for p in str(technique or "").split("+") if p]


def join(names) -> str:
    names = [n for n in names if n]
    return "+".join(names) if names else "baseline"


def knobs_of(technique: str) -> dict | None:
    """The catalogue's knobs for a combination, or None if it names an unknown technique."""
    try:
        return techniques.knobs([p for p in parts(technique) if p != "baseline"])
    except (KeyError, ValueError):
        return None


def difficulty_rank(technique: str) -> int:
    level = technique_meta(technique)["difficulty"]
    return DIFFICULTY_ORDER.index(level) if level in DIFFICULTY_ORDER else len(DIFFICULTY_ORDER)


def technique_meta(technique: str) -> dict:
    """The catalogue's metadata for a '+' combination, each part looked up and joined."""
    names = parts(technique)
    metas, unknown = [], []
    for name in names:
        try:
            metas.append(techniques.lookup(name))
        except KeyError:
            unknown.append(name)

    def joined(attr):
        said = [(t.name, getattr(t, attr)) for t in metas if getattr(t, attr) not in ("-", "")]
        if len(said) == 1 and len(names) == 1:
            return said[0][1]
        return "; ".join(f"{name}: {text}" for name, text in said) or DASH

    saves = [s.strip() for t in metas for s in t.saves.split(",") if s.strip() not in ("-", "")]
    levels = [t.difficulty for t in metas]
    difficulty = max(levels, key=lambda d: DIFFICULTY_ORDER.index(d) if d in DIFFICULTY_ORDER else -1) if levels else DASH
    return {
        "summary": "; ".join(t.summary for t in metas) + (f"; unknown: {', '.join(unknown)}" if unknown else ""),
        "saves": ", ".join(dict.fromkeys(saves)) or DASH,
        "expected": joined("expected"),
        "overhead": joined("overhead"),
        "difficulty": "unknown" if unknown else difficulty,
    }


def baseline_of(row: pd.Series, df: pd.DataFrame):
    """The baseline row to compare ``row`` with: its ``baseline_cell`` if that is in the table,
    else the cell with technique 'baseline' and the same model, gpu and mode; or None."""
    if row["baseline_cell"]:
        hit = df[(df["cell"] == row["baseline_cell"]) & (df["mode"] == row["mode"])]
        if len(hit):
            return hit.iloc[0]
    hit = df[(df["technique"] == "baseline") & (df["model"] == row["model"])
             & (df["gpu"] == row["gpu"]) & (df["mode"] == row["mode"])]
    return hit.iloc[0] if len(hit) else None


def shrink(row, base) -> dict | None:
    """Bytes each breakdown category shrank by against ``base``; None if either lacks a breakdown."""
    cols = [f"{c}_bytes" for c in record.CATEGORIES]
    if base is None or any(missing(row[c]) or missing(base[c]) for c in cols):
        return None
    return {c: int(base[f"{c}_bytes"]) - int(row[f"{c}_bytes"]) for c in record.CATEGORIES}


def main_saving(row, base) -> str:
    """The measured breakdown category that shrank most against the baseline."""
    by = shrink(row, base)
    if by is None:
        return DASH
    cat = max(by, key=by.get)
    return f"{cat} ({MINUS}{fmt_gib(by[cat])} GiB)" if by[cat] > 0 else "nothing shrank"


def ok_rows(df: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    rows = df[df["status"] == "ok"]
    return rows if mode is None else rows[rows["mode"] == mode]


def pairs(df: pd.DataFrame, with_name: str, without_name: str | None = None):
    """(with, without) ok rows: ``with`` holds technique ``with_name``; ``without`` is the same
    combination with it removed (or replaced by ``without_name``), same mode, model and gpu,
    and the same batch and sequence length unless the technique is a shape (b<N>/s<N>)."""
    ok = ok_rows(df)
    index = {}
    for _, r in ok.iterrows():
        index.setdefault((r["mode"], r["model"], r["gpu"], frozenset(parts(r["technique"]))), []).append(r)
    out = []
    for _, r in ok.iterrows():
        names = parts(r["technique"])
        if with_name not in names:
            continue
        rest = [n for n in names if n != with_name] + ([without_name] if without_name else [])
        key = (r["mode"], r["model"], r["gpu"], frozenset(parts(join(rest))))
        for other in index.get(key, []):
            if SHAPE.fullmatch(with_name) or same_shape(r, other):
                out.append((r, other))
                break
    return out


def same_shape(a, b) -> bool:
    return all(missing(a[k]) or missing(b[k]) or int(a[k]) == int(b[k]) for k in ("batch_size", "seq_len"))


def without(technique: str, pattern: re.Pattern) -> str:
    """The combination with every part matching ``pattern`` removed ('baseline' if none is left)."""
    return join(n for n in parts(technique) if not pattern.fullmatch(n) and n != "baseline")


def number_in(technique: str, pattern: re.Pattern) -> int | None:
    """N of the first part matching ``pattern`` (s<N>, w<N>), or None."""
    for name in parts(technique):
        m = pattern.fullmatch(name)
        if m:
            return int(m.group(1))
    return None
