"""Flatten run records into one long-form row per cell (seaborn-friendly).

    python -m report.table results/cells/*.json --out results/table.csv [--matrix matrix/default.yaml]

Input: pytest-benchmark JSON files (``--benchmark-json``). ``benchmarks[0]["extra_info"]`` is
one run record (bench/records/record.py); ``benchmarks[0]["stats"]["mean"]`` is kept as
``bench_wall_s``. Every file gives a row, and no row says more than its record proves:

- a file that cannot be read, or holds no benchmark or no record: status "error", the file
  stem as cell id, reason "unreadable results file ...";
- a record that breaks the contract (``checks.problems``: a peak that is not the sum of its
  breakdown, a missing field, an ok sim record without verdicts, ...): status "error", reason
  "record breaks the contract (it said <status>): ...", its measurements left out;
- two files holding the same cell: both "error", naming the files.

With ``--matrix M`` (bench.cells.matrix), every cell of M that has no results file gets an error row
("no results file"); a file for a cell that is not in M, or whose record's settings (shape,
knobs, capacities) differ from M's cell, is an error row saying so.

Output: a CSV written atomically (bench/records/atomic.py), with a manifest ``<stem>.meta.json``
beside it (row count, sha256; report/table_check.py), one row per input file, columns
``COLUMNS`` then any record keys this module does not know (kept, not dropped):

- scalar record fields as they are; ``techniques`` joined with '+' into ``technique``;
- ``breakdown_bytes`` as ``<category>_bytes`` (the six record.CATEGORIES);
- ``phase_peak_bytes`` as ``<phase>_peak_bytes`` (forward, backward, optimizer);
- ``knobs``, ``verdict_gpu_memory_bytes``, ``step_peak_bytes``, ``verdicts``, ``versions``,
  ``machine``, ``details`` as compact JSON.

A value that was not measured is an empty field, never 0. ``read_table`` refuses a table that
is cut short, ragged or does not match its manifest (``TableError``), and reads a whole one
back with the right dtypes (byte counts as nullable integers, text as text).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from bench.records import checks, record
from bench.cells import matrix
from report import table_check
from report.table_check import TableError  # noqa: F401  (the error read_table raises)

BREAKDOWN_COLUMNS = tuple(f"{c}_bytes" for c in record.CATEGORIES)
PHASE_COLUMNS = tuple(f"{p}_peak_bytes" for p in record.PHASES + record.INFERENCE_PHASES)
IDENTITY_COLUMNS = ("cell", "study", "baseline_cell", "model", "gpu", "mode", "provenance",
                    "technique", "world_size", "status", "reason")
INT_COLUMNS = ("world_size", "peak_bytes", *BREAKDOWN_COLUMNS, "reserved_peak_bytes", *PHASE_COLUMNS,
               "host_peak_rss_bytes", "load_host_peak_rss_bytes", "gpu_memory_bytes",
               "batch_size", "seq_len", "steps", "warmup_steps", "params_total", "params_trainable")
FLOAT_COLUMNS = ("step_s_median", "tokens_per_s", "flops_per_step", "wall_s", "bench_wall_s")
JSON_COLUMNS = ("knobs", "verdict_gpu_memory_bytes", "step_peak_bytes", "verdicts", "versions", "machine",
                "details")
COLUMNS = (*IDENTITY_COLUMNS, *(c for c in INT_COLUMNS if c != "world_size"), *FLOAT_COLUMNS,
           "started_at", "log_tail", *JSON_COLUMNS)
TEXT_COLUMNS = tuple(c for c in COLUMNS if c not in INT_COLUMNS + FLOAT_COLUMNS)
# Record keys that become other columns (flattened or joined) rather than themselves.
_REPLACED = {"techniques", "breakdown_bytes", "phase_peak_bytes"}
# What an error row keeps of a record that broke the contract: who it is and where it ran.
_KEPT = (*record.SPEC_FIELDS, "versions", "machine", "started_at", "wall_s", "log_tail", "bench_wall_s",
         "record_commit")


def load_records(paths, cells: dict | None = None, matrix_name: str = "the matrix") -> list[dict]:
    """One row-ready record per path, in order, each checked against the record contract (and,
    given ``cells`` from bench.cells.matrix.load, against the matrix; then one more record for each
    cell of it that has no file)."""
    paths = [Path(p) for p in paths]
    recs = [_checked(p, _load_one(p)) for p in paths]
    recs = _duplicates(paths, recs)
    return recs if cells is None else against_matrix(recs, cells, matrix_name)


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
    stats = benches[0].get("stats")
    mean = stats.get("mean") if isinstance(stats, dict) else None
    info = doc.get("commit_info")   # the commit the record was made at (pytest-benchmark's, bench/reproduce.py)
    made_at = (f"{info.get('id') or '?'}{' (dirty)' if info.get('dirty') else ''}"
               if isinstance(info, dict) and info.get("id") else None)
    return dict(rec, bench_wall_s=mean if isinstance(mean, (int, float)) and not isinstance(mean, bool) else None,
                record_commit=made_at)


def _unreadable(path: Path, why: str) -> dict:
    rec = {k: None for k in record.FIELDS}
    rec.update(cell=path.stem, status="error", techniques=[], _flagged=True,
               reason=record.one_line(f"unreadable results file {path.name}: {why}"))
    return rec


def _checked(path: Path, rec: dict) -> dict:
    if rec.get("_flagged"):
        return rec
    found = checks.gate(rec)
    if not found:
        return rec
    said = f" (it said {rec['status']})" if rec.get("status") in record.STATUSES else ""
    return broken(rec, f"record breaks the contract{said}: {'; '.join(found)}", path)


def broken(rec: dict, why: str, path: Path | None = None) -> dict:
    """An error row for ``rec``: its identity and context kept, its measurements dropped (they
    are not to be trusted), ``why`` as the reason."""
    out = {k: None for k in record.FIELDS} | {k: rec.get(k) for k in _KEPT}
    techs = rec.get("techniques")
    out["techniques"] = [t for t in techs if isinstance(t, str)] if isinstance(techs, list) else []
    if not isinstance(out["cell"], str) or not out["cell"]:
        out["cell"] = path.stem if path else ""
    if out["mode"] not in record.MODES:   # shown among the results that could not be read
        out["mode"] = out["provenance"] = None
    else:
        out["provenance"] = record.PROVENANCE[out["mode"]]
    out.update(status="error", reason=record.one_line(why), _flagged=True)  # _flagged: not a whole record
    return out


def _duplicates(paths: list[Path], recs: list[dict]) -> list[dict]:
    files: dict[str, list[str]] = {}
    for path, rec in zip(paths, recs):
        files.setdefault(rec["cell"], []).append(path.name)
    return [broken(r, f"{len(files[r['cell']])} results files hold cell {r['cell']} "
                      f"({', '.join(files[r['cell']])}): which one is current is unknown", p)
            if len(files[r["cell"]]) > 1 else r for p, r in zip(paths, recs)]


def against_matrix(recs: list[dict], cells: dict, name: str) -> list[dict]:
    """Rows checked against the matrix's cells, plus an error row for each cell without a file."""
    out = []
    for rec in recs:
        spec = cells.get(rec["cell"])
        if spec is None:
            rec = broken(rec, f"cell {rec['cell']} is not in {name}: a results file left from another matrix?")
        elif not rec.get("_flagged"):
            differ = checks.inputs_problems(rec, spec)  # the rest of checks.gate ran in _checked
            if differ:
                rec = broken(rec, f"record does not match cell {rec['cell']} of {name}: {'; '.join(differ)}")
        out.append(rec)
    have = {r["cell"] for r in out}
    out += [record.failure(spec, "error", f"no results file for this cell of {name}")
            for cell, spec in cells.items() if cell not in have]
    return out


