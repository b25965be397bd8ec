"""Render the cell table into ONE self-contained HTML report.

    python -m report.build results/table.csv --out results/report.html

Input: the CSV written by ``python -m report.table``. Output: one HTML file with its CSS
inline and its charts as base64 PNG data URIs: nothing is fetched, it reads offline and can be
mailed around. It is made from report/template.html.j2 with autoescape on (a record's text is
shown as text, never run as markup).

The page is a list of sections. ``MODE_SECTIONS`` are drawn once per mode (cpu, cuda, sim are
never mixed in one table or chart), ``PAGE_SECTIONS`` once after them. A section function
returns a dict whose ``kind`` names the template block that draws it (or None to draw
nothing): a new section is one function here and one block in the template.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import jinja2
import pandas as pd

from bench import record, techniques
from report import GIB, plots
from report.table import read_table, write_atomic_text

HERE = Path(__file__).resolve().parent
DASH = "—"                       # not measured (or not comparable): never shown as 0
MINUS = "\N{MINUS SIGN}"
DIFFICULTY_ORDER = ("low", "medium", "high")
MODE_TITLES = {
    "cuda": "CUDA: measured on the GPU",
    "cpu": "CPU: measured in host memory",
    "sim": "Simulated: counted on a simulated step, no device memory used",
}


# ---- formatting: every number passes through here, so a missing one is always a dash ----

def missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or v == ""


def fmt_gib(nbytes, signed: bool = False) -> str:
    if missing(nbytes):
        return DASH
    gib = float(nbytes) / GIB
    mag = abs(gib)
    text = "0" if mag == 0 else "<0.001" if mag < 0.001 else f"{mag:.3f}" if mag < 1 else f"{mag:,.2f}"
    sign = MINUS if gib < 0 else ("+" if signed and gib > 0 else "")
    return sign + text


def fmt_pct(value, signed: bool = False) -> str:
    if missing(value):
        return DASH
    sign = MINUS if value < 0 else ("+" if signed and value > 0 else "")
    return f"{sign}{abs(value):.1f}%"


def tone(value, higher_is_better: bool = True) -> str:
    """CSS class for a change: 'better', 'worse' or '' (none, or not measured)."""
    if missing(value) or value == 0:
        return ""
    return "better" if (value > 0) == higher_is_better else "worse"


# ---- technique metadata (the catalogue) and comparison with the baseline ----

def technique_meta(technique: str) -> dict:
    """The catalogue's metadata for a '+' combination, each part looked up and joined."""
    parts = [p for p in technique.split("+") if p]
    metas, unknown = [], []
    for name in parts:
        try:
            metas.append(techniques.lookup(name))
        except KeyError:
            unknown.append(name)

    def joined(attr):
        said = [(t.name, getattr(t, attr)) for t in metas if getattr(t, attr) not in ("-", "")]
        if len(said) == 1 and len(parts) == 1:
            return said[0][1]
        return "; ".join(f"{name}: {text}" for name, text in said) or DASH

    saves = [s.strip() for t in metas for s in t.saves.split(",") if s.strip() not in ("-", "")]
    levels = [t.difficulty for t in metas]
    difficulty = max(levels, key=lambda d: DIFFICULTY_ORDER.index(d) if d in DIFFICULTY_ORDER else -1) if levels else DASH
    return {
        "summary": "; ".join(t.summary for t in metas) + (f"; unknown: {', '.join(unknown)}" if unknown else ""),
        "saves": ", ".join(dict.fromkeys(saves)) or DASH,
        "expected": joined("expected"),
        "overhead": joined("overhead"),
        "difficulty": "unknown" if unknown else difficulty,
    }


def baseline_of(row: pd.Series, df: pd.DataFrame):
    """The baseline row to compare ``row`` with: its ``baseline_cell`` if that is in the table,
    else the cell with technique 'baseline' and the same model, gpu and mode; or None."""
    if row["baseline_cell"]:
        hit = df[df["cell"] == row["baseline_cell"]]
        if len(hit):
            return hit.iloc[0]
    hit = df[(df["technique"] == "baseline") & (df["model"] == row["model"])
             & (df["gpu"] == row["gpu"]) & (df["mode"] == row["mode"])]
    return hit.iloc[0] if len(hit) else None


def main_saving(row, base) -> str:
    """The measured breakdown category that shrank most against the baseline."""
    cols = [f"{c}_bytes" for c in record.CATEGORIES]
    if base is None or any(missing(row[c]) or missing(base[c]) for c in cols):
        return DASH
    shrink = {c: int(base[f"{c}_bytes"]) - int(row[f"{c}_bytes"]) for c in record.CATEGORIES}
    cat = max(shrink, key=shrink.get)
    return f"{cat} ({MINUS}{fmt_gib(shrink[cat])} GiB)" if shrink[cat] > 0 else "nothing shrank"


def change_pct(value, ref):
    if missing(value) or missing(ref) or float(ref) == 0:
        return None
    return (float(value) / float(ref) - 1) * 100


