"""Which cells compare with which: baselines, one-technique pairs, and the catalogue's metadata.

The long-form table (report.table) has one row per cell. A comparison is only ever made
between rows of the same mode, model and device (and, unless the difference is the shape
itself, the same batch and sequence length): a simulated number is never set against a
measured one.

Facts a record holds (world size, sequence length, batch, the resolved knobs) are read from
the table's columns, never worked out again from technique names; names are only matched
as names (which cell is X and which is X+gc), and the catalogue (bench/cells/techniques.py) says
what a name sets.
"""
from __future__ import annotations

import pandas as pd

from bench.records import record
from bench.cells import catalogue, techniques
from report.fmt import DASH, MINUS, fmt_gib, knobs, missing


def parts(technique: str) -> list[str]:
    return [p for p in str(technique or "").split("+") if p]


def join(names) -> str:
    names = [n for n in names if n]
    return "+".join(names) if names else "baseline"


def sets_knob(name: str, knob: str) -> bool:
    """Whether the catalogue's technique ``name`` sets ``knob`` (False for an unknown name)."""
    try:
        return knob in techniques.lookup(name).sets
    except KeyError:
        return False


def other_workload(row) -> bool:
    """The cell trains another workload than its study's (its knobs override batch or seq_len)."""
    k = knobs(row)
    return any(k.get(name) is not None for name in catalogue.WORKLOAD_KNOBS)


def without_knob(technique: str, knob: str) -> str:
    """The combination without the parts that set ``knob`` ('baseline' if none is left), e.g.
    'gc+s512' without seq_len is 'gc': the label of a line through several lengths."""
    return join(n for n in parts(technique) if n != "baseline" and not sets_knob(n, knob))


def difficulty_rank(technique: str) -> int:
    """Position of the combination's difficulty in the catalogue's order (unknown last)."""
    level = technique_meta(technique)["difficulty"]
    order = catalogue.DIFFICULTIES
    return order.index(level) if level in order else len(order)


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
    difficulty = max(levels, key=catalogue.DIFFICULTIES.index) if levels else DASH
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
    and the same batch and sequence length unless the technique sets one of them (b<N>/s<N>)."""
    ok = ok_rows(df)
    index = {}
    for _, r in ok.iterrows():
        index.setdefault((r["mode"], r["model"], r["gpu"], frozenset(parts(r["technique"]))), []).append(r)
    out = []
    shape = any(sets_knob(with_name, k) for k in catalogue.WORKLOAD_KNOBS)
    for _, r in ok.iterrows():
        names = parts(r["technique"])
        if with_name not in names:
            continue
        rest = [n for n in names if n != with_name] + ([without_name] if without_name else [])
        key = (r["mode"], r["model"], r["gpu"], frozenset(parts(join(rest))))
        for other in index.get(key, []):
            if shape or same_shape(r, other):
                out.append((r, other))
                break
    return out


def same_shape(a, b) -> bool:
    return all(missing(a[k]) or missing(b[k]) or int(a[k]) == int(b[k]) for k in ("batch_size", "seq_len"))
