"""The run-to-run noise of CPU throughput: the one band every rerun check and comparison uses.

    python -m bench.records.noise tiny-llama__cpu__baseline tiny-llama__cpu__lora --repeat 3 [--out DIR]

runs each named cell ``--repeat`` times, each in its own isolated worker (bench.runner.launch.run_cell,
one after another, never side by side), and prints each run's tokens/s, its deviation from
the cell's median and from the reference record. Torch-free.

``CPU_THROUGHPUT_BAND`` (±40%) is the largest spread of one cell's repeats around their median
under steady load (37.5%, rounded up), from two such runs of 3 cells x 3 repeats on the
reference's shared 2-core machine (their output: results/reference/throughput-noise.txt). It
still catches a step twice as slow (-50%). It cannot cover a change of load between the
reference and a rerun (a loaded machine runs every cell slower, bytes identical), so
bench.reproduce prints the load beside any throughput difference.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

# Relative band: a rerun's tokens_per_s (and step_s_median, details.timed_s) within
# ±CPU_THROUGHPUT_BAND of the reference counts as the same throughput (data above).
CPU_THROUGHPUT_BAND = 0.40


def spread(values: list[float]) -> float:
    """The largest relative deviation from the median."""
    mid = statistics.median(values)
    return max(abs(v / mid - 1) for v in values)


def main(argv=None) -> int:
    from bench.records import results  # the launcher only where cells are run
    from bench.runner import launch
    from bench.cells import matrix

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--matrix", default=str(matrix.DEFAULT_MATRIX))
    ap.add_argument("--reference", default="results/reference")
    ap.add_argument("--out", default="results/noise", help="folder for the worker logs")
    args = ap.parse_args(argv)
    specs = matrix.load(args.matrix)
    ref = results.read(args.reference).records
    worst = off = 0.0
    print(f"cell | run | 1-min load average before it ({os.cpu_count()} cores) | tokens/s | vs median | vs reference")
    for cell in args.cells:
        runs, loads = [], []
        for k in range(args.repeat):
            loads.append(os.getloadavg()[0])   # other processes on the machine slow a cpu cell down
            runs.append(launch.run_cell(specs[cell], Path(args.out, f"{cell}.{k}.log")))
        tps = [r["tokens_per_s"] for r in runs]
        if any(not isinstance(t, (int, float)) for t in tps):
            print(f"{cell}: a run gave no throughput: {[r['status'] + ' ' + r['reason'] for r in runs]}")
            return 1
        mid = statistics.median(tps)
        ref_tps = (ref.get(cell) or {}).get("tokens_per_s")
        for k, t in enumerate(tps):
            vs_ref = f"{(t / ref_tps - 1) * 100:+.1f}%" if ref_tps else "-"
            print(f"{cell} | {k} | {loads[k]:.1f} | {t:.1f} | {(t / mid - 1) * 100:+.1f}% | {vs_ref}")
        worst = max(worst, spread(tps))
        off = max(off, abs(mid / ref_tps - 1) if ref_tps else 0.0)
    print(f"largest deviation from a cell's median: {worst * 100:.1f}%; of a median from the reference: "
          f"{off * 100:.1f}% (band in use: ±{CPU_THROUGHPUT_BAND * 100:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
