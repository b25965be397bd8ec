"""Compare two results folders: one self-contained HTML page and one CSV, old against new.

    python -m report.versus OLD NEW --out DIR [--only SUBSTRING ...] [--group-by group] [--fail-on-move]
    snakemake --cores 1 versus --config old=results/reference new=results/rerun [out=DIR]

OLD and NEW each hold ``cells/<cell>.json`` (pytest-benchmark JSON, the run record in
``benchmarks[0].extra_info``; a ``table.csv`` beside them is optional and never read for
numbers). Two library versions, two machines, or before and after a change.

Output, in DIR: ``versus.html`` (Jinja2, autoescaped, no network) and ``versus.csv``, one row
per cell of either side: for peak, each breakdown category, throughput and FLOPs the old and
new values and the change (pytest-benchmark's ``new / old * 100 - 100`` percent); status and
verdicts old and new; whether it moved beyond tolerance and why. Cells that moved come first;
then, as ``pytest-benchmark compare --group-by``, by group (``group`` = the study, or
model, gpu, mode, technique, cell; comma-joined for several). The environment difference
(library versions, machine, commit) heads the page.

Tolerances: bytes and FLOPs exact; throughput within bench.records.noise.CPU_THROUGHPUT_BAND.
Exit status: 2 when the comparison is incomplete (a folder missing, a file corrupt or
breaking the record contract, different cell sets, or a cell whose inputs differ: each is
listed on the page and on stderr), else 1 with ``--fail-on-move`` when a cell moved, else 0.
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

import jinja2

from bench.records import noise, record, results
from report import GIB
from report.fmt import fmt_count, fmt_gib
from bench.records.atomic import write_text
from report.versus_rows import METRICS, Row, compare, env_diff

HERE = Path(__file__).resolve().parent


def fmt_value(metric: str, v) -> str:
    if v is None:
        return "—"
    return fmt_gib(v) if metric.endswith("_bytes") else fmt_count(v, "FLOP" if metric == "flops_per_step" else "")


def fmt_change(metric: str, old, new, pct) -> str:
    """'+0.50 GiB (+1.2%)' for bytes ('+512 B' when under a MiB, so an exact move never reads 0)."""
    if pct is None:
        return "—"
    if old == new:
        return "="
    rel = f"{pct:+.1f}%" if math.isfinite(pct) else "new"
    if metric.endswith("_bytes"):
        delta = new - old
        text = f"{delta:+,d} B" if abs(delta) < 2**20 else f"{fmt_gib(delta, signed=True)} GiB"
        return f"{text} ({rel})"
    return rel


def csv_text(rows: list[Row]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = [f"{m}_{s}" for m in METRICS for s in ("old", "new", "change_pct")]
    w.writerow(["group", "cell", "presence", "moved", "why", "status_old", "status_new", *cols,
                "verdicts_old", "verdicts_new", "verdict_changes", "inputs_differ"])
    for r in rows:
        vals = []
        for m in METRICS:
            a, b, pct = r.values[m]
            vals += [_csv(a), _csv(b), "" if pct is None else (f"{pct:.4f}" if math.isfinite(pct) else str(pct))]
        w.writerow([r.group, r.cell, r.presence, bool(r.moved), "; ".join(r.moved),
                    (r.old or {}).get("status", ""), (r.new or {}).get("status", ""), *vals,
                    _verdicts(r.old), _verdicts(r.new), "; ".join(f"{g}: {a} -> {b}" for g, a, b in r.verdict_changes),
                    "; ".join(r.inputs_differ)])
    return buf.getvalue()


def _csv(v) -> str:
    return "" if v is None else repr(v) if isinstance(v, float) else str(v)


def _verdicts(rec) -> str:
    return " ".join(f"{g}:{v}" for g, v in sorted(((rec or {}).get("verdicts") or {}).items()))


def render(old, new, rows, problems, notes, args) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(fmt_value=fmt_value, fmt_change=fmt_change)
    groups: dict[str, list] = {}
    for r in rows:
        if not r.moved and r.presence == "both":
            groups.setdefault(r.group, []).append(r)
    return env.get_template("versus.html.j2").render(
        old=str(args.old), new=str(args.new), only=args.only, group_by=args.group_by,
        env_rows=env_diff(old, new), problems=problems, notes=notes,
        moved=[r for r in rows if r.moved], groups=sorted(groups.items()),
        added=[r for r in rows if r.presence == "added"], removed=[r for r in rows if r.presence == "removed"],
        n_both=sum(r.presence == "both" for r in rows), categories=record.CATEGORIES, gib=GIB,
        band=noise.CPU_THROUGHPUT_BAND, built_at=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.versus", description=__doc__.splitlines()[0])
    ap.add_argument("old", help="results folder (cells/*.json): the before / the reference")
    ap.add_argument("new", help="results folder (cells/*.json): the after")
    ap.add_argument("--out", required=True, help="folder for versus.html and versus.csv")
    ap.add_argument("--only", action="append", help="compare only cells whose id contains this (repeatable)")
    ap.add_argument("--group-by", default="group", help="group, model, gpu, mode, technique or cell; "
                    "comma-joined for several (as pytest-benchmark compare --group-by); default: group (the study)")
    ap.add_argument("--fail-on-move", action="store_true", help="exit 1 when a cell moved beyond tolerance")
    args = ap.parse_args(argv)
    old, new = results.read(args.old, args.only), results.read(args.new, args.only)
    try:
        rows, problems = compare(old, new, args.group_by)
    except ValueError as exc:
        ap.error(str(exc))
    notes = [f"OLD {n}" for n in old.notes] + [f"NEW {n}" for n in new.notes]
    out = Path(args.out)
    write_text(out / "versus.csv", csv_text(rows))
    write_text(out / "versus.html", render(old, new, rows, problems, notes, args))
    moved = [r for r in rows if r.moved]
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    state = "INCOMPLETE" if problems else "complete"
    print(f"{out / 'versus.html'}: {state}; {sum(r.presence == 'both' for r in rows)} cells compared, "
          f"{len(moved)} moved beyond tolerance, {sum(bool(r.verdict_changes) for r in rows)} with a verdict change",
          file=sys.stderr)
    for r in moved:
        print(f"  moved {r.cell}: {'; '.join(r.moved)}", file=sys.stderr)
    if problems:
        return 2
    return 1 if moved and args.fail_on_move else 0


if __name__ == "__main__":
    sys.exit(main())
