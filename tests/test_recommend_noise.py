"""Recommendations honour contention and the noise band as the summary and effects tables do: a
timing taken beside other load never ranks "fastest", and in cpu mode a lead inside the run-to-run
noise band is a tie, not a fastest."""
from report import recommend, table
from tests.records import CLAIM_BASE, GIB, M, cpu, made, spec

BUSY = {"timing_load": {"contended": True, "other_cores": 3.0, "own_cores": 1.0}}


def _cuda(techs, tokens, **details):
    return made(spec("m", "rtx-4090", techs), CLAIM_BASE, tokens_per_s=tokens, details=details)


def test_a_contended_timing_is_never_fastest_and_is_said():
    frame = table.to_frame([_cuda(["baseline"], 1000.0), _cuda(["lora"], 5000.0, **BUSY), _cuda(["gc"], 800.0)])
    (r,) = recommend.recommend(frame, "cuda")
    assert r["fastest"]["technique"] == "baseline"
    assert "timed beside other load: lora" in r["fastest_note"]
    row = recommend.section(frame, "cuda")["rows"][0]
    assert row["fastest"].startswith("baseline (left out, timed beside other load: lora")


def test_only_contended_timings_rank_nothing():
    frame = table.to_frame([_cuda(["baseline"], 1000.0, **BUSY), _cuda(["lora"], 5000.0, **BUSY)])
    (r,) = recommend.recommend(frame, "cuda")
    assert r["fastest"] is None and "timed beside other load" in r["fastest_note"]


def test_a_cpu_lead_inside_the_noise_band_is_a_tie():
    frame = table.to_frame([cpu(["baseline"], CLAIM_BASE, tokens_per_s=1000.0),
                            cpu(["gc"], CLAIM_BASE, tokens_per_s=1200.0)])   # +20%: inside ±40%
    (r,) = recommend.recommend(frame, "cpu")
    assert r["fastest"] is None and r["fastest_note"].startswith("no clear fastest: gc, baseline within the noise")
    assert recommend.section(frame, "cpu")["rows"][0]["fastest"].startswith("no clear fastest")


def test_a_contended_fix_is_not_ranked_by_its_timing():
    g, big = "rtx-4090", CLAIM_BASE | {"activations": 10**12}
    frame = table.to_frame([made(spec("m", g, ["baseline"]), big, tokens_per_s=900.0),
                            _cuda(["gc"], 9000.0, **BUSY), _cuda(["bf16"], 800.0)])
    rows = recommend.section(frame, "cuda")["rows"]
    assert "timed beside other load" in rows[0]["fix_overhead"] or rows[0]["fix"] != "gc"
