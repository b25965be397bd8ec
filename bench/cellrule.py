"""What Snakemake's per-cell rule runs: the cell's benchmark test, always leaving a JSON.

    python -m bench.cellrule --matrix M --cell ID --out results/cells/ID.json

Runs ``pytest bench/test_cells.py::test_cell[ID] --benchmark-json`` into a temporary file
and moves it to ``--out`` atomically. pytest failing on an error/timeout record is fine (the
JSON holds the record); if pytest leaves no usable JSON at all (a crash, a collection
error), a pytest-benchmark-shaped JSON with an ``error`` record is written instead, so
every cell has a row and the matrix goes on. Torch-free.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import atomic, matrix, record

TEST = Path(__file__).with_name("test_cells.py")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", required=True)
    ap.add_argument("--cell", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--worker-logs", default="results/logs")
    args = ap.parse_args(argv)
    spec = matrix.load(args.matrix)[args.cell]
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        bench_json = Path(tmp, "bench.json")
        cmd = [sys.executable, "-m", "pytest", f"{TEST}::test_cell[{args.cell}]", "--matrix", args.matrix,
               "--worker-logs", args.worker_logs, "--benchmark-json", str(bench_json),
               "-p", "no:cacheprovider", "-q", "-rA", "--rootdir", str(TEST.parent.parent)]
        print("+", " ".join(cmd), flush=True)
        code = subprocess.call(cmd)
        doc = _usable(bench_json)
        if doc is None:
            rec = record.failure(spec, "error", f"pytest exited with code {code} and left no benchmark record")
            doc = {"benchmarks": [{"name": f"test_cell[{args.cell}]", "extra_info": rec}]}
        atomic.write_json(out, doc)
    return 0


def _usable(path: Path):
    try:
        doc = json.loads(path.read_text())
        return doc if doc["benchmarks"] and "cell" in doc["benchmarks"][0]["extra_info"] else None
    except (OSError, ValueError, KeyError, IndexError):
        return None


if __name__ == "__main__":
    sys.exit(main())
