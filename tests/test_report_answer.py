"""The answer-first parts of the report (report/lookup.py, effects.py, scope.py, fits_table.py)
over made-up records (tests/records.py: answer_records, with made-up speed-model estimates, and
tests/data/fits.csv).

    pytest tests/test_report_answer.py -q
"""
from __future__ import annotations

import html
import json
import re

import pytest

from report import build, effects, lookup, scope, table
from report.fits_table import FitsError, read_fits
from tests.records import FITS_CSV, answer_records, cpu_records, sim_records


@pytest.fixture(scope="module")
def df():
    return table.to_frame(answer_records() + cpu_records() + sim_records())


def groups(section) -> dict:
    return {(g["model"], g["gpu"]): g for g in section["groups"]}


def test_recommendation_is_ranked_by_the_speed_model_per_gpu(df):
    got = groups(lookup.section(df, read_fits(FITS_CSV)))
    card = got[("qwen2.5-7b", "rtx-4090")]
    assert [r["technique"] for r in card["rows"]][:2] == ["lora+gc+bf16", "qlora+gc"]   # 2.9 s before 3.6 s
    assert card["rows"][0]["recommended"] and card["answer"] == "recommended: lora+gc+bf16"
    big = got[("qwen2.5-7b", "h100-80gb")]
    # on the big card the full bf16 recipe is the fastest that fits; QLoRA is not called fastest
    assert big["rows"][0]["technique"] == "adamw8bit+gc+bf16" and big["rows"][0]["recommended"]
    assert [r["technique"] for r in big["rows"] if r["recommended"]] == ["adamw8bit+gc+bf16"]
    # no speed model for the T4: nothing is recommended, and FLOPs do not stand in
    t4 = got[("qwen2.5-7b", "t4")]
    assert not any(r["recommended"] for r in t4["rows"]) and t4["answer"].startswith("ranking unavailable")
    assert t4["rows"][0]["step"] == "no speed model"


def test_need_share_headroom_and_the_common_recipes_that_do_not_fit(df):
    rows = {r["technique"]: r for r in groups(lookup.section(df))[("qwen2.5-7b", "rtx-4090")]["rows"]}
    lora = rows["lora+gc+bf16"]
    # modelled reserved 19.15 GiB + the 840 MiB CUDA reserve + 16.25 MiB of cuBLAS workspaces (a made-up card of
    # no named arch: torch's non-sm90 default, twice) = 19.99 GiB of a 24 GiB card
    assert (lora["need"], lora["share"], lora["headroom"]) == ("19.99", "83%", "+4.01")
    assert lora["step"] == "2.90 s" and lora["tokens"] == "706" and "speed modelled" in lora["provenance"]
    assert lora["dtypes"] == "weights bf16+fp32 · grads fp32 · optimizer fp32"
    assert rows["lora+gc"]["verdict"] == "oom" and rows["lora+gc"]["recipe"] == "LoRA + gc, fp32 base"
    assert rows["lora+gc"]["headroom"].startswith("\N{MINUS SIGN}")
    assert "lora" not in rows and "baseline" not in rows       # oom, and not a recipe people use: left out
    assert lora["seq"] == lora["batch"] == "not searched"      # no fits search given


def test_fits_search_answers(df):
    got = groups(lookup.section(df, read_fits(FITS_CSV)))
    rows = {r["technique"]: r for r in got[("qwen2.5-7b", "rtx-4090")]["rows"]}
    assert (rows["lora+gc+bf16"]["seq"], rows["lora+gc+bf16"]["batch"]) == ("9,216 tokens", "3")
    assert rows["qlora+gc"]["seq"] == "≥ 32,768 tokens (limit searched)"
    assert rows["lora+gc"]["seq"] == rows["lora+gc"]["batch"] == "none fits"
    t4 = {r["technique"]: r for r in got[("qwen2.5-7b", "t4")]["rows"]}
    assert t4["qlora+gc"]["seq"] == "no answer: the simulation ran out of time"
    assert rows["adamw8bit+gc+bf16"]["seq"] == "not searched"   # no row in the search


def test_a_bad_fits_file_is_refused_naming_file_and_column(tmp_path):
    bad = tmp_path / "fits.csv"
    bad.write_text(FITS_CSV.read_text().replace(",fits,3,fits,", ",fits,3,maybe,", 1))
    with pytest.raises(FitsError, match=r"fits\.csv: row 2, column batch_answer: 'maybe'"):
        read_fits(bad)
    bad.write_text("study,model\nx,y\n")
    with pytest.raises(FitsError, match="missing column.*technique"):
        read_fits(bad)
    assert build.main(["/nonexistent/table.csv", "--out", str(tmp_path / "r.html")]) == 2


