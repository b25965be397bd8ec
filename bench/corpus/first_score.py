"""A held-out row's first score, written into the corpus once, when the row is first scored. Torch-free.

    python -m bench.corpus.scoreboard results/published/cells/*.json --out ... --record-first-scores

A held-out row (``role: held-out``) enters the corpus without ``first_score``; the first scoreboard run
with ``--record-first-scores`` writes ft-membench's answer for it then: the signed error in
percent (null where the row is no measured peak or was not covered), the figure compared, the
verdict on the row's GPU, the engine digest of the code that made the record (the record's
``versions.ft_membench_engine``, else this checkout's ``bench.cells.inputs.engine_digest()``) and
the date. A row that has a first score keeps it: later runs show today's score beside it
(bench/corpus/board.first_scores), so a change of the model cannot rewrite what it first said.

The file is edited as text (one line inserted after the row's ``role: held-out`` line), so the
rest of the corpus keeps its layout and comments; the result is loaded and validated again.
"""
from __future__ import annotations

import datetime
import re
from pathlib import Path

from bench.corpus import published


def entry(scored_row: dict, ours: str, digest: str, date: str) -> dict:
    """The first_score mapping of one scored held-out row."""
    answer = scored_row["tools"].get(ours, {})
    err = answer.get("signed_error")
    nbytes = answer.get("predicted_bytes")
    return {"error_pct": None if err is None else round(100 * err, 2),
            "predicted_gib": None if nbytes is None else round(nbytes / 2**30, 3),
            "verdict": answer.get("verdict"),
            "engine_digest": scored_row.get("engine_digest") or digest, "date": date}


def _flow(first: dict) -> str:
    def v(x):
        return "null" if x is None else f"'{x}'" if isinstance(x, str) else repr(x)
    return "{" + ", ".join(f"{k}: {v(x)}" for k, x in first.items()) + "}"


def record(path, scored: list[dict], ours: str, *, digest: str | None = None, date: str | None = None) -> list[str]:
    """Write a first score into each held-out row of ``path`` that has none; the ids written."""
    path = Path(path)
    if digest is None:
        from bench.cells import inputs
        digest = inputs.engine_digest()
    date = date or datetime.date.today().isoformat()
    rows = {r.id: r for r in published.load(path)}
    todo = [s for s in scored if (row := rows.get(s["row"])) is not None and row.role == "held-out"
            and row.first_score is None]
    if not todo:
        return []
    lines = path.read_text().split("\n")
    for s in todo:
        start = next(i for i, line in enumerate(lines) if re.fullmatch(rf"- id: ['\"]?{re.escape(s['row'])}['\"]?", line))
        role = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("  role:"))
        lines.insert(role + 1, f"  first_score: {_flow(entry(s, ours, digest, date))}")
    text = "\n".join(lines)
    tmp = path.with_name(path.name + ".first-score.tmp")
    tmp.write_text(text)
    try:
        published.load(tmp)       # refuse to write a corpus that no longer validates
    finally:
        tmp.unlink()
    from bench.records import atomic
    atomic.write_text(path, text)
    return [s["row"] for s in todo]
