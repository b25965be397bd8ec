"""Render the cell table into ONE self-contained HTML report.

    python -m report.build results/table.csv --out results/report.html [--fits results/fits.csv]
                           [--published results/published/table.csv]

Input: the CSV written by ``python -m report.table`` (any such table: the run's, or
results/reference/'s), with its manifest beside it. A table that is cut short, ragged,
corrupt or does not match its manifest is refused: exit status 2 and a message naming the
file and the problem, no report written. Output: one HTML file with its CSS and a few lines of vanilla JS inline
(filters by model, GPU and mode; sortable columns) and its charts as base64 PNG data URIs:
nothing is fetched, it reads offline and can be mailed around. It is made from
report/template.html.j2 with autoescape on (a record's text is shown as text, never run as
markup); the script reads nothing from the records but the escaped data-* attributes.

The page opens with the answer (report/lookup.py: per model and GPU, what fits, the headroom,
the largest sequence and batch when ``--fits`` gives the fits search, the estimated speed) and
what the numbers leave out (report/scope.py). Then a list of sections (report/sections.py, recommend.py, claims.py).
``MODE_SECTIONS`` are drawn once per mode (cpu, cuda, sim are never mixed in one table or
chart), ``PAGE_SECTIONS`` once after them. A section function returns a dict whose ``kind``
names the template macro that draws it (or None to draw nothing): a new section is one
function and one macro.

``--published`` gives the table of the published corpus's sim cells (``snakemake published``:
results/published/table.csv, with its manifest). Only the scoreboard section ("How close is each
tool to published GPU measurements") reads it, so those cells stay out of the summary, effects and
lookup of the main table; without it the scoreboard reads the main table's published-* records.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd

from bench.records import atomic, record, seal
from report import GIB, beyond, claims, consistency, effects, lookup, recommend, scope, scoreboard, sections, stages
from report import dataset_epoch as dataset_epoch_section
from report.fits_table import FitsError, read_fits
from report.fmt import fmt_gib, jcol, missing
from report.table import TableError, read_table
from report.timeline import timeline_section

HERE = Path(__file__).resolve().parent
MODE_TITLES = {
    "cuda": "CUDA: measured on the GPU",
    "cpu": "CPU: measured in host memory",
    "sim": "Simulated: counted on a simulated step, no device memory used",
}
MODE_SECTIONS = (sections.notes_section, effects.section, sections.summary_section, recommend.section, sections.breakdown_section,
                 sections.pareto_section, sections.fits_section, sections.seqlen_section, sections.steps_section,
                 sections.peers_section, timeline_section, sections.published_section)
PAGE_SECTIONS = (scoreboard.section, beyond.section, stages.section, claims.section, sections.unreadable_section)


def footer(df: pd.DataFrame, commit: str, built_at: str) -> dict:
    """Versions and machine facts as found in the records (several values if they differ)."""
    def collect(column):
        seen: dict[str, list] = {}
        for text in df[column]:
            try:
                doc = json.loads(text) if text else {}
            except ValueError:
                continue
            for key, value in (doc.items() if isinstance(doc, dict) else []):
                value = value if isinstance(value, str) else json.dumps(value)
                seen.setdefault(key, [])
                if value not in seen[key]:
                    seen[key].append(value)
        return [(k, ", ".join(v)) for k, v in sorted(seen.items())]
    made = sorted({str(c) for c in df["record_commit"] if c}) if "record_commit" in df.columns else []
    return {"versions": collect("versions"), "machine": collect("machine"), "commit": commit, "built_at": built_at,
            "record_commits": made}


def git_commit(cwd=HERE) -> str:
    """The commit the page is built at: HEAD of the repository holding ``cwd`` (12 hex digits),
    with " (dirty)" where tracked files differ from it, so the page never names an older
    commit than the code that built it; "unknown" outside a repository."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0 or not head.stdout.strip():
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + (" (dirty)" if dirty.returncode != 0 or dirty.stdout.strip() else "")


