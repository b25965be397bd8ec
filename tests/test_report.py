"""Unit tests of report/: the table, the page and the chart, on small made-up records.

    pytest tests/test_report.py -q

The numbers here are invented to exercise the report; they measure nothing.
"""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from bench.records import record
from bench.cells import catalogue, techniques
from report import GIB, build, compare, fmt, plots, sections, table
from tests.records import (BASE, CAPACITY, EVIL, ROOT, SIM_GPUS, bench_json, contract_details, demo_records,  # noqa: F401
                           failed, made, ok, spec, write_cells)

@pytest.fixture(scope="module")
def frame():
    return table.to_frame(demo_records())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The whole pipeline, through both CLIs: cell files -> CSV -> one HTML file."""
    tmp = tmp_path_factory.mktemp("build")
    paths = write_cells(tmp / "cells", demo_records())
    (tmp / "cells" / "zz-broken.json").write_text('{"benchmarks": [')
    out = tmp / "site"
    assert table.main([*map(str, paths), str(tmp / "cells" / "zz-broken.json"), "--out", str(out / "table.csv")]) == 0
    assert build.main([str(out / "table.csv"), "--out", str(out / "report.html")]) == 0
    return out, (out / "report.html").read_text()


# ---- the table ----

def test_flatten_columns(frame):
    assert list(frame.columns[: len(table.COLUMNS)]) == list(table.COLUMNS)
    row = frame.set_index("cell").loc["llama-3.2-1b__a100-80g__lora+gc+bf16"]
    assert row["technique"] == "lora+gc+bf16"
    assert row["parameters_bytes"] == 2 * GIB and row["gradients_bytes"] == int(0.02 * GIB)
    assert sum(row[c] for c in table.BREAKDOWN_COLUMNS) == row["peak_bytes"]
    assert row["backward_peak_bytes"] == row["peak_bytes"]
    assert row["optimizer_peak_bytes"] == row["peak_bytes"] - 1   # a phase, not the optimizer category
    assert json.loads(row["step_peak_bytes"]) == [row["peak_bytes"]] * 3
    assert json.loads(row["versions"]) == {"torch": "2.13.0", "python": "3.12"}
    assert row["study"] == "demo" and row["baseline_cell"] == "llama-3.2-1b__a100-80g__baseline"
    assert str(frame["peak_bytes"].dtype) == "Int64"
    sim = frame.set_index("cell").loc["qwen2.5-7b__sim__baseline"]
    assert json.loads(sim["verdicts"]) == {"a100-80g": "oom", "rtx-4090": "oom"}   # 143 GiB: on neither card


def test_csv_round_trip_keeps_blanks_and_text(tmp_path):
    recs = demo_records()[:5]
    recs[0]["model"] = "NA"                          # must stay a string, not become NaN
    paths = write_cells(tmp_path / "cells", recs)
    out = tmp_path / "out" / "table.csv"
    assert table.main([*map(str, paths), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["table.csv", "table.meta.json"]  # no temp file left
    back = table.read_table(out)
    assert back["model"].iloc[0] == "NA"
    oom = back.set_index("cell").loc["llama-3.2-1b__a100-80g__s8192"]
    assert oom["status"] == "oom" and pd.isna(oom["peak_bytes"]) and pd.isna(oom["tokens_per_s"])
    assert oom["reason"].startswith("CUDA out of memory")
    assert list(back["bench_wall_s"]) == [1.0, 2.0, 3.0, 4.0, 5.0]     # stats.mean kept
    assert back["peak_bytes"].tolist()[:4] == table.to_frame(recs)["peak_bytes"].tolist()[:4]


def test_unreadable_files_give_error_rows(tmp_path):
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "empty.json").write_text(json.dumps({"benchmarks": []}))
    (tmp_path / "norecord.json").write_text(json.dumps({"benchmarks": [{"name": "x", "stats": {"mean": 1}}]}))
    good = bench_json(tmp_path / "good.json", demo_records()[0])
    names = ["garbage.json", "empty.json", "norecord.json", "missing.json", "good.json"]
    df = table.to_frame(table.load_records([tmp_path / n for n in names]))
    assert list(df["cell"]) == ["garbage", "empty", "norecord", "missing", demo_records()[0]["cell"]]
    assert list(df["status"]) == ["error"] * 4 + ["ok"]
    assert all("unreadable results file" in r for r in df["reason"][:4])
    assert df["peak_bytes"][:4].isna().all() and good.exists()


# ---- the page ----

def test_missing_numbers_are_dashes_never_zero(frame):
    assert fmt.fmt_gib(None) == fmt.fmt_gib(float("nan")) == fmt.fmt_gib(pd.NA) == "—"
    assert fmt.fmt_pct(None) == "—" and fmt.fmt_gib(0) == "0"
    by_cell = frame.set_index("cell", drop=False)
    oom = sections.summary_row(by_cell.loc["llama-3.2-1b__a100-80g__s8192"], frame)
    assert (oom["peak"], oom["saved"], oom["saved_pct"], oom["speed"], oom["measured"]) == ("—",) * 5
    assert oom["status"] == "oom" and "out of memory" in oom["reason"]
    sim = sections.summary_row(by_cell.loc["qwen2.5-7b__sim__bf16"], frame)
    assert sim["speed"].endswith("step time (modelled, 1 GPUs)") and sim["peak"] != "—"   # never FLOPs
    sim_err = sections.summary_row(by_cell.loc["qwen2.5-7b__sim__zero3+w2"], frame)
    assert (sim_err["peak"], sim_err["speed"], sim_err["saved"]) == ("—",) * 3


def test_no_comparison_with_a_failed_baseline():
    recs = [failed(spec("m", "g", ["baseline"]), "oom", "CUDA out of memory"),
            ok(spec("m", "g", ["gc"]), BASE, 800)]
    df = table.to_frame(recs)
    base, gc = (sections.summary_row(r, df) for _, r in df.iterrows())
    assert base["peak"] == base["saved"] == base["measured"] == "—" and base["status"] == "oom"
    assert gc["peak"] == "23.50" and (gc["saved"], gc["saved_pct"], gc["speed"], gc["measured"]) == ("—",) * 4


def test_comparison_with_baseline(frame):
    by_cell = frame.set_index("cell", drop=False)
    lora = sections.summary_row(by_cell.loc["llama-3.2-1b__a100-80g__lora"], frame)
    assert lora["measured"].startswith("optimizer")          # 8 -> 0.1 GiB shrank most
    assert lora["saved"] == "12.85" and lora["saved_pct"] == "54.7%"   # 23.5 -> 10.65 GiB
    assert lora["speed"] == "+10.0%" and lora["saved_tone"] == "better"
    gc = sections.summary_row(by_cell.loc["llama-3.2-1b__a100-80g__gc"], frame)
    assert gc["measured"].startswith("activations") and gc["speed"] == "\N{MINUS SIGN}25.0%"
    sim = sections.summary_row(by_cell.loc["qwen2.5-7b__sim__lora"], frame)
    # the speed model's step time (its made-up estimate follows the FLOPs here), never FLOPs themselves
    assert sim["speed"] == "\N{MINUS SIGN}32.2% step time (modelled, 1 GPUs)"
    assert sections.summary_row(by_cell.loc["llama-3.2-1b__a100-80g__baseline"], frame)["saved"] == "reference"


def test_difficulty_order_lives_in_the_catalogue(monkeypatch, frame):
    assert {t.difficulty for t in techniques.CATALOG.values()} <= set(catalogue.DIFFICULTIES)
    with pytest.raises(ValueError, match="difficulty 'trivial' not one of"):
        techniques.Technique("x", {}, "x", difficulty="trivial")
    lora = frame.set_index("cell", drop=False).loc["llama-3.2-1b__a100-80g__lora"]
    assert compare.difficulty_rank("gc") == 0 and sections.summary_row(lora, frame)["difficulty_sort"] == "1"
    monkeypatch.setattr(catalogue, "DIFFICULTIES", ("high", "medium", "low"))   # the report follows it
    assert compare.difficulty_rank("gc") == 2 and compare.difficulty_rank("zero3-offload") == 0
    assert sections.summary_row(lora, frame)["difficulty_sort"] == "1"
    assert "DIFFICULTY" not in (ROOT / "report" / "compare.py").read_text()


def test_baseline_fallback_without_baseline_cell():
    recs = [ok(spec("m", "g1", ["baseline"]), BASE, 1000, with_study=False),
            ok(spec("m", "g2", ["baseline"]), BASE | {"optimizer": 100}, 1000, with_study=False),
            ok(spec("m", "g1", ["gc"]), BASE | {"activations": 1}, 800, with_study=False)]
    df = table.to_frame(recs)
    assert (df["baseline_cell"] == "").all() and (df["study"] == "").all()
    base = compare.baseline_of(df.iloc[2], df)
    assert base["cell"] == "m__g1__baseline"                   # same gpu, not g2's
    assert sections.summary_row(df.iloc[2], df)["saved"] == "5.00"


def test_technique_metadata_joined_per_part():
    meta = compare.technique_meta("lora+gc+bf16")
    assert meta["saves"] == "gradients, optimizer, activations, parameters"
    assert "lora: very large" in meta["expected"] and "gc: significant" in meta["expected"]
    assert meta["difficulty"] == "medium" and "gc: ~20-30% slower" in meta["overhead"]
    assert compare.technique_meta("gc")["expected"].startswith("significant")
    assert compare.technique_meta("nonsense")["difficulty"] == "unknown"


def test_script_model_name_is_text(built):
    _, html = built
    assert EVIL not in html and "alert(1)</script>" not in html
    assert html.count("<script") == 1                      # the page's own, inline, at the end
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html   # as text in tables
    # inside the filters' JSON attributes too: quotes escaped, so the attribute cannot be closed early
    assert 'data-models="[&#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;]"' in html
    assert '<option value="&lt;script&gt;alert(1)&lt;/script&gt;">' in html


def test_modes_are_never_mixed(frame, built):
    for mode in record.MODES:
        sec = sections.summary_section(frame, mode)
        cells = [r["cell"] for g in sec["groups"] for r in g["rows"]]
        assert cells and set(cells) == set(frame.loc[frame["mode"] == mode, "cell"])
    _, html = built
    blocks = dict(re.findall(r'<section id="mode-(\w+)"[^>]*>(.*?)</section>', html, re.S))
    assert list(blocks) == ["cuda", "sim", "cpu"]      # full-size answers before the small-model CPU evidence
    assert "tiny-llama" in blocks["cpu"] and "tiny-llama" not in blocks["cuda"] + blocks["sim"]
    assert "qwen2.5-7b" in blocks["sim"] and "qwen2.5-7b" not in blocks["cpu"] + blocks["cuda"]
    assert "step time vs baseline (modelled)" in blocks["sim"] and "throughput vs baseline" in blocks["cuda"]
    assert "FLOPs/step" not in blocks["sim"]
    # breakdown, memory vs speed and fits grid in each mode; no s<N> or padding cells here
    # (one figure per model: the filter hides the other models' pictures)
    for mode, b in blocks.items():
        n_models = frame.loc[(frame["mode"] == mode) & (frame["status"] == "ok"), "model"].nunique()
        assert b.count("data:image/png;base64,") == 3 * n_models, mode
    assert all("No padding/packing cells in this run." in b for b in blocks.values())
    cuda_summary = blocks["cuda"][blocks["cuda"].index('<table class="summary'):]
    assert cuda_summary[:cuda_summary.index("</table>")].count('class="group"') == 2   # a100 and h100 grouped apart


def test_breakdown_is_stacked(frame):
    long = plots.breakdown_long(frame[frame["mode"] == "cuda"])
    assert set(long["category"]) == set(record.CATEGORIES)
    assert "llama-3.2-1b__a100-80g__s8192" not in set(long["cell"])      # no bar for the oom cell
    per_cell = long.groupby("cell")["gib"].sum()
    peaks = frame.set_index("cell")["peak_bytes"].astype(float) / GIB
    assert (per_cell - peaks[per_cell.index]).abs().max() < 1e-9
    fig = plots.breakdown_figure(long)
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert legend == list(record.CATEGORIES)
    ax = fig.axes[0]
    rows = {}
    for bar in ax.patches:
        rows.setdefault(round(bar.get_y(), 6), []).append(bar)
    assert len(rows) == 4                                      # baseline, lora, gc, lora+gc+bf16
    for bars in rows.values():
        bars.sort(key=lambda b: b.get_x())
        assert len(bars) == 6 and bars[0].get_x() == 0
        for left, right in zip(bars, bars[1:]):               # each segment starts where the last ended
            assert right.get_x() == pytest.approx(left.get_x() + left.get_width())
    totals = sorted(round(b[-1].get_x() + b[-1].get_width(), 6) for b in rows.values())
    a100 = long[long["panel"] == ax.get_title()].groupby("cell")["gib"].sum()
    assert totals == pytest.approx(sorted(a100))


def test_build_writes_one_self_contained_file(built):
    out, html = built
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "table.csv", "table.meta.json"]
    assert html.count("data:image/png;base64,") == 12   # one figure per model and chart
    assert not re.search(r'(src|href)="(https?:)?//', html) and "<link" not in html
    assert not re.search(r"<script[^>]*\bsrc=", html) and "import(" not in html and "fetch(" not in html
    assert html.count("GiB = 2^30 bytes") == 1
    assert "zz-broken" in html and "unreadable results file" in html
    # the GPU filter offers the devices cells ran on and the GPUs sim verdicts were given for
    assert all(f'<option value="{g}">' in html for g in ("a100-80g", "h100-80g", "cpu-24g", "rtx-4090"))
    assert "torch" in html and "2.13.0" in html and "ci-box" in html     # footer from the records
    assert re.search(r"Built \d{4}-\d\d-\d\d \d\d:\d\d UTC from commit <code>\w+( \(dirty\))?</code>", html)
    assert re.search(r'<td class="num" data-sort="">—</td>', html)       # the oom row's peak


def test_unknown_record_keys_are_kept(tmp_path):
    rec = demo_records()[0] | {"attempt": 2, "allocator": {"segments": 3}}
    df = table.to_frame([rec])
    assert df["attempt"].iloc[0] == 2 and json.loads(df["allocator"].iloc[0]) == {"segments": 3}
    table.write_csv(df, tmp_path / "t.csv")
    assert table.read_table(tmp_path / "t.csv")["allocator"].iloc[0] == '{"segments":3}'


def test_build_with_nothing_readable(tmp_path):
    (tmp_path / "bad.json").write_text("")
    table.main([str(tmp_path / "bad.json"), "--out", str(tmp_path / "t.csv")])
    html = build.render(table.read_table(tmp_path / "t.csv"), commit="abc1234", built_at="now")
    assert "Results that could not be read" in html and 'id="mode-' not in html
    empty = build.render(table.to_frame([]), commit="abc1234", built_at="now")
    assert "0 cells" in empty


def test_every_column_the_report_reads_is_one_the_table_writes():
    """Category and phase columns come from record.CATEGORIES / PHASES; a name typed in report/
    must be one of the table's columns."""
    read = set()
    for path in (ROOT / "report").glob("*.py"):
        if path.name == "dataset_epoch.py":   # reads the dataset study's JSON (bench/dataset/study.py), not the table
            continue
        # subscripts of table rows; a vLLM plan (a dict of the record's details) has its own keys
        read |= set(re.findall(r"""(?<!plan)(?<!alone)(?<!\bp)(?<!\])\[["'](\w+_(?:bytes|s_median|per_step|per_s))["']\]""",
                               path.read_text()))
    assert read and read <= set(table.COLUMNS), read - set(table.COLUMNS)
    assert table.BREAKDOWN_COLUMNS == tuple(f"{c}_bytes" for c in record.CATEGORIES)
    assert table.PHASE_COLUMNS == tuple(f"{p}_peak_bytes" for p in record.PHASES + record.INFERENCE_PHASES)