def flatten(rec: dict) -> dict:
    """One table row (a flat dict) from one record."""
    row = {k: v for k, v in rec.items() if k not in _REPLACED and not k.startswith("_")}
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


def write_csv(df: pd.DataFrame, path) -> None:
    """The table at ``path`` and its manifest beside it, both written atomically."""
    table_check.write(path, df.to_csv(index=False))


def read_table(path) -> pd.DataFrame:
    """The CSV written by ``write_csv``, with numbers as numbers and text as text ("" if empty).
    Raises TableError (naming the file and the problem) for a table that is cut short, ragged,
    lacks columns, holds an unknown status or does not match its manifest."""
    table_check.check(path, COLUMNS)
    head = pd.read_csv(path, nrows=0).columns
    numeric = [c for c in head if c in INT_COLUMNS + FLOAT_COLUMNS]
    # keep_default_na=False: a model called "NA" stays a string; only numeric blanks are NaN.
    df = pd.read_csv(path, keep_default_na=False, na_values={c: [""] for c in numeric},
                     dtype={c: str for c in head if c not in numeric})
    return _typed(df)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.table", description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", help="pytest-benchmark JSON files, one per cell")
    ap.add_argument("--out", required=True, help="CSV to write (atomically), with <stem>.meta.json beside it")
    ap.add_argument("--matrix", help="matrix YAML: a row for each of its cells without a file; "
                                     "files for cells not in it (or not matching it) are error rows")
    args = ap.parse_args(argv)
    if not args.paths and not args.matrix:
        ap.error("give results files, or --matrix to list the cells that have none")
    cells = None
    if args.matrix:
        try:
            cells = matrix.load(args.matrix)
        except matrix.MatrixError as exc:
            print(f"report.table: error: {exc}", file=sys.stderr)
            return 2
    df = to_frame(load_records(args.paths, cells, args.matrix or "the matrix"))
    try:
        write_csv(df, args.out)
    except OSError as exc:  # a full disk: one line naming the file, no partial table (atomic.py)
        print(f"report.table: error: {exc}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{n} {s}" for s, n in df["status"].value_counts().items())
    print(f"{args.out}: {len(df)} rows ({counts})", file=sys.stderr)
    for start in ("record breaks the contract", "record does not match", "no results file", "unreadable results file"):
        hits = df.loc[df["reason"].str.startswith(start), "cell"].tolist()
        if hits:   # said where a person running it will see it, not only inside the table
            print(f"  {len(hits)} x {start}: {', '.join(hits[:5])}{' ...' if len(hits) > 5 else ''}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
