"""Held-out rows: a row added after the model was built enters as ``role: held-out``;
its first score is written into the corpus once, with the engine digest and the date, and the
scoreboard shows it beside today's, in the held-out table, never pooled with development rows.

    python -m pytest tests/test_heldout.py
"""
from __future__ import annotations

import json

import yaml

from bench.corpus import board, first_score, published
from bench.corpus import published_matrix as pm
from bench.corpus import scoreboard as sb
from tests.test_published_corpus import own_run_row

GIB = 2**30
QLORA_ROW = "tt-8b-qlora-4090"


def _corpus(tmp_path, *extra) -> str:
    doc = yaml.safe_load(published.DEFAULT.read_text())
    doc["rows"] = [r for r in doc["rows"] if r["id"] == QLORA_ROW] + list(extra)
    path = tmp_path / "corpus.yaml"
    path.write_text("# a comment that stays\n" + yaml.safe_dump(doc, sort_keys=False, width=200))
    return path


def _held_out_qlora() -> dict:
    row = dict(yaml.safe_load(published.DEFAULT.read_text())["rows"][4])   # tt-8b-qlora-4090
    assert row["id"] == QLORA_ROW
    # LoRA options come by id prefix (bench/corpus/published_matrix.LORA_OPTIONS): tt-8b-: torchtune's rank 8
    row.update(id="tt-8b-qlora-4090-own", role="held-out", source="ft-membench cuda run: results/own/cells",
               source_kind="own-run", read_at="2026-12-01", value=8.0, unit="GiB", value_gib=8.0,
               measure="allocated")
    return row


def _record(cell, peak, verdict="fits", engine="feedc0ffee123456"):
    return {"cell": cell, "status": "ok", "reason": "", "peak_bytes": peak, "modelled_reserved_peak_bytes": peak,
            "verdicts": {"rtx-4090": verdict}, "details": {"paged_state_bytes": 0},
            "allocator_model": {}, "versions": {"ft_membench_engine": engine}}


def test_first_score_is_written_once_and_shown_beside_todays(tmp_path):
    held = _held_out_qlora()
    path = _corpus(tmp_path, held)
    rows = published.load(path)
    cell = next(e["cell"] for e in pm.plan(rows) if e["row"] == held["id"])
    scored = sb.score(rows, {cell: _record(cell, int(8.4 * GIB))})
    assert first_score.record(path, scored, sb.OURS, date="2026-12-02") == ["tt-8b-qlora-4090-own"]
    text = path.read_text()
    assert text.startswith("# a comment that stays\n")
    first = {r.id: r for r in published.load(path)}["tt-8b-qlora-4090-own"].first_score
    assert first.model_dump(exclude_unset=True) == {"error_pct": 5.0, "predicted_gib": 8.4, "verdict": "fits",
                     "engine_digest": "feedc0ffee123456", "date": "2026-12-02"}
    # the model changes: today's score moves, the first stays, and a second run writes nothing
    rows = published.load(path)
    later = sb.score(rows, {cell: _record(cell, int(7.6 * GIB), engine="0000aaaa1111bbbb")})
    assert first_score.record(path, later, sb.OURS, date="2026-12-09") == []
    shown = {r["row"]: r for r in board.first_scores(later, sb.OURS)}["tt-8b-qlora-4090-own"]
    assert (shown["first_error_pct"], shown["error_pct"], shown["first_engine_digest"]) == (5.0, -5.0, "feedc0ffee123456")
    md = board.first_scores_markdown(list(shown.values()) and [shown])
    assert "| tt-8b-qlora-4090-own | fits | +5.0% | fits | feedc0ffee123456, 2026-12-02 | -5.0% | fits |" in md
    # held-out figures stand apart from the development row's
    table = {(t["role"], t["tool"], t["measure"]): t for t in sb.summary(later)}
    assert table[("held-out", sb.OURS, "allocated")]["covered"] == 1
    assert ("development", sb.OURS, "allocated") not in table


def test_cli_records_first_scores_and_prints_both_tables(tmp_path, capsys):
    held = _held_out_qlora()
    path = _corpus(tmp_path, held)
    cell = next(e["cell"] for e in pm.plan(published.load(path)) if e["row"] == held["id"])
    rec = tmp_path / "cell.json"
    rec.write_text(json.dumps(_record(cell, 8 * GIB)))
    out = tmp_path / "scoreboard.json"
    assert sb.main([str(rec), "--corpus", str(path), "--out", str(out), "--record-first-scores"]) == 0
    printed = capsys.readouterr().out
    assert "### development rows" in printed and "### held-out rows" in printed
    assert "| tt-8b-qlora-4090-own | fits | +0.0% |" in printed
    doc = json.loads(out.read_text())
    assert {t["role"] for t in doc["summary"]} == {"development", "held-out"}
    assert doc["first_scores"][0]["first_date"]