def filters(df: pd.DataFrame, modes: list[str]) -> dict:
    """The values the page's filter menus offer: models, GPUs (the sim verdicts' included), modes."""
    caps: dict[str, int | None] = {}
    for _, r in df.iterrows():
        if r["gpu"] and r["mode"] != "sim":
            caps.setdefault(r["gpu"], None if missing(r["gpu_memory_bytes"]) else int(r["gpu_memory_bytes"]))
        if r["mode"] == "sim":
            for g, b in (jcol(r, "verdict_gpu_memory_bytes") or {}).items():
                caps[g] = b if isinstance(b, int) else caps.get(g)
            caps.update({g: caps.get(g) for g in jcol(r, "verdicts") or {}})
    gpus = [(g, f"{g} · {fmt_gib(b)} GiB" if b else g) for g, b in sorted(caps.items()) if g != "sim"]
    return {"models": [(m, m) for m in sorted({m for m in df["model"] if m})], "gpus": gpus,
            "modes": [(m, m) for m in modes]}


MODE_ORDER = ("cuda", "sim", "cpu")   # full-size answers before the small-model CPU evidence


def render(df: pd.DataFrame, commit: str | None = None, built_at: str | None = None,
           fits: pd.DataFrame | None = None, published: pd.DataFrame | None = None, dataset_epoch=None,
           dataset_hostload=None) -> str:
    """The whole page as one HTML string (``fits``: the fits search's table, or None; ``published``:
    the published corpus's cell table, read by the scoreboard section alone, or None)."""
    present = [m for m in df["mode"].unique() if m]
    modes = [m for m in MODE_ORDER if m in present] + [m for m in record.MODES if m in present and m not in MODE_ORDER]
    modes = modes + sorted(m for m in present if m not in record.MODES)
    mode_blocks = [{"mode": m, "title": MODE_TITLES.get(m, f"{m} mode"),
                    "sections": [s for s in (f(stages.train_rows(df), m) for f in MODE_SECTIONS) if s]} for m in modes]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson_attr"] = lambda v: json.dumps(list(v))   # then autoescaped into the attribute
    return env.get_template("template.html.j2").render(
        gib=GIB, n_cells=len(df), answer=lookup.section(df, fits), scope=scope.section(df, fits),
        statuses=df["status"].value_counts().to_dict(),
        modes=mode_blocks, sections=[s for s in (*(_page_section(f, df, published) for f in PAGE_SECTIONS),
                                                  dataset_epoch_section.section(dataset_epoch, dataset_hostload),
                                                  consistency.section(df, fits)) if s],
        filters=filters(df, modes),
        footer=footer(df, commit or git_commit(),
                      built_at or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
    )


def _page_section(f, df: pd.DataFrame, published: pd.DataFrame | None):
    if f is scoreboard.section and published is not None:
        return f(published)
    return f(df)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.build", description=__doc__.splitlines()[0])
    ap.add_argument("table", help="the CSV written by python -m report.table")
    ap.add_argument("--out", required=True, help="HTML file to write (atomically)")
    ap.add_argument("--fits", help="the fits search's CSV (results/fits.csv); without it the lookup's "
                                   "sequence and batch columns read 'not searched'")
    ap.add_argument("--dataset-epoch", help="the dataset study (results/dataset/epoch.json, bench/dataset/study.py): "
                                            "its section; without it the section is left out")
    ap.add_argument("--dataset-hostload", help="the load paths' host memory (results/dataset/hostload.json, "
                                               "bench/dataset/hostload.py), shown in the dataset section")
    ap.add_argument("--published", help="the published corpus's cell table (results/published/table.csv, "
                                        "snakemake published): read by the scoreboard section only")
    args = ap.parse_args(argv)
    for path in filter(None, (args.table, args.fits, args.published, args.dataset_epoch, args.dataset_hostload)):
        if why := seal.problem(path):   # a published input edited after it was sealed (bench/records/seal.py)
            print(f"report.build: error: {why}", file=sys.stderr)
            return 2
    try:
        df = read_table(args.table)
        fits = read_fits(args.fits) if args.fits else None
        published = read_table(args.published) if args.published else None
    except (TableError, FitsError) as exc:  # a cut or corrupt table must not become a report that looks whole
        print(f"report.build: error: {exc}", file=sys.stderr)
        return 2
    html = render(df, fits=fits, published=published, dataset_epoch=args.dataset_epoch,
                  dataset_hostload=args.dataset_hostload)
    try:
        atomic.write_text(args.out, html)
    except OSError as exc:  # a full disk: one line naming the file, no partial page (atomic.py)
        print(f"report.build: error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {len(df)} cells", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
