"""How much of the published corpus is simulated, and why the rest is not, per role. Torch-free.

    cov = coverage(rows)            # rows: bench.corpus.published.load()
    print(markdown(cov))

A row is simulated when bench/corpus/published_matrix.plan gives it a cell. Every other row carries
its ``gap`` (bench/corpus/published.py checks it against its two lists):

- ``source``: the source does not state what a simulation needs (the model, the GPU, the batch,
  the length, or a setting that moves memory). No tool can simulate it as published;
- ``ours``: the source states what ran, and ft-membench lacks a model config, a GPU profile or a
  technique. This is the project's own debt;
- ``both``.

``lacks`` counts what we lack, by kind (the text before the first colon of each ``lacks_ours``
entry: "model config", "GPU profile", "technique", ...), over the rows that are not simulated.
"""
from __future__ import annotations

from collections import Counter

from bench.corpus import board, published, published_matrix
from bench.corpus.row import Row

GAPS = tuple(published.GAPS)  # source, ours, both: the loader's one list
GAP_WORDS = {"source": "the source does not state what ran", "ours": "ft-membench lacks what it ran",
             "both": "the source does not state all it ran, and ft-membench lacks some of it"}


def coverage(rows: list[Row]) -> dict:
    """{"roles": [{role, rows, simulated, source, ours, both, unclassified}, ...] plus an "all" entry,
    "lacks": [(kind, rows), ...] most frequent first}. ``unclassified``: not simulated and no gap
    (the corpus test allows none)."""
    simulated = {e["row"] for e in published_matrix.plan(rows) if e["reason"] is None}
    out = []
    for role in (*board.ROLES, "all"):
        mine = [r for r in rows if role == "all" or r.role == role]
        entry = {"role": role, "rows": len(mine), "simulated": 0, "unclassified": 0, **{g: 0 for g in GAPS}}
        for row in mine:
            if row.id in simulated:
                entry["simulated"] += 1
            else:
                entry[row.gap or "unclassified"] += 1
        out.append(entry)
    kinds = Counter()
    for row in rows:
        if row.id not in simulated:
            kinds.update({item.split(":")[0].strip() for item in row.lacks_ours or []})
    return {"roles": out, "lacks": kinds.most_common()}


def share(n: int, total: int) -> str:
    return f"{n} ({n / total:.0%})" if total else "0"


def markdown(cov: dict) -> str:
    lines = ["| rows | total | simulated | not simulated: the source does not state what ran | "
             "not simulated: ft-membench lacks a model, GPU or technique | both |",
             "|---|---|---|---|---|---|"]
    for e in cov["roles"]:
        n = e["rows"]
        lines.append(f"| {e['role']} | {n} | {share(e['simulated'], n)} | {share(e['source'], n)} | "
                     f"{share(e['ours'], n)} | {share(e['both'], n)} |")
    lacks = ", ".join(f"{kind} {n}" for kind, n in cov["lacks"]) or "nothing"
    return "\n".join(lines) + f"\n\nWhat ft-membench lacks, in rows not simulated: {lacks}."