def test_effects_said_where_they_matter(df):
    sec = effects.section(df, "sim")
    rows = [r for g in sec["groups"] if g["title"] == "qwen2.5-7b" for r in g["rows"]]
    gc = {r["context"]: r for r in rows if r["technique"] == "gc"}
    added = gc["added to the baseline"]
    assert added["measured"] == "nothing shrank" and added["saved"] == "0"
    assert added["phase"] == "peak is in the optimizer step; the forward peak shrank 10.00 GiB"
    removed = gc["removed from LoRA + gc, fp32 base"]
    assert removed["saved"] == "15.00" and removed["measured"].startswith("activations") and removed["phase"] == ""
    assert removed["cost"].startswith("+27.3% step time (modelled, 1 GPUs")      # 1.4 s against 1.1 s
    assert gc["added to the baseline"]["cost"] == "no speed model"
    bf16 = {r["context"]: r for r in rows if r["technique"] == "bf16"}
    assert bf16["removed from LoRA + gc + bf16"]["measured"].startswith("parameters")


def test_sim_tables_never_say_measured_and_rows_carry_dtypes(df):
    page = build.render(df, commit="x", built_at="now")
    sim = page[page.index('<section id="mode-sim"'):page.index('<section id="mode-cpu"')]
    for kind in ("summary", "effects"):
        start = sim.index(f'<table class="{kind} sortable">')
        body = sim[start:sim.index("</table>", start)]
        assert "measured" not in re.sub(r"<[^>]+>", " ", body), kind
    assert page.index('id="mode-sim"') < page.index('id="mode-cpu"')     # full size before the CPU evidence
    assert page.index('id="answer"') < page.index('id="mode-sim"')
    summary = sim[sim.index('<table class="summary sortable">'):]
    rows = re.findall(r'<tr id="cell-[^"]+".*?</tr>', summary, re.S)
    assert rows and all("weights " in r or "optimizer " in r for r in rows)
    assert re.search(r'<option value="rtx-4090">rtx-4090 · 24.00 GiB</option>', page)   # capacity in the GPU menu


def test_not_included_says_what_applies(df):
    lines = scope.section(df)["lines"]
    assert any(t.startswith("No GPU measurement in this run") for t in lines)
    assert any("NCCL's device buffers are in the need" in t for t in lines) and any("not searched" in t for t in lines)
    # the multi-GPU item says how ZeRO is answered and how far that was checked (tests/test_sim_deepspeed.py)
    assert any("own DeepSpeed program" in t and "equal to real DeepSpeed ranks" in t and "unchecked on a GPU" in t
               for t in lines)
    assert not any("beyond the per-rank ZeRO" in t for t in lines)
    assert not any("no speed model in these records" in t for t in lines)   # the 7B cells carry one
    assert not any("not searched" in t for t in scope.section(df, read_fits(FITS_CSV))["lines"])


def test_sim_rows_stay_in_view_under_a_gpu_filter(df):
    """A sim row answers for every GPU it has a verdict for, so the GPU filter (data-gpus) must
    list them: the effects, published and peer tables once tagged their sim rows with the device
    "sim" only, and the 4090 filter emptied them."""
    page = build.render(df, commit="x", built_at="now")
    sim = page[page.index('<section id="mode-sim"'):page.index('<section id="mode-cpu"')]
    verdicts = {r["cell"]: list(json.loads(r["verdicts"])) for _, r in df.iterrows()
                if r["mode"] == "sim" and isinstance(r["verdicts"], str) and r["verdicts"]}
    patterns = {"effects": r'<tr[^>]*data-gpus="(?P<gpus>[^"]*)"[^>]*>\s*<td class="tech" title="(?P<cell>[^"]+)"',
                "summary": r'<tr id="cell-(?P<cell>[^"]+)"[^>]*data-gpus="(?P<gpus>[^"]*)"'}
    for kind, pattern in patterns.items():
        body = sim[sim.index(f'<table class="{kind} sortable">'):]
        body = body[:body.index("</table>")]
        rows = [m.groupdict() for m in re.finditer(pattern, body)]
        assert len(rows) > 5, kind
        for row in rows:
            cell = html.unescape(row["cell"])
            assert json.loads(html.unescape(row["gpus"])) == ["sim", *verdicts[cell]], (kind, cell)