def test_published_figures_stand_beside_the_simulated_peak(tmp_path):
    """A sim record with details.published gets a row: published (measured) vs ours (simulated),
    the signed error and the source's tokens/s; records without one add no row."""
    sp = spec("llama-3.2-3b", "sim", ["bf16", "packing"], mode="sim")
    pub = {"row": "+ packed", "peak_gib": 60.0, "tokens_per_s": 7075, "measure": "active",
           "source": "pytorch/torchtune README", "signed_error": -0.035}
    recs = [ok(spec("llama-3.2-3b", "sim", ["baseline"], mode="sim"), BASE),
            ok(sp, {"parameters": 6, "optimizer": 12, "activations": 39.9}) | {"details": {"published": pub}}]
    section = sections.published_section(table.to_frame(recs), "sim")
    assert [r["row"] for r in section["rows"]] == ["+ packed"]
    row = section["rows"][0]
    assert (row["published"], row["ours"], row["error"], row["tokens"]) == ("60.0", "57.90", "-3.5%", "7075")
    assert "measured" in build.render(table.to_frame(recs)).split("Published figures beside ours")[1][:2000]
    assert sections.published_section(table.to_frame(recs[:1]), "sim") is None


def test_throughput_timed_beside_other_load_is_marked_and_not_toned():
    """A cpu record whose timing saw other load (details.timing_load.contended) is shown with
    its change, but marked, and without a better/worse colour."""
    base = ok(spec("m", "cpu-24g", ["baseline"], mode="cpu"), BASE, tokens_per_s=1000)
    quiet = ok(spec("m", "cpu-24g", ["gc"], mode="cpu"), BASE | {"activations": 1}, tokens_per_s=500)
    busy = ok(spec("m", "cpu-24g", ["lora"], mode="cpu"), BASE, tokens_per_s=400)
    for r in (base, quiet):
        r["details"]["timing_load"] = {"contended": False, "other_cores": 0.01}
    busy["details"]["timing_load"] = {"contended": True, "other_cores": 1.4}
    frame = table.to_frame([base, quiet, busy])
    rows = {r["cell"]: sections.summary_row(r, frame) for _, r in frame.iterrows()}
    assert rows["m__cpu-24g__gc"]["speed"] == "−50.0%" and rows["m__cpu-24g__gc"]["speed_tone"] == "worse"
    assert rows["m__cpu-24g__lora"]["speed"] == "−60.0% (timed beside other load)"
    assert rows["m__cpu-24g__lora"]["speed_tone"] == ""


