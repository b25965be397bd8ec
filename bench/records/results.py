"""Read a results folder (``<dir>/cells/*.json``, ``<dir>/table.csv`` optional) without trusting it.

Torch-free; used by ``bench.reproduce`` and ``report.versus``. ``read(dir)`` never raises on
bad content: every file that cannot be used becomes a ``Problem`` naming the file and what is
wrong with it (missing folder, no cells, truncated or corrupt JSON, no benchmark or no record
inside, a record that breaks the contract of bench/records/record.py, a record filed under another
cell's name, a record that fails the record gate, bench/records/checks.gate: its contract, and its inputs
against the cell spec stored beside it; a file not as sealed, bench/records/seal.py). A caller that finds problems must say its result is
incomplete.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

from bench.records import checks, seal


@dataclass(frozen=True)
class Problem:
    where: str       # the folder, a file name or a cell id
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class ResultSet:
    root: Path
    records: dict[str, dict] = field(default_factory=dict)   # cell id -> run record (usable ones only)
    specs: dict[str, dict] = field(default_factory=dict)     # cell id -> cell spec, where the file has one
    docs: dict[str, dict] = field(default_factory=dict)      # cell id -> whole pytest-benchmark document
    problems: list[Problem] = field(default_factory=list)    # each makes a comparison incomplete
    notes: list[str] = field(default_factory=list)           # worth saying, harmless to a comparison


def wanted(cell: str, only) -> bool:
    """Whether ``cell`` is selected by ``only``: None (all), a substring, or a list of
    substrings (any of them), as ``pytest -k`` selects by substring of the cell id."""
    if only is None:
        return True
    return any(s in cell for s in ([only] if isinstance(only, str) else only))


def read(root: str | Path, only=None) -> ResultSet:
    """The usable records of ``root`` and a problem for everything else; ``only`` keeps the
    files whose cell id contains that substring (or any of a list of them)."""
    rs = ResultSet(Path(root))
    cells_dir = rs.root / "cells"
    if not rs.root.is_dir():
        rs.problems.append(Problem(str(root), "no such results folder"))
        return rs
    if not cells_dir.is_dir():
        rs.problems.append(Problem(str(root), "has no cells/ folder (expected cells/<cell>.json)"))
        return rs
    paths = sorted(p for p in cells_dir.glob("*.json") if wanted(p.stem, only))
    if not paths:
        what = f"no cell whose id contains {only!r}" if only else "no <cell>.json files"
        rs.problems.append(Problem(str(cells_dir), what))
    for path in paths:
        read_one(rs, path)
    check_table(rs, only)
    return rs


def read_one(rs: ResultSet, path: Path) -> None:
    """Add one cell file's record to ``rs``, or a problem saying why it cannot be used."""
    name = path.name
    try:
        doc = json.loads(path.read_text())
    except UnicodeDecodeError as exc:
        rs.problems.append(Problem(name, f"not text: {exc}"))
        return
    except ValueError as exc:
        rs.problems.append(Problem(name, f"corrupt JSON (truncated or damaged): {exc}"))
        return
    except OSError as exc:
        rs.problems.append(Problem(name, f"unreadable: {exc}"))
        return
    bench = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not isinstance(bench, list) or not bench or not isinstance(bench[0], dict):
        rs.problems.append(Problem(name, "holds no pytest-benchmark benchmark (benchmarks[0])"))
        return
    if why := seal.problem(path, doc):   # edited after it was written, or after its folder was published
        rs.problems.append(Problem(name, why.removeprefix(f"{path}: ")))
        return
    rec = bench[0].get("extra_info")
    if not isinstance(rec, dict) or "cell" not in rec:
        rs.problems.append(Problem(name, "its benchmark carries no run record (extra_info without 'cell')"))
        return
    if rec["cell"] != path.stem:
        rs.problems.append(Problem(name, f"holds the record of cell {rec['cell']!r}, not {path.stem!r}"))
        return
    params = bench[0].get("params")
    spec = params.get("cell_spec") if isinstance(params, dict) else None
    spec = spec if isinstance(spec, dict) else None
    broken = checks.gate(rec, spec)  # the contract, and the inputs against the spec the file says it ran
    if broken:
        what = "does not match the cell spec it was run from" if not checks.problems(rec) else \
            "breaks the record contract"
        rs.problems.append(Problem(name, f"{what}: " + "; ".join(broken)))
        return
    rs.records[rec["cell"]] = rec
    rs.docs[rec["cell"]] = doc
    if spec:
        rs.specs[rec["cell"]] = spec


def check_table(rs: ResultSet, only) -> None:
    """A table.csv beside the cells that lists other cells is stale: said, not fatal (the
    comparison reads the cells, never the table)."""
    path = rs.root / "table.csv"
    if not path.is_file():
        return
    try:
        with open(path, newline="") as fh:
            listed = {row.get("cell", "") for row in csv.DictReader(fh)}
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        rs.notes.append(f"table.csv unreadable ({exc}); the cells were read instead")
        return
    listed = {c for c in listed if wanted(c, only)}
    files = {p.stem for p in (rs.root / "cells").glob("*.json") if wanted(p.stem, only)}
    if listed != files:
        rs.notes.append(f"table.csv is stale: {len(listed - files)} cells listed without a file, "
                        f"{len(files - listed)} files not listed; the cells were read instead")
