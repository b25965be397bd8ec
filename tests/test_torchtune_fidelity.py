"""Sim against a published table it was never tuned on: torchtune's Llama-3.2-3B memory table
(README "optimization flags": full fine-tune, batch 2, sequence 4096, one A100, peak active
memory; each flag added to those above). The study is ``sim-torchtune-3b`` in
matrix/default.yaml; its cells carry the published row (``details.published``).

Active memory is allocated memory plus blocks not yet freed on their stream: equal to or a
little above our allocated peak (docs/sim-and-fidelity.md). Each row's signed error
(simulated / published - 1) is printed (``pytest -s``); every row whose settings can be
matched must be within 10%. The others are printed with the reason they cannot be matched
(``UNMATCHED`` below, and the study's ``published.*.unmatched``).

    python -m pytest -s tests/test_torchtune_fidelity.py
"""
import pytest

from bench.cells import matrix
from tests.helpers import TORCHTUNE_3B_NOT_HELD, sim_record

pytestmark = pytest.mark.slow
STUDY = "sim-torchtune-3b"
TOLERANCE = 0.10

# Rows whose settings the table leaves unstated or that sim cannot reproduce, and why.
UNMATCHED = {combo: why["memory"] for combo, why in TORCHTUNE_3B_NOT_HELD.items()}


# Rows held within 10% whose agreement rests on a stated reading, printed beside their error.
NOTES = {
    "bf16+packing+compile+chunked-ce+gc+opt-in-bwd+act-offload+adamw8bit":
        "the closest row (-9.5%): non-paged 8-bit AdamW, the README's own word (LoRA and QLoRA 'do not use "
        "optimizer_in_bwd or AdamW8bit optimizer'); paged states, outside torch's allocator, would save 55% "
        "(the table's author, pytorch/ao#1213) where the row saves 19.6%. About 1.7 GiB of the published "
        "row is not explained; nothing is fitted to it.",
    "lora+bf16+adamw-fused+packing+compile+chunked-ce+gc+act-offload":
        "the table's flags for LoRA are the full rows' but optimizer-in-backward and 8-bit AdamW (its README "
        "says so), bf16 adapters (adapter_dtype: bf16), rank 64 on q/v/output projections and the MLP as its "
        "3B_lora config; its compiled chunk CE keeps the fp32 softmax in inductor's registers "
        "(bench/worker/sim/fusion.py).",
}


@pytest.fixture(scope="module")
def rows():
    """{techniques: (published, the cell's record)} for every cell of the study (the reference's
    where it stands, else simulated: tests/helpers.py ``sim_record``)."""
    cells = [s for s in matrix.load().values() if s["study"] == STUDY and s.get("published")]
    assert len(cells) == 10
    return {"+".join(s["techniques"]): (s["published"], sim_record(s)) for s in cells}


def test_published_rows_within_ten_percent_where_matched(rows):
    failures = []
    print()
    for combo, (pub, out) in rows.items():
        rec = out["details"]["published"]
        assert rec["peak_gib"] == pub["peak_gib"] and rec["source"] == pub["source"]
        assert rec["tokens_per_s"] == pub["tokens_per_s"]  # kept for the speed model
        err = rec["signed_error"]
        why = UNMATCHED.get(combo)
        print(f"{pub['row']:34s} published {pub['peak_gib']:5.1f} GiB  simulated {rec['simulated_peak_gib']:5.1f} GiB"
              f"  error {err:+6.1%}" + (f"  (not held: {why})" if why else f"  ({NOTES[combo]})" if combo in NOTES else ""))
        if why is None and abs(err) > TOLERANCE:
            failures.append(f"{pub['row']}: {err:+.1%}")
    assert not failures, failures


def test_every_unmatched_row_says_why_in_its_record_or_here(rows):
    for combo in UNMATCHED:
        assert combo in rows
    assert "unmatched" in rows["bf16+adamw-fused+padding"][0]


def test_each_flag_lowers_the_simulated_peak_as_published(rows):
    """The cumulative full fine-tune rows fall monotonically in the table; so must ours."""
    full = [c for c in rows if not c.startswith(("lora", "qlora")) and c != "bf16+adamw-fused+padding"]
    full.sort(key=lambda c: -rows[c][0]["peak_gib"])
    peaks = [rows[c][1]["peak_bytes"] for c in full]
    assert peaks == sorted(peaks, reverse=True), list(zip(full, peaks))


def test_the_rows_not_held_are_one_table_for_memory_and_speed():
    """The memory test, the speed calibration and its cross-validation read one table (tests/helpers.py)."""
    from tests import test_speed_calibration, test_speedcv
    assert set(UNMATCHED) == set(test_speed_calibration.UNMATCHED) == test_speedcv.NOT_FITTED == set(TORCHTUNE_3B_NOT_HELD)
    assert all(why["memory"] and why["speed"] for why in TORCHTUNE_3B_NOT_HELD.values())
