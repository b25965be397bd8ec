"""Which answers moved between two results folders: every verdict and every largest-shape answer
a person reads on the answer page, before and after. Torch-free.

    python -m report.answers_moved OLD NEW --out FILE.csv [--markdown FILE.md]
    python -m report.answers_moved --dump FOLDER --out ANSWERS.json   # a folder's answers, as this code reads them

OLD may be such an ANSWERS.json: a folder's answers read by the code that made its records. Where the
record contract itself changed, the new code refuses the old records (a row "unreadable"), so the old
side is read by the old checkout (``--dump``, or ``_answers`` there) and compared here.

OLD and NEW each hold ``cells/<cell>.json`` (the run record in ``benchmarks[0].extra_info``)
and ``fits.csv``. One row per (cell, GPU) whose answer differs: the verdict (sim: per GPU;
cpu/cuda: the status), the need (sim: the modelled reserved peak + the CUDA reserve + a rank's NCCL
buffers on that GPU, as the page and the CLI print it; cpu/cuda: the modelled reserved peak), the largest sequence at batch 1 and the
largest batch at the study's length. A cell or GPU on one side only is a row too ("absent").
Records are read through bench.records.results (the contract check every reader uses); a file that
fails it is a row saying so, never a silent gap.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path

from bench.records.stated import need_bytes
from bench.records import atomic, results

GIB = 2**30
ABSENT = "absent"
FIELDS = ("cell", "gpu", "verdict_old", "verdict_new", "need_gib_old", "need_gib_new",
          "max_seq_old", "max_seq_new", "max_batch_old", "max_batch_new")


def _answers(folder: Path) -> dict:
    """{(cell, gpu): {verdict, need_gib, max_seq, max_batch}} of one results folder, or of an answers file
    that ``--dump`` wrote."""
    if folder.is_file():
        try:
            return {(r["cell"], r["gpu"]): {k: r[k] for k in ("verdict", "need_gib", "max_seq", "max_batch")}
                    for r in json.loads(folder.read_text())["answers"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise Unreadable(f"{folder}: not an answers file of --dump: {type(exc).__name__}: {exc}") from None
    rs = results.read(folder)
    out: dict = {}
    for cell, rec in rs.records.items():
        need = rec.get("modelled_reserved_peak_bytes")
        need = "" if need is None else f"{need / GIB:.2f}"
        verdicts = rec.get("verdicts") or {}
        if rec.get("mode") == "sim" and verdicts:
            for gpu, v in verdicts.items():  # the need as the answer page and the CLI print it, on this GPU
                n, _ = need_bytes(rec, gpu)
                out[(cell, gpu)] = {"verdict": v, "need_gib": "" if n is None else f"{n / GIB:.2f}", "max_seq": "",
                                    "max_batch": ""}
        else:
            out[(cell, rec.get("gpu") or "")] = {"verdict": rec.get("status", "?"), "need_gib": need,
                                                 "max_seq": "", "max_batch": ""}
    for p in rs.problems:  # a file that fails the contract is a row saying so
        out[(p.where, "")] = {"verdict": f"unreadable: {p.message}", "need_gib": "", "max_seq": "", "max_batch": ""}
    fits = folder / "fits.csv"
    if fits.is_file():
        try:
            with open(fits, newline="", encoding="utf-8") as fh:
                for r in csv.DictReader(fh):
                    a = out.setdefault((r["cell"], r["gpu"]), {"verdict": ABSENT, "need_gib": "", "max_seq": "",
                                                                "max_batch": ""})
                    a["max_seq"] = _said(r.get("seq_answer"), r.get("max_seq_at_batch1"))
                    a["max_batch"] = _said(r.get("batch_answer"), r.get("max_batch_at_seq"))
        except UnicodeDecodeError as exc:   # the largest-shape answers cannot be compared: refused, not skipped
            raise Unreadable(f"{fits}: not UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None
        except (OSError, csv.Error, KeyError, TypeError, ValueError) as exc:
            raise Unreadable(f"{fits}: cannot be read as the fits table: {type(exc).__name__}: {exc}") from None
    return out


class Unreadable(ValueError):
    """A folder's fits.csv that cannot be read: one line naming the file and why."""


def _said(answer, value) -> str:
    if answer == "fits" and value:
        return str(int(float(value)))
    return answer or ""


def moved(old: Path, new: Path) -> list[dict]:
    a, b = _answers(old), _answers(new)
    empty = {"verdict": ABSENT, "need_gib": "", "max_seq": "", "max_batch": ""}
    rows = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, empty), b.get(key, empty)
        if (x["verdict"], x["max_seq"], x["max_batch"]) == (y["verdict"], y["max_seq"], y["max_batch"]):
            continue
        rows.append({"cell": key[0], "gpu": key[1], "verdict_old": x["verdict"], "verdict_new": y["verdict"],
                     "need_gib_old": x["need_gib"], "need_gib_new": y["need_gib"],
                     "max_seq_old": x["max_seq"], "max_seq_new": y["max_seq"],
                     "max_batch_old": x["max_batch"], "max_batch_new": y["max_batch"]})
    return rows


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def to_markdown(rows: list[dict], old: str, new: str) -> str:
    lines = [f"# Answers that moved: {old} -> {new}", "",
             f"{len(rows)} (cell, GPU) answers differ in verdict, largest sequence at batch 1 or largest batch.", "",
             "| cell | GPU | verdict | need GiB | largest seq at batch 1 | largest batch |", "|---|---|---|---|---|---|"]
    for r in rows:
        def pair(k):
            return f"{r[k + '_old'] or '-'} -> {r[k + '_new'] or '-'}"
        lines.append(f"| {r['cell']} | {r['gpu']} | {pair('verdict')} | {pair('need_gib')} | {pair('max_seq')} | "
                     f"{pair('max_batch')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.answers_moved", description=__doc__.splitlines()[0])
    ap.add_argument("old", nargs="?")
    ap.add_argument("new", nargs="?")
    ap.add_argument("--out", required=True, help="CSV to write (with --dump: the answers JSON)")
    ap.add_argument("--markdown", help="the same as a Markdown table")
    ap.add_argument("--dump", help="write this folder's answers as JSON (--out) instead of comparing two")
    args = ap.parse_args(argv)
    if args.dump:
        if not (Path(args.dump) / "cells").is_dir():
            print(f"report.answers_moved: {args.dump}: no cells/ folder", file=sys.stderr)
            return 2
        try:
            answers = _answers(Path(args.dump))
        except Unreadable as exc:
            print(f"report.answers_moved: {exc}", file=sys.stderr)
            return 2
        atomic.write_text(args.out, json.dumps({"folder": args.dump, "answers": [
            dict(cell=c, gpu=g, **a) for (c, g), a in sorted(answers.items())]}, indent=1) + "\n")
        return 0
    if not args.old or not args.new:
        ap.error("OLD and NEW are needed, or --dump FOLDER")
    for folder in (args.old, args.new):
        if not Path(folder).is_file() and not (Path(folder) / "cells").is_dir():
            print(f"report.answers_moved: {folder}: no cells/ folder", file=sys.stderr)
            return 2
    try:
        rows = moved(Path(args.old), Path(args.new))
    except Unreadable as exc:
        print(f"report.answers_moved: {exc}", file=sys.stderr)
        return 2
    atomic.write_text(args.out, to_csv(rows))
    if args.markdown:
        atomic.write_text(args.markdown, to_markdown(rows, args.old, args.new))
    print(f"{args.out}: {len(rows)} answers moved", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
