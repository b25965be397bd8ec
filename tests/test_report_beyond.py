"""The report's list of what ft-membench does not simulate yet, as others measured it (report/beyond.py): every
corpus row marked with a stage or parallelism, once, under its first kind, as published, with no figure of ours."""
from __future__ import annotations

import pandas as pd

from bench.corpus import published
from report import beyond


def test_every_marked_row_stands_once_under_its_first_kind_as_published():
    section = beyond.section(pd.DataFrame())
    marked = {r.id: r for r in published.load() if r.beyond}
    shown = [(g["kind"], r) for g in section["groups"] for r in g["rows"]]
    assert sorted(r["row"] for _, r in shown) == sorted(marked)
    for kind, r in shown:
        row = marked[r["row"]]
        assert kind == beyond.WORDS[row.beyond[0]] and r["outcome"] == row.outcome
        assert f"{row.value:g} {row.unit}" in r["figure"]
        assert ("the card" in r["figure"]) == (row.value_kind != "peak")   # a card is no peak
        assert r["url"].startswith("https://")
    assert "no figure of ours" in section["note"]
    assert not any(k in r for _, r in shown for k in ("ours", "error", "predicted"))
