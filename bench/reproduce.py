"""Rerun the reference matrix (or part of it) and check the result against results/reference/.

    python -m bench.reproduce                              # every cell of the reference
    python -m bench.reproduce --only __sim__               # the cells whose id contains __sim__
    python -m bench.reproduce --only qwen2.5-7b__sim__lora --only tiny-qwen2__cpu__baseline --out DIR
    python -m bench.reproduce --check-only --out results/rerun    # check cells already run

Each selected cell runs through bench.runner.launch.run_cell (the same isolated worker as every
run), one at a time, into ``<out>/cells/<cell>.json`` (pytest-benchmark's shape, the record in
``benchmarks[0].extra_info``, the cell spec in ``params.cell_spec``, as the Snakemake rule
writes it), worker logs in ``<out>/logs/``. Then each record is checked against the
reference's by bench.records.identical: sim records identical in every field outside the stated
context fields, cpu peaks and breakdowns identical, cpu throughput within the measured
noise band (bench.records.noise). Cells are the reference's; a cell the matrix no longer has, or a
reference file that cannot be read, is a difference too.

Output: every difference, one line each, by cell and field, on stdout and in
``<out>/differences.txt``. Exit status 0 when there is none, 1 otherwise, 2 for bad input (a
matrix that is missing or wrong, an ``--out`` that is not a folder): one line naming it, before
anything runs. Torch-free.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

from bench.records import atomic, identical, noise, results
from bench.runner import launch
from bench.cells import matrix


def select(ref: results.ResultSet, cells: dict, only) -> tuple[list[str], list[str]]:
    """The reference cells to rerun, and lines for those that cannot be (not in the matrix)."""
    wanted = sorted(c for c in ref.records if results.wanted(c, only))
    gone = [f"{c}: in the reference, not in the matrix any more (cannot be rerun)" for c in wanted if c not in cells]
    return [c for c in wanted if c in cells], gone


def document(spec: dict, rec: dict) -> dict:
    """The cell's file, shaped as pytest-benchmark's --benchmark-json and the Snakemake rule's."""
    return {
        "benchmarks": [{"name": f"test_cell[{spec['cell']}]", "group": spec.get("study"),
                        "param": spec["cell"], "params": {"cell_spec": spec}, "extra_info": rec}],
        "machine_info": {"node": platform.node(), "machine": platform.machine(), "system": platform.system(),
                         "release": platform.release(), "python_version": platform.python_version()},
        "commit_info": commit_info(),
        "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "version": "ft-membench bench.reproduce",
    }


def commit_info() -> dict:
    def git(*args):
        try:
            out = subprocess.run(["git", *args], check=False, cwd=launch.ROOT, capture_output=True, text=True, timeout=10)
            return out.stdout.strip() if out.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"id": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def run(cells: list[str], specs: dict, out: Path) -> str:
    """Rerun ``cells`` one at a time; returns the machine's load while they ran (other work on
    the machine slows cpu cells down and moves their throughput, never their bytes)."""
    start = os.getloadavg()[0]
    for k, cell in enumerate(cells, 1):
        rec = launch.run_cell(specs[cell], out / "logs" / f"{cell}.worker.log")
        atomic.write_json(out / "cells" / f"{cell}.json", document(specs[cell], rec))
        print(f"[{k}/{len(cells)}] {cell}: {rec['status']}", flush=True)
    end, cores = os.getloadavg()[0], os.cpu_count() or 1
    busy = ("; the machine was busy (load above its cores): cpu throughput outside the band is expected "
            "and says nothing about the bytes") if max(start, end) > cores else ""
    return f"load average (1 min, {cores} cores) {start:.1f} at the start, {end:.1f} at the end of the rerun{busy}"


def check(ref: results.ResultSet, new: results.ResultSet, cells: list[str]) -> list[str]:
    """Every difference between the reference and the rerun of ``cells``, one line each."""
    lines = [f"reference {p}" for p in ref.problems] + [f"rerun {p}" for p in new.problems]
    for cell in cells:
        if cell not in new.records:
            if not any(p.where == f"{cell}.json" for p in new.problems):
                lines.append(f"{cell}: no rerun record")
            continue
        lines += [str(d) for d in identical.compare(ref.records[cell], new.records[cell])]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append",
                    help="rerun only the cells whose id contains this substring (repeatable: any of them)")
    ap.add_argument("--out", default="results/rerun", help="results folder for the rerun (default: results/rerun)")
    ap.add_argument("--reference", default="results/reference")
    ap.add_argument("--matrix", default=str(matrix.DEFAULT_MATRIX))
    ap.add_argument("--check-only", action="store_true", help="check the cells already in --out, run nothing")
    args = ap.parse_args(argv)
    out = Path(args.out)
    there = next((p for p in (out, *out.parents) if p.exists()), None)   # the nearest part that exists
    if there is not None and not there.is_dir():
        return _bad(f"--out {out}: not a folder ({there} is a file)")
    try:
        specs = matrix.load(args.matrix)
    except (matrix.MatrixError, OSError) as exc:
        return _bad(f"--matrix: {' '.join(str(exc).split())[:500]}")
    ref = results.read(args.reference, only=args.only)
    cells, lines = select(ref, specs, args.only)
    load = None if args.check_only else run(cells, specs, out)
    lines += check(ref, results.read(out, only=args.only), cells)
    head = (f"{len(cells)} cells rerun into {out} and checked against {args.reference}: sim exact; cpu bytes exact, "
            f"cpu throughput within ±{noise.CPU_THROUGHPUT_BAND * 100:.0f}% (bench/records/noise.py); not compared: "
            f"{', '.join(identical.EXCLUDED)}")
    verdict = f"{len(lines)} differences" if lines else "no difference: reproduced"
    text = "\n".join([head, *([load] if load else []), *lines, verdict]) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "differences.txt").write_text(text)
    print(text, end="")
    return 1 if lines else 0


def _bad(message: str) -> int:
    print(f"bench.reproduce: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
