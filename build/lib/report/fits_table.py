"""Read the fits search's results (results/fits.csv, written by the fits rule) for the lookup.

    python -m report.build results/table.csv --fits results/fits.csv --out results/report.html

One row per (study, model, technique, gpu); the columns are ``COLUMNS`` (brief, interface B);
``*_answer`` is fits | beyond | none | bracketed (with ``*_below``) | error (with ``reason``). A file without those columns,
or with another answer, is refused with the file, the column or row, and why.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.search import fits_csv

COLUMNS = ("study", "model", "technique", "gpu", "cell", "seq_len", "batch_size", "resolution_tokens", "seq_limit",
           "batch_limit", "max_seq_at_batch1", "seq_answer", "max_batch_at_seq", "batch_answer",
           "peak_at_max_seq_bytes", "peak_at_next_seq_bytes", "peak_at_max_batch_bytes", "peak_at_next_batch_bytes",
           "verdict_rule", "provenance")
ANSWERS = ("fits", "beyond", "none", "error", "bracketed")


class FitsError(ValueError):
    pass


def read_fits(path) -> pd.DataFrame:
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise FitsError(f"{path}: cannot be read as CSV: {exc}") from exc
    lacking = [c for c in COLUMNS if c not in df.columns]
    if lacking:
        raise FitsError(f"{path}: missing column(s) {', '.join(lacking)}")
    for col in ("seq_answer", "batch_answer"):
        bad = df[~df[col].isin(ANSWERS)]
        if len(bad):
            i = bad.index[0]
            raise FitsError(f"{path}: row {i + 2}, column {col}: {bad.iloc[0][col]!r} is not one of {ANSWERS}")
    if "reason" not in df.columns:
        df["reason"] = ""
    # a row that contradicts itself (bench/search/fits_csv.row_problems) is no answer: an error row
    rows = [fits_csv.refused(r, f"{path} row {i + 2}") for i, r in enumerate(df.to_dict("records"))]
    return pd.DataFrame(rows, columns=df.columns, dtype=str).fillna("")
