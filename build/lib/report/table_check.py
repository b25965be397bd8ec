"""The table file's integrity: a manifest written beside it, and the checks a reader runs.

``python -m report.table`` writes ``table.csv`` and, beside it, ``table.meta.json``:
``{"table": "table.csv", "rows": N, "columns": C, "sha256": "..."}``. ``check(path)`` refuses
(raises ``TableError`` naming the file and the problem) a table that

- cannot be read, is empty, is not UTF-8, or does not end with a newline (cut short);
- is not well-formed CSV (a quoted field left open), has a row with more or fewer fields
  than the header (ragged), lacks a column the report needs, or holds a status that is not
  one of bench.records.record.STATUSES;
- has no manifest, or does not match it: the row count catches rows cut at a row boundary,
  the sha256 any other edit or corruption since the table was written.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

from bench.records import atomic, record


class TableError(ValueError):
    """A table file the report must not read; the message names the file and the problem."""


def manifest_path(table) -> Path:
    table = Path(table)
    return table.with_name(f"{table.stem}.meta.json")


def write(table, text: str) -> None:
    """Write ``text`` as the table at ``table`` and its manifest (both atomically). A reader that
    comes between the two writes sees a mismatch and refuses: loud, never a silent mix."""
    rows = _parse(Path(table), text)
    atomic.write_text(table, text)
    atomic.write_json(manifest_path(table), {
        "table": Path(table).name, "rows": len(rows) - 1, "columns": len(rows[0]) if rows else 0,
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()})


def check(table, required: tuple[str, ...]) -> None:
    """Raise TableError unless ``table`` is whole, well-formed and matches its manifest."""
    path = Path(table)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TableError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if not data:
        raise TableError(f"{path}: empty file, not a table (not even a header)")
    if not data.endswith(b"\n"):
        raise TableError(f"{path}: no newline at the end: the file was cut short")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TableError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    rows = _parse(path, text)
    header = rows[0]
    lacking = [c for c in required if c not in header]
    if lacking:
        raise TableError(f"{path}: missing columns {', '.join(lacking)} (not a table written by report.table, "
                         "or one from an older contract: rebuild it)")
    status = header.index("status")
    for number, row in enumerate(rows[1:], start=1):
        if len(row) != len(header):
            raise TableError(f"{path}: row {number} has {len(row)} fields, the header has {len(header)} (ragged)")
        if row[status] not in record.STATUSES:
            raise TableError(f"{path}: row {number} has status {row[status]!r}, not one of {', '.join(record.STATUSES)}")
    _match_manifest(path, data, len(rows) - 1)


def _parse(path: Path, text: str) -> list[list[str]]:
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error as exc:
        raise TableError(f"{path}: not well-formed CSV: {exc}") from None
    if not rows:
        raise TableError(f"{path}: no header row")
    return rows


def _match_manifest(path: Path, data: bytes, n_rows: int) -> None:
    meta_path = manifest_path(path)
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise TableError(f"{path}: no manifest {meta_path.name} beside it (python -m report.table writes one): "
                         "cannot tell whether rows were lost") from None
    except (OSError, ValueError) as exc:
        raise TableError(f"{path}: its manifest {meta_path.name} is unreadable: {exc}") from None
    if not isinstance(meta, dict) or not {"rows", "sha256"} <= set(meta):
        raise TableError(f"{path}: its manifest {meta_path.name} lacks rows and sha256")
    if meta["rows"] != n_rows:
        raise TableError(f"{path}: {n_rows} rows, its manifest {meta_path.name} says {meta['rows']}: "
                         "rows were lost (cut at a row boundary?) or added")
    if hashlib.sha256(data).hexdigest() != meta["sha256"]:
        raise TableError(f"{path}: content differs from its manifest {meta_path.name} (sha256): "
                         "changed or corrupted after report.table wrote it")