def test_ranking_reads_tokens_per_second_not_step_time():
    """A padded step over short samples is short, but trains fewer tokens: it is not the faster recipe."""
    def cand(name, step_s, tokens_per_s):
        return {"verdict": "fits", "capacity": 80, "need": 30, "recipe": name,
                "row": {"mode": "sim", "technique": name}, "speed": {"step_s": step_s, "tokens_per_s": tokens_per_s}}
    padded, packed = cand("padded", 0.07, 4800.0), cand("packed", 1.05, 7800.0)
    rows, timed = lookup.ranked([padded, packed])
    assert timed and [c["recipe"] for c in rows] == ["packed", "padded"]


def test_a_recipe_at_another_batch_is_ranked_in_its_own_group():
    """A study at batch 2 x 2048 (torchtune's 8B table) beside one at batch 1 x 2048: a recipe's
    need and tokens/s at one shape is no rival to another's at another shape, so each shape gets
    its own ranking and recommendation."""
    from tests.records import answer
    fits = {"rtx-4090": "fits", "h100-80gb": "fits", "t4": "oom"}
    one = answer(["lora", "gc", "bf16"], {"parameters": 14.2, "activations": 1.6}, fits, {"rtx-4090": 2.9},
                 reserved_gib=16)
    two = answer(["lora", "gc", "bf16"], {"parameters": 14.2, "activations": 3.2}, fits, {"rtx-4090": 1.0},
                 reserved_gib=18)  # faster per token, at another batch: another study's cell
    two.update(cell=two["cell"] + "-study2", batch_size=2)
    got = lookup.section(table.to_frame([one, two]))
    shapes = sorted(g["shape"] for g in got["groups"] if g["gpu"] == "rtx-4090")
    assert shapes == ["batch 1 x 2048 tokens", "batch 2 x 2048 tokens"]
    assert all(g["answer"] == "recommended: lora+gc+bf16" for g in got["groups"] if g["gpu"] == "rtx-4090")


def test_multi_gpu_cells_have_their_own_groups_labelled_per_rank_and_for_the_run(df):
    section = lookup.section(df)
    multi = [g for g in section["groups"] if g["gpu"].startswith("8 x ")]
    assert "8 x h100-80gb" in [g["gpu"] for g in multi] and all(g["shape"].startswith("multi-GPU") for g in multi)
    # where it does not fit (the smaller cards), the group holds its oom row: an answer too
    assert all(r["verdict"] == "oom" for g in multi if g["gpu"] != "8 x h100-80gb" for r in g["rows"])
    multi.sort(key=lambda g: g["gpu"] != "8 x h100-80gb")
    row = multi[0]["rows"][0]
    assert row["technique"] == "zero3+w8" and row["need"].endswith(" per rank")
    assert "per rank" in row["tokens"] and "for the run (8 GPUs)" in row["tokens"]
    singles = [g for g in section["groups"] if " x " not in g["gpu"]]
    assert all(r["technique"] != "zero3+w8" for g in singles for r in g["rows"])
    assert section["groups"].index(multi[0]) > max(section["groups"].index(g) for g in singles)


def test_a_multi_gpu_recipe_that_does_not_fit_is_shown_not_dropped():
    """70B FSDP+QLoRA without offload on 2 x RTX 4090 does not fit (per rank), with offload it
    does: both are answers on the page, not only the one that fits; and a multi-GPU cell the
    matrix's searches leave out says it has no answer and why, not that it failed."""
    import pandas as pd
    from tests.helpers import REPO
    ref = REPO / "results" / "reference"
    section = lookup.section(pd.read_csv(ref / "table.csv"), read_fits(ref / "fits.csv"))
    group = next(g for g in section["groups"] if g["model"] == "llama-3.1-70b" and g["gpu"] == "2 x rtx-4090")
    rows = {r["technique"]: r for r in group["rows"]}
    assert rows["qlora+fsdp+gc+w2"]["verdict"] == "oom" and rows["qlora+fsdp-offload+gc+w2"]["verdict"] == "fits"
    # the FSDP2 row is searched from its rank's own trace: nothing fits two 24 GB cards
    assert rows["qlora+fsdp+gc+w2"]["seq"] == "none fits"
    # the offload row is partitioned by formula, and searched per rank by that rule over interpolated traces
    # the offload row is its rank's own trace too since 2026-11-27 (the formula said 5,632)
    assert rows["qlora+fsdp-offload+gc+w2"]["seq"] == "3,584 tokens"
    # a row without a search says its one reason once, not again in the batch column
    padded = next(r for g in section["groups"] if g["model"] == "llama-3.1-8b" and g["gpu"] == "h100-80gb"
                  for r in g["rows"] if r["technique"] == "lora+bf16+padding-growing")
    assert padded["seq"].startswith("no answer: padding-growing batches") and padded["batch"] == "no answer: as for the sequence"