def test_cpu_timing_inside_the_repeat_run_noise_reads_within_noise():
    """A cpu timing change smaller than the measured repeat-run spread (bench/records/noise.py, ±40%) is no
    evidence either way: the summary and the effects tables say "within noise" and give it no tone."""
    from report import effects
    from tests.records import CLAIM_BASE, cpu
    recs = [cpu(["baseline"], CLAIM_BASE, tokens_per_s=1000.0),
            cpu(["gc"], CLAIM_BASE | {"activations": 5 * 10**7}, tokens_per_s=800.0),      # step time +25%
            cpu(["eager"], CLAIM_BASE, tokens_per_s=400.0)]                                # step time +150%
    frame = table.to_frame(recs)
    by_cell = frame.set_index("cell", drop=False)
    gc = sections.summary_row(by_cell.loc["tiny-llama__cpu__gc"], frame)
    assert gc["speed"].startswith("within noise (\N{MINUS SIGN}20.0%; ±40%") and gc["speed_tone"] == ""
    eager = sections.summary_row(by_cell.loc["tiny-llama__cpu__eager"], frame)
    assert eager["speed"] == "\N{MINUS SIGN}60.0%" and eager["speed_tone"] == "worse"
    text, pct = effects.overhead(by_cell.loc["tiny-llama__cpu__gc"], by_cell.loc["tiny-llama__cpu__baseline"])
    assert text.startswith("step time within noise (+25.0%") and pct is None
    text, pct = effects.overhead(by_cell.loc["tiny-llama__cpu__eager"], by_cell.loc["tiny-llama__cpu__baseline"])
    assert text == "+150.0% step time (measured)" and pct == 150.0
