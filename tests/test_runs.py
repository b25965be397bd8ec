"""Real tiny cells through the benchmark suite: pytest-benchmark JSON carries the records,
the table and report are built from them, and cells run together measure what they
measure alone (each runs in its own process)."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from bench.records import atomic, checks, record
from tests.helpers import REPO

pytestmark = pytest.mark.slow
STUDY = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["baseline", "gc"]}


def run_bench(matrix_path, out_json, *select):
    cmd = [sys.executable, "-m", "pytest", "bench/test_cells.py", "--matrix", str(matrix_path), "--benchmark-json", str(out_json),
           "--worker-logs", str(out_json.parent / "logs"), "-q", *select]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {b["extra_info"]["cell"]: b["extra_info"] for b in json.loads(out_json.read_text())["benchmarks"]}


@pytest.fixture(scope="module")
def together(tmp_path_factory):
    from tests.helpers import write_matrix
    folder = tmp_path_factory.mktemp("together")
    path = write_matrix(folder, {"s": STUDY})
    return path, run_bench(path, folder / "bench.json")


def test_records_come_back_through_benchmark_extra_info(together):
    _, recs = together
    assert sorted(recs) == ["tiny-llama__cpu__baseline", "tiny-llama__cpu__gc"]
    for rec in recs.values():
        assert checks.problems(rec) == [], rec["cell"]
        assert rec["status"] == "ok" and rec["mode"] == "cpu" and rec["provenance"] == "cpu-measured"
        assert sum(rec["breakdown_bytes"].values()) == rec["peak_bytes"]
        assert rec["tokens_per_s"] > 0 and rec["host_peak_rss_bytes"] > rec["peak_bytes"] // 2
        assert rec["versions"]["torch"] and rec["machine"]["cpu_count"]
        assert len(rec["step_peak_bytes"]) == rec["steps"] + rec["warmup_steps"]


def test_model_states_match_fp32_adamw_arithmetic(together):
    rec = together[1]["tiny-llama__cpu__baseline"]
    n = rec["params_total"]
    bd = rec["breakdown_bytes"]
    assert bd["parameters"] >= 4 * n           # fp32 weights (plus rotary buffers)
    assert bd["optimizer"] >= 8 * n            # exp_avg + exp_avg_sq, fp32
    assert bd["optimizer"] < 8 * n + 1024      # ... plus a few step counters, nothing else


def test_same_numbers_alone_as_together(together, tmp_path):
    path, recs = together
    alone = run_bench(path, tmp_path / "alone.json", "-k", "gc")
    assert list(alone) == ["tiny-llama__cpu__gc"]
    for key in ("peak_bytes", "breakdown_bytes", "step_peak_bytes", "phase_peak_bytes"):
        assert alone["tiny-llama__cpu__gc"][key] == recs["tiny-llama__cpu__gc"][key], key


def test_table_and_report_from_real_records(together, tmp_path):
    path, recs = together
    cells = []
    for cid, rec in recs.items():
        p = tmp_path / f"{cid}.json"
        atomic.write_json(p, {"benchmarks": [{"name": cid, "extra_info": rec}]})
        cells.append(str(p))
    csv, html = tmp_path / "table.csv", tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "report.table", *cells, "--out", str(csv)], cwd=REPO, check=True)
    frame = pd.read_csv(csv)
    assert len(frame) == 2 and set(frame["status"]) == {"ok"}
    assert (frame["peak_bytes"] == frame[[f"{c}_bytes" for c in record.CATEGORIES]].sum(axis=1)).all()
    subprocess.run([sys.executable, "-m", "report.build", str(csv), "--out", str(html)], cwd=REPO, check=True)
    page = html.read_text()
    assert "data:image/png;base64," in page and "<table" in page
    assert "tiny-llama" in page and "cpu-measured" in page
