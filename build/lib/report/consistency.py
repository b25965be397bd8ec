"""The page's section of broken consistency rules (bench/records/consistency.py): every record and
every fits answer is held to them; a row here is an answer that should not be trusted until
its cause is found. Shown only when some rule is broken."""
from __future__ import annotations

import json

import pandas as pd

from bench.records import consistency


def _json(v):
    try:
        return json.loads(v) if isinstance(v, str) and v else v
    except ValueError:
        return None


def _bytes(v):
    """A byte count of the table: read_table keeps columns it does not know (modelled_reserved_peak_bytes) as text."""
    try:
        return None if v is None or v == "" or v != v else int(float(v))
    except (TypeError, ValueError):
        return None


def problems(df: pd.DataFrame, fits: pd.DataFrame | None) -> list[dict]:
    rows = []
    for _, r in df[df["status"] == "ok"].iterrows():
        rec = {"status": "ok", "knobs": _json(r.get("knobs")), "allocator_model": _json(r.get("allocator_model")),
               "modelled_reserved_peak_bytes": _bytes(r.get("modelled_reserved_peak_bytes")),
               "peak_bytes": _bytes(r.get("peak_bytes"))}
        rec = {k: (None if isinstance(v, float) and v != v else v) for k, v in rec.items()}
        for p in consistency.record_problems(rec):
            rows.append({"cell": r["cell"], "status": "reserved vs allocated", "reason": p})
    if fits is not None and len(fits):
        for p in consistency.fits_problems(fits.fillna("").to_dict("records")):
            rows.append({"cell": p.split(":", 1)[0], "status": "compression reaches less", "reason": p})
    return rows


def section(df: pd.DataFrame, fits: pd.DataFrame | None):
    rows = problems(df, fits)
    if not rows:
        return None
    return {"kind": "failures", "title": "Answers that break a consistency rule", "rows": rows}
