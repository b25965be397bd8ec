"""The report opened in a real headless browser (Debian's chromium; .ci/run installs it).

    pytest tests/test_report_browser.py -q

How: ``chromium --headless --dump-dom`` prints the DOM after the page's load event, with
``--enable-logging=stderr --v=0`` every console message (uncaught exceptions included) goes to
stderr as ``CONSOLE(...)] "..."``. The page's script marks <html> with data-ready once it has
run to the end and, on load, with data-images-total / data-images-broken (images decoded by the
browser or not); the same run saves a screenshot. The negative test breaks a copy of the same
page (a throwing script, a corrupt image) to show the checks can fail; another appends a script
that clicks a column header to check the sorting.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from report import build, table
from report.fits_table import read_fits
from tests.records import EVIL, FITS_CSV, answer_records, cpu_records, demo_records, sim_records

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="chromium not installed (Debian: apt-get install chromium; .ci/run does it)")


def chromium(url: str, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
            "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", *extra, url]
    done = subprocess.run(args, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def console(stderr: str) -> list[str]:
    """The page's console messages (log, warning, error, uncaught exceptions) from chromium's log."""
    return re.findall(r':CONSOLE[^\]]*\] (.*)', stderr)


def load(page: Path, tmp: Path, fragment: str = "") -> tuple[str, list[str]]:
    done = chromium(page.as_uri() + fragment, tmp / "profile", "--dump-dom")
    return done.stdout, console(done.stderr)


def html_attr(dom: str, name: str):
    m = re.search(rf'<html[^>]*\b{name}="([^"]*)"', dom)
    return m.group(1) if m else None


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("browser") / "report.html"
    out.write_text(build.render(table.to_frame(demo_records() + cpu_records() + sim_records()),
                                commit="abc1234", built_at="now"))
    return out


def test_page_loads_clean_in_chromium(page, tmp_path):
    shot = tmp_path / "report.png"
    done = chromium(page.as_uri(), tmp_path / "profile", "--dump-dom", f"--screenshot={shot}",
                    "--window-size=1400,2400", "--hide-scrollbars")
    dom, messages = done.stdout, console(done.stderr)
    assert messages == [], messages
    assert html_attr(dom, "data-ready") == "1"                    # the script ran to its end
    n_img = page.read_text().count("<img ")
    assert n_img >= 10 and html_attr(dom, "data-images-total") == str(n_img)
    assert html_attr(dom, "data-images-broken") == "0"           # every chart decoded
    assert dom.count('<table class="summary sortable">') == 3 and '<table class="claims sortable">' in dom
    assert "filter-count" in dom and re.search(r'id="filter-count">\d+ of \d+ rows shown<', dom)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom and EVIL not in dom
    data = shot.read_bytes()                                     # kept under tmp_path for a look
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000    # a page, not a blank frame


def test_filters_from_the_url(page, tmp_path):
    dom, messages = load(page, tmp_path, "#model=tiny-llama&mode=cpu")
    assert messages == []
    rows = re.findall(r'<tr[^>]*data-filterable[^>]*>', dom)
    shown = [r for r in rows if " hidden" not in r]
    assert rows and shown and len(shown) < len(rows)
    # a row of no model (a claim not measured here) is shown under any filter; the others follow it
    assert all("tiny-llama" in r for r in shown if "data-models" in r)
    assert any("data-models" in r for r in shown)
    sections = dict(re.findall(r'<section id="mode-(\w+)"([^>]*)>', dom))
    assert " hidden" not in sections["cpu"] and " hidden" in sections["sim"] and " hidden" in sections["cuda"]


def test_a_script_error_and_a_broken_image_are_caught(page, tmp_path):
    broken = tmp_path / "broken.html"
    text = page.read_text().replace("data:image/png;base64,iVBOR", "data:image/png;base64,AAAA", 1)
    broken.write_text(text.replace("</body>", "<script>notDefinedAnywhere();</script></body>"))
    dom, messages = load(broken, tmp_path)
    assert any("Uncaught ReferenceError: notDefinedAnywhere" in m for m in messages), messages
    assert html_attr(dom, "data-images-broken") == "1"


def test_sorting_a_column(page, tmp_path):
    """Clicks the summary's 'peak GiB' header (a script appended to a copy of the page) and reads
    back the order of the largest group's rows: ascending, not-measured last."""
    probe = """<script>
      var th = document.querySelector('table.summary th[data-col="4"]');
      th.click();
      var body = Array.prototype.reduce.call(th.closest("table").tBodies,
                                             function (a, b) { return b.rows.length > a.rows.length ? b : a; });
      var keys = Array.prototype.map.call(body.querySelectorAll("tr[data-filterable]"),
                                          function (tr) { return tr.children[4].getAttribute("data-sort"); });
      document.documentElement.setAttribute("data-sorted", JSON.stringify(keys));
      document.documentElement.setAttribute("data-sort-state", th.getAttribute("aria-sort"));
    </script></body>"""
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", probe))
    dom, messages = load(probed, tmp_path)
    assert messages == []
    assert html_attr(dom, "data-sort-state") == "ascending"
    keys = json.loads(html.unescape(html_attr(dom, "data-sorted")))
    numbers = [float(k) for k in keys if k]
    assert len(numbers) >= 3 and numbers == sorted(numbers) and keys[len(numbers):] == [""] * (len(keys) - len(numbers))