def summary_row(row: pd.Series, df: pd.DataFrame) -> dict:
    """One line of a summary table: the catalogue's claims next to what this cell measured."""
    ok = row["status"] == "ok"
    is_ref = ok and row["technique"] == "baseline"
    base = baseline_of(row, df)
    comparable = ok and not is_ref and base is not None and base["status"] == "ok"
    saved = saved_pct = speed = None
    if comparable and not (missing(base["peak_bytes"]) or missing(row["peak_bytes"])):
        saved = int(base["peak_bytes"]) - int(row["peak_bytes"])
        pct = change_pct(row["peak_bytes"], base["peak_bytes"])
        saved_pct = None if pct is None else -pct
    # sim steps are not timed: compare FLOPs per step there (going up is a cost), tokens/s elsewhere.
    speed_key = "flops_per_step" if row["mode"] == "sim" else "tokens_per_s"
    if comparable:
        speed = change_pct(row[speed_key], base[speed_key])
    if ok and row["mode"] == "sim" and (missing(row[speed_key]) or (speed is None and not is_ref)):
        speed_text = "not measured"
    else:
        speed_text = "reference" if is_ref else fmt_pct(speed, signed=True)
    return {
        "cell": row["cell"], "technique": row["technique"] or DASH, **technique_meta(row["technique"]),
        "measured": "reference" if is_ref else main_saving(row, base) if comparable else DASH,
        "peak": fmt_gib(row["peak_bytes"]) if ok else DASH,
        "saved": "reference" if is_ref else fmt_gib(saved),
        "saved_pct": "" if is_ref else fmt_pct(saved_pct),
        "saved_tone": tone(saved),
        "speed": speed_text, "speed_tone": tone(speed, higher_is_better=row["mode"] != "sim"),
        "status": row["status"] or "error", "reason": row["reason"],
        "provenance": row["provenance"] or record.PROVENANCE.get(row["mode"], DASH),
        "is_baseline": row["technique"] == "baseline",
    }


def group_title(rows: pd.DataFrame) -> tuple[str, str]:
    """('model · gpu', 'batch 4 × seq 512 · device capacity 80.00 GiB') for one group,
    read from its first row (the baseline, when there is one)."""
    first = rows.iloc[0]
    title = first["model"] if first["mode"] == "sim" else f"{first['model']} · {first['gpu']}"
    facts = []
    if not missing(first["batch_size"]) and not missing(first["seq_len"]):
        facts.append(f"batch {first['batch_size']} × seq {first['seq_len']}")
    if not missing(first["gpu_memory_bytes"]):
        facts.append(f"device capacity {fmt_gib(first['gpu_memory_bytes'])} GiB")
    return title, " · ".join(facts)


# ---- sections ----

def summary_section(df: pd.DataFrame, mode: str):
    rows = df[df["mode"] == mode]
    groups = []
    for (_model, _gpu), g in rows.groupby(["model", "gpu"], sort=True):
        g = g.sort_values("technique", key=lambda s: s != "baseline", kind="stable")
        title, facts = group_title(g)
        groups.append({"title": title, "facts": facts, "rows": [summary_row(r, df) for _, r in g.iterrows()]})
    speed = "FLOPs/step vs baseline" if mode == "sim" else "throughput vs baseline"
    return {"kind": "summary", "title": "Summary", "speed_header": speed, "groups": groups}


def breakdown_section(df: pd.DataFrame, mode: str):
    long = plots.breakdown_long(df[df["mode"] == mode])
    section = {"kind": "chart", "title": "Peak memory by category",
               "caption": "Peak GiB per technique, the six breakdown categories stacked; "
                          "one panel per model. Cells that did not finish have no bar.",
               "image": None, "alt": f"stacked bar chart of peak memory per technique, {mode} mode"}
    if len(long):
        section["image"] = plots.data_uri(plots.png(plots.breakdown_figure(long)))
    return section


def unreadable_section(df: pd.DataFrame):
    rows = df[df["mode"] == ""]
    if not len(rows):
        return None
    return {"kind": "failures", "title": "Results that could not be read",
            "rows": [{"cell": r["cell"], "status": r["status"], "reason": r["reason"]} for _, r in rows.iterrows()]}


MODE_SECTIONS = (summary_section, breakdown_section)
PAGE_SECTIONS = (unreadable_section,)


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
    return {"versions": collect("versions"), "machine": collect("machine"), "commit": commit, "built_at": built_at}


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def render(df: pd.DataFrame, commit: str | None = None, built_at: str | None = None) -> str:
    """The whole page as one HTML string."""
    present = [m for m in df["mode"].unique() if m]
    modes = [m for m in record.MODES if m in present] + sorted(m for m in present if m not in record.MODES)
    mode_blocks = [{"mode": m, "title": MODE_TITLES.get(m, f"{m} mode"),
                    "sections": [s for s in (f(df, m) for f in MODE_SECTIONS) if s]} for m in modes]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("template.html.j2").render(
        gib=GIB, n_cells=len(df), statuses=df["status"].value_counts().to_dict(),
        modes=mode_blocks, sections=[s for s in (f(df) for f in PAGE_SECTIONS) if s],
        footer=footer(df, commit or git_commit(),
                      built_at or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.build", description=__doc__.splitlines()[0])
    ap.add_argument("table", help="the CSV written by python -m report.table")
    ap.add_argument("--out", required=True, help="HTML file to write (atomically)")
    args = ap.parse_args(argv)
    df = read_table(args.table)
    write_atomic_text(args.out, render(df))
    print(f"{args.out}: {len(df)} cells", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
