"""Report rankings and layout, each on made-up records (tests/records.py) or the built page.

    pytest tests/test_report_rankings_and_layout.py -q
"""
from __future__ import annotations

import pytest

import re

from report import build, lookup, plot_steps, recommend, table
from tests.records import CLAIM_BASE, answer, cpu, speed

OOM = {"rtx-4090": "oom", "h100-80gb": "oom", "t4": "oom"}
FITS = {"rtx-4090": "oom", "h100-80gb": "fits", "t4": "oom"}
GIB = 2**30


def test_padding_growing_cells_are_drawn_in_the_per_step_chart():
    """The chart looked for batching 'padding'; the knob of the 8B study is 'padding-growing'."""
    frame = table.to_frame([cpu(["padding-growing"], CLAIM_BASE, step_peak_bytes=[30, 35, 40]),
                            cpu(["packing"], CLAIM_BASE, step_peak_bytes=[30, 42, 42])])
    long = plot_steps.steps_long(frame)
    assert set(long["technique"]) == {"padding-growing", "packing"}
    assert set(long["batching"]) == {"padding-growing", "packing"}


def _short_step_frame():
    """Packing trains the whole 2048 tokens per step; padding-growing's modelled step trains 683
    of them, so its step is shorter and its tokens/s higher: not a like-for-like lead."""
    short = dict(speed(0.5, tokens=683))
    whole = speed(1.2)           # 2048 tokens in 1.2 s: 1707 tokens/s against 1366
    base = answer(["baseline"], {"parameters": 28, "gradients": 28, "optimizer": 56}, OOM, {})
    pg = answer(["lora", "bf16", "padding-growing"], {"parameters": 30}, FITS, {"h100-80gb": 1.0})
    pg["details"]["speed_model"]["h100-80gb"] = short
    pk = answer(["lora", "bf16", "packing"], {"parameters": 30}, FITS, {"h100-80gb": 1.0})
    pk["details"]["speed_model"]["h100-80gb"] = whole
    return table.to_frame([base, pg, pk])


def test_the_answer_table_does_not_rank_a_shorter_step_against_a_whole_one():
    sec = lookup.section(_short_step_frame())
    (g,) = [g for g in sec["groups"] if g["gpu"] == "h100-80gb"]
    assert g["answer"] == "recommended: lora+bf16+packing"
    pg = next(r for r in g["rows"] if r["technique"] == "lora+bf16+padding-growing")
    assert not pg["recommended"] and "not ranked: its modelled step trains 683 of 2048 tokens" in pg["tokens"]


def test_recommendations_rank_like_for_like_in_every_cell():
    (r,) = [r for r in recommend.recommend(_short_step_frame(), "sim") if r["gpu"] == "h100-80gb"]
    assert r["fastest"]["technique"] == "lora+bf16+packing"



def test_the_footer_names_the_commit_built_at_dirty_or_not_and_the_records_commit_apart(tmp_path):
    """The footer named HEAD only, so a page built from changed files named an older commit than
    the code that built it, and never said which commit made the records."""
    import json
    import subprocess as sp
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    (repo / "f.txt").write_text("one")
    sp.run([*git, "init", "-q"], check=True)
    sp.run([*git, "add", "f.txt"], check=True)
    sp.run([*git, "commit", "-qm", "one"], check=True)
    head = sp.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert build.git_commit(repo) == head
    (repo / "f.txt").write_text("two")
    assert build.git_commit(repo) == f"{head} (dirty)"
    cell = tmp_path / "cell.json"
    cell.write_text(json.dumps({"commit_info": {"id": "0f4494ed0325", "dirty": True}, "benchmarks": [
        {"extra_info": cpu(["baseline"], CLAIM_BASE), "stats": {"mean": 1.0}}]}))
    page = build.render(table.to_frame(table.load_records([cell])), commit=f"{head} (dirty)", built_at="now")
    assert f"from commit <code>{head} (dirty)</code>" in page
    assert re.search(r"Records made at commit\s+<code>0f4494ed0325 \(dirty\)</code>", page)


# ---- the page in headless chromium (skipped without it, as tests/test_report_browser.py) ----

import shutil  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

from report.fits_table import read_fits  # noqa: E402
from tests.records import cpu_records, demo_records, sim_records  # noqa: E402

CHROMIUM = shutil.which("chromium")
browser = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install chromium)")
REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference"

# after load, on <html>: each table wider than <main>'s content box, and what the cpu section shows
PROBE = """<script>window.addEventListener("load", function () {
  var main = document.querySelector("main"), avail = main.clientWidth - 48, wide = [];
  document.querySelectorAll("main table").forEach(function (t, i) {
    var w = t.getBoundingClientRect().width;
    if (t.offsetParent && w > avail + 1) { wide.push(i + ":" + Math.round(w)); }
  });
  var cpu = document.getElementById("mode-cpu");
  var shown = cpu ? Array.prototype.filter.call(cpu.querySelectorAll("table"), function (t) { return t.offsetParent; }) : [];
  var note = cpu && cpu.querySelector(".filter-empty");
  document.documentElement.setAttribute("data-wide", wide.join(" "));
  document.documentElement.setAttribute("data-cpu-tables", String(shown.length));
  document.documentElement.setAttribute("data-cpu-note", note && note.offsetParent ? note.textContent : "");
});</script>"""


def probe(text: str, tmp: Path, fragment: str = "") -> dict:
    page = tmp / "page.html"
    page.write_text(text.replace("</body>", PROBE + "</body>"))
    done = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-extensions", f"--user-data-dir={tmp / 'profile'}", "--window-size=1400,3000",
                           "--dump-dom", page.as_uri() + fragment], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(re.findall(r'\bdata-(wide|cpu-tables|cpu-note)="([^"]*)"', done.stdout))


@browser
def test_every_table_of_the_reference_report_fits_a_1400px_window(tmp_path):
    """The sim summary table was 1708 px wide in a 1400 px window (names and numbers never wrapped)."""
    df = table.read_table(REFERENCE / "table.csv")
    got = probe(build.render(df, fits=read_fits(REFERENCE / "fits.csv"), commit="test", built_at="now"), tmp_path)
    assert got["wide"] == "", f"tables wider than the window (index:px): {got['wide']}"


@browser
def test_a_filter_with_no_cpu_cells_says_so_instead_of_empty_tables(tmp_path):
    text = build.render(table.to_frame(demo_records() + cpu_records() + sim_records()), commit="x", built_at="now")
    assert probe(text, tmp_path)["cpu-tables"] != "0"                          # unfiltered: the cpu tables show
    got = probe(text, tmp_path, "#model=llama-3.1-70b")                         # a sim-only model
    assert got["cpu-tables"] == "0" and got["cpu-note"] == "No cpu cells for this filter."