ANSWER_PROBE = """<script>
  window.addEventListener("load", function () {
    var row = document.querySelector("table.lookup tr.answer-row:not([hidden])");
    var box = row.getBoundingClientRect();
    var root = document.documentElement;
    root.setAttribute("data-answer", row.getAttribute("data-cell") + "|" + row.innerText.replace(/\\s+/g, " "));
    root.setAttribute("data-answer-box", JSON.stringify([box.left, box.top, box.right, box.bottom]));
  });
</script></body>"""


def test_the_answer_is_on_the_first_screen(tmp_path):
    """Opened as a shared link for one model and card, at 1400x900, the first screen holds the
    recommended recipe for that card with its fit, need, headroom and estimated speed: the row's
    box lies inside the window, and the screenshot shows the row's green at that place."""
    from matplotlib import image   # reads PNG without a display

    page = tmp_path / "answer.html"
    df = table.to_frame(demo_records() + cpu_records() + sim_records() + answer_records())
    text = build.render(df, commit="abc1234", built_at="now", fits=read_fits(FITS_CSV))
    page.write_text(text.replace("</body>", ANSWER_PROBE))
    shot = tmp_path / "first-screen.png"
    done = chromium(page.as_uri() + "#model=qwen2.5-7b&gpu=rtx-4090", tmp_path / "profile", "--dump-dom",
                    f"--screenshot={shot}", "--window-size=1400,900", "--hide-scrollbars")
    dom, messages = done.stdout, console(done.stderr)
    assert messages == [], messages
    cell, said = html.unescape(html_attr(dom, "data-answer")).split("|", 1)
    assert cell == "qwen2.5-7b__sim__lora+gc+bf16"           # fastest modelled step that fits a 24 GiB card
    for fact in ("recommended", "fits", "19.99", "83%", "+4.01", "9,216 tokens", "2.90 s", "706"):
        assert fact in said, (fact, said)
    left, top, right, bottom = json.loads(html_attr(dom, "data-answer-box"))
    assert 0 <= top < bottom <= 900 and right <= 1400, (top, bottom)
    pixels = image.imread(shot)                              # rows x columns x RGB(A), floats 0..1
    assert pixels.shape[0] == 900 and pixels.shape[1] == 1400
    green = (abs(pixels[..., 0] - 0xe9 / 255) < 0.01) & (abs(pixels[..., 1] - 0xf7 / 255) < 0.01) \
        & (abs(pixels[..., 2] - 0xec / 255) < 0.01)           # the recommended row's background
    rows = green.sum(axis=1).nonzero()[0]
    assert len(rows) and rows.min() >= int(top) - 1 and rows.max() <= int(bottom) + 1, (rows.min(), rows.max(), top, bottom)
    assert green[int(top) + 2: int(bottom) - 2].sum(axis=1).min() > 200   # painted across the row, not a speck
