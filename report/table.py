"""Flatten run records into one long-form row per cell (seaborn-friendly).

    python -m report.table results/cells/*.json --out results/table.csv

Input: pytest-benchmark JSON files (``--benchmark-json``). ``benchmarks[0]["extra_info"]`` is
one run record (bench/record.py); ``benchmarks[0]["stats"]["mean"]`` is kept as
``bench_wall_s``. A file that cannot be read, or holds no benchmark or no record, still gives
a row: status "error", the file stem as cell id, and a reason saying what was wrong.

Output: a CSV written atomically (temp file + os.replace), one row per input file, columns
``COLUMNS`` then any record keys this module does not know (kept, not dropped):

- scalar record fields as they are; ``techniques`` joined with '+' into ``technique``;
- ``breakdown_bytes`` as ``<category>_bytes`` (the six record.CATEGORIES);
- ``phase_peak_bytes`` as ``<phase>_peak_bytes`` (forward, backward, optimizer);
- ``step_peak_bytes``, ``verdicts``, ``versions``, ``machine``, ``details`` as compact JSON.

A value that was not measured is an empty field, never 0. ``read_table`` reads the CSV back
with the right dtypes (byte counts as nullable integers, text as text).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

from bench import record

BREAKDOWN_COLUMNS = tuple(f"{c}_bytes" for c in record.CATEGORIES)
PHASE_COLUMNS = tuple(f"{p}_peak_bytes" for p in record.PHASES + record.INFERENCE_PHASES)
IDENTITY_COLUMNS = ("cell", "study", "baseline_cell", "model", "gpu", "mode", "provenance",
                    "technique", "world_size", "status", "reason")
INT_COLUMNS = ("world_size", "peak_bytes", *BREAKDOWN_COLUMNS, "reserved_peak_bytes", *PHASE_COLUMNS,
               "host_peak_rss_bytes", "load_host_peak_rss_bytes", "gpu_memory_bytes",
               "batch_size", "seq_len", "steps", "warmup_steps", "params_total", "params_trainable")
FLOAT_COLUMNS = ("step_s_median", "tokens_per_s", "flops_per_step", "wall_s", "bench_wall_s")
JSON_COLUMNS = ("step_peak_bytes", "verdicts", "versions", "machine", "details")
COLUMNS = (*IDENTITY_COLUMNS, *(c for c in INT_COLUMNS if c != "world_size"), *FLOAT_COLUMNS,
           "started_at", "log_tail", *JSON_COLUMNS)
TEXT_COLUMNS = tuple(c for c in COLUMNS if c not in INT_COLUMNS + FLOAT_COLUMNS)
# Record keys that become other columns (flattened or joined) rather than themselves.
_REPLACED = {"techniques", "breakdown_bytes", "phase_peak_bytes"}


def load_records(paths) -> list[dict]:
    """One record per path, in order; an unreadable file gives an error record for its stem."""
    return [_load_one(Path(p)) for p in paths]


def _load_one(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return _unreadable(path, f"{type(exc).__name__}: {exc}")
    benches = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not benches or not isinstance(benches, list) or not isinstance(benches[0], dict):
        return _unreadable(path, "no benchmark in it")
    rec = benches[0].get("extra_info")
    if not isinstance(rec, dict) or "cell" not in rec:
        return _unreadable(path, "its benchmark carries no run record in extra_info")
    rec = {k: rec.get(k) for k in record.FIELDS} | rec     # tolerate missing keys: None
    stats = benches[0].get("stats")
    rec["bench_wall_s"] = stats.get("mean") if isinstance(stats, dict) else None
    return rec


def _unreadable(path: Path, why: str) -> dict:
    rec = {k: None for k in record.FIELDS}
    rec.update(cell=path.stem, status="error", techniques=[],
               reason=record.one_line(f"unreadable results file {path.name}: {why}"))
    return rec


def flatten(rec: dict) -> dict:
    """One table row (a flat dict) from one record."""
    row = {k: v for k, v in rec.items() if k not in _REPLACED}
    row["technique"] = "+".join(rec.get("techniques") or [])
    breakdown = rec.get("breakdown_bytes") or {}
    if breakdown:  # a record older than a category had none of it (kv_cache: no training step has one)
        breakdown = {**dict.fromkeys(record.LATER_CATEGORIES, 0), **breakdown}
    row.update({f"{c}_bytes": breakdown.get(c) for c in record.CATEGORIES})
    phases = rec.get("phase_peak_bytes") or {}
    row.update({f"{p}_peak_bytes": phases.get(p) for p in record.PHASES + record.INFERENCE_PHASES})
    for key, value in row.items():
        if isinstance(value, (list, tuple, dict)):
            row[key] = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    return row


def to_frame(records: list[dict]) -> pd.DataFrame:
    """The long-form table: one row per record, ``COLUMNS`` first, extra keys after."""
    rows = [flatten(r) for r in records]
    extra = [k for r in rows for k in r if k not in COLUMNS]
    columns = [*COLUMNS, *dict.fromkeys(extra)]
    df = pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=columns)
    return _typed(df)


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    for col in INT_COLUMNS:
        values = pd.to_numeric(df[col], errors="coerce")
        whole = values.dropna()
        df[col] = values.astype("Int64") if (whole == whole.round()).all() else values
    for col in FLOAT_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    for col in TEXT_COLUMNS:
        df[col] = df[col].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    return df


def write_atomic_text(path, text: str) -> None:
    """Write ``text`` so that a reader sees the old file or the new one, never half of one
    (bench.record.write_atomic's approach: a temp file in the same folder, then os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp makes 0600; a report is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_csv(df: pd.DataFrame, path) -> None:
    write_atomic_text(path, df.to_csv(index=False))


def read_table(path) -> pd.DataFrame:
    """The CSV written by ``write_csv``, with numbers as numbers and text as text ("" if empty)."""
    head = pd.read_csv(path, nrows=0).columns
    numeric = [c for c in head if c in INT_COLUMNS + FLOAT_COLUMNS]
    # keep_default_na=False: a model called "NA" stays a string; only numeric blanks are NaN.
    df = pd.read_csv(path, keep_default_na=False, na_values={c: [""] for c in numeric},
                     dtype={c: str for c in head if c not in numeric})
    for col in COLUMNS:
        if col not in df:
            df[col] = None
    return _typed(df)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.table", description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="pytest-benchmark JSON files, one per cell")
    ap.add_argument("--out", required=True, help="CSV to write (atomically)")
    args = ap.parse_args(argv)
    df = to_frame(load_records(args.paths))
    write_csv(df, args.out)
    counts = ", ".join(f"{n} {s}" for s, n in df["status"].value_counts().items())
    print(f"{args.out}: {len(df)} rows ({counts})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
