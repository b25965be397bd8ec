"""The report checks what it reads: no record that breaks the contract becomes an ok row, no
cell is silently dropped, and a cut or corrupt table is refused loudly.

    pytest tests/test_report_trust.py -q

Records are made up (test_report's helpers) except where a test reads the committed
reference cells, which it only requires to give a row each, whatever contract they follow.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.records import checks, record
from bench.cells import matrix
from report import build, table
from report.table_check import TableError
from tests.records import BASE, bench_json, demo_records, failed, ok, spec, write_cells
from tests.helpers import REPO, write_matrix

M, G = "llama-3.2-1b", "a100-80g"


def rows(paths, **kw):
    return table.to_frame(table.load_records(paths, **kw)).set_index("cell", drop=False)


# ---- records that break the contract ----

def test_a_peak_that_is_not_its_breakdown_is_an_error_row(tmp_path):
    rec = ok(spec(M, G, ["gc"]), BASE, tokens_per_s=900)
    rec["peak_bytes"] += 1
    (row,) = rows([bench_json(tmp_path / "gc.json", rec)]).itertuples()
    assert row.status == "error"
    assert row.reason.startswith("record breaks the contract (it said ok): breakdown sums to")
    assert all(getattr(row, c) is None or str(getattr(row, c)) == "<NA>" for c in ("peak_bytes", "parameters_bytes"))
    assert row.model == M and row.technique == "gc"          # who it is stays, to say which cell broke


@pytest.mark.parametrize("breakage, said", [
    (lambda r: r.pop("knobs"), "missing key 'knobs'"),                               # a record of an older contract
    (lambda r: r.update(verdicts=None), "an ok sim record has verdicts"),
    (lambda r: r["details"].pop("verdict_rule"), "details.verdict_rule missing"),
    (lambda r: r.update(mode="gpu"), "mode 'gpu' not in"),
    (lambda r: r.update(techniques="lora"), "is not a list of names"),
    (lambda r: r.update(breakdown_bytes=[1, 2]), "breakdown_bytes keys"),
])
def test_every_broken_record_is_an_error_row_that_says_why(tmp_path, breakage, said):
    rec = ok(spec("qwen2.5-7b", "sim", ["lora"], mode="sim"), BASE, flops=1e12)
    breakage(rec)
    frame = rows([bench_json(tmp_path / "c.json", rec)])
    assert list(frame["status"]) == ["error"]
    assert said in frame["reason"].iloc[0] and "record breaks the contract" in frame["reason"].iloc[0]
    html = build.render(frame, commit="abc", built_at="now")   # and the page still builds
    assert said.split("'")[0] in html


def test_committed_reference_cells_each_give_a_row_and_never_a_false_ok():
    """Holds whether the reference follows today's contract or an older one."""
    paths = sorted((REPO / "results" / "reference" / "cells").glob("*.json"))
    assert paths
    frame = rows(paths)
    assert len(frame) == len(paths)
    for path in paths:
        rec = json.loads(path.read_text())["benchmarks"][0]["extra_info"]
        row = frame.loc[rec["cell"]]
        if checks.problems(rec):
            assert row["status"] == "error" and row["reason"].startswith("record breaks the contract"), rec["cell"]
        else:
            assert row["status"] == rec["status"]


def test_cut_and_duplicated_cell_files(tmp_path):
    whole = bench_json(tmp_path / "a.json", demo_records()[0])
    cut = tmp_path / "cut.json"
    cut.write_text(whole.read_text()[: len(whole.read_text()) // 2])
    twin = bench_json(tmp_path / "twin.json", demo_records()[0])
    frame = table.to_frame(table.load_records([cut, whole, twin]))
    assert list(frame["status"]) == ["error"] * 3
    assert frame["reason"].iloc[0].startswith("unreadable results file cut.json: JSONDecodeError")
    assert "2 results files hold cell llama-3.2-1b__a100-80g__baseline (a.json, twin.json)" in frame["reason"].iloc[1]


# ---- cells are never silently dropped ----

STUDY = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["baseline", "gc", "lora"]}


def matrix_records(tmp_path):
    from bench.cells import matrix
    path = write_matrix(tmp_path, {"s": STUDY})
    cells = matrix.load(path)
    made = []
    for cid in ("tiny-llama__cpu__baseline", "tiny-llama__cpu__gc"):
        rec = ok(cells[cid], BASE, tokens_per_s=100)
        made.append(bench_json(tmp_path / f"{cid}.json", rec))
    return path, cells, made


def test_matrix_cells_without_a_file_get_an_error_row(tmp_path):
    path, cells, made = matrix_records(tmp_path)
    stray = bench_json(tmp_path / "other.json", ok(spec("m", "cpu", ["gc"], mode="cpu"), BASE, tokens_per_s=1))
    csv = tmp_path / "t.csv"
    assert table.main([*map(str, made), str(stray), "--out", str(csv), "--matrix", str(path)]) == 0
    frame = table.read_table(csv).set_index("cell")
    assert sorted(frame.index) == sorted([*cells, "m__cpu__gc"])
    lora = frame.loc["tiny-llama__cpu__lora"]
    assert lora["status"] == "error" and lora["reason"].startswith("no results file") and lora["technique"] == "lora"
    assert frame.loc["m__cpu__gc", "status"] == "error" and "is not in" in frame.loc["m__cpu__gc", "reason"]
    assert list(frame.loc[["tiny-llama__cpu__baseline", "tiny-llama__cpu__gc"], "status"]) == ["ok", "ok"]


def test_a_record_that_does_not_match_its_matrix_cell_is_an_error_row(tmp_path):
    path, cells, made = matrix_records(tmp_path)
    stale = ok(dict(cells["tiny-llama__cpu__gc"], seq_len=16), BASE, tokens_per_s=100)   # run under an older matrix
    bench_json(made[1], stale)
    frame = rows(made, cells=cells, matrix_name=str(path))
    row = frame.loc["tiny-llama__cpu__gc"]
    assert row["status"] == "error" and "seq_len is 16, the matrix says 32" in row["reason"]


# ---- a cut or corrupt table is refused ----

@pytest.fixture
def good_table(tmp_path):
    csv = tmp_path / "table.csv"
    assert table.main([*map(str, write_cells(tmp_path / "cells", demo_records())), "--out", str(csv)]) == 0
    table.read_table(csv)                                   # whole: reads
    return csv


def cut_last_row(text):
    return "\n".join(text.splitlines()[:-1]) + "\n"


def ragged(text):
    lines = text.split("\n")
    lines[2] += ",extra"
    return "\n".join(lines)


@pytest.mark.parametrize("damage, message", [
    (lambda t: t[:-1], "no newline at the end"),
    (lambda t: t[: len(t) // 2], "no newline at the end"),
    (cut_last_row, "rows, its manifest table.meta.json says"),
    (ragged, "row 2 has"),
    (lambda t: t.replace(",oom,", ",fine,", 1), "status 'fine'"),
    (lambda t: t.replace("peak_bytes", "peak", 1), "missing columns peak_bytes"),
    (lambda t: t.replace("llama-3.2-1b", "llama-3.2-2b", 1), "content differs from its manifest"),
    (lambda t: "", "empty file"),
])
def test_damaged_tables_are_refused(good_table, damage, message):
    good_table.write_text(damage(good_table.read_text()))
    with pytest.raises(TableError) as err:
        table.read_table(good_table)
    assert str(good_table) in str(err.value) and message in str(err.value)


def test_a_table_without_its_manifest_is_refused(good_table):
    table.table_check.manifest_path(good_table).unlink()
    with pytest.raises(TableError, match="no manifest table.meta.json"):
        table.read_table(good_table)


def test_build_fails_loudly_on_a_cut_table(good_table, tmp_path):
    good_table.write_text(cut_last_row(good_table.read_text()))
    out = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "report.build", str(good_table), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not out.exists()
    assert f"report.build: error: {good_table}:" in done.stderr and "rows were lost" in done.stderr


def test_failed_cells_pass_the_check_too(tmp_path):
    recs = [failed(spec(M, G, ["s8192"], seq_len=8192), "oom", "CUDA out of memory")]
    frame = rows(write_cells(tmp_path, recs))
    assert list(frame["status"]) == ["oom"] and frame["reason"].iloc[0] == "CUDA out of memory"


def test_a_record_made_from_other_inputs_is_a_stale_error_row(tmp_path):
    """Edit a model config after its cell ran: the table, given the matrix, says the row is
    stale and which input changed, instead of showing the old numbers as ok."""
    models = tmp_path / "models"
    models.mkdir()
    config = json.loads((REPO / "matrix" / "models" / "tiny-llama.json").read_text())
    (models / "m.json").write_text(json.dumps(config))
    path = write_matrix(tmp_path, {"s": {"mode": "cpu", "models": ["m"], "gpus": ["cpu"], "techniques": ["gc"]}},
                        models_dir=str(models))
    spec = matrix.load(path)["m__cpu__gc"]
    (tmp_path / "cells").mkdir()
    cell = bench_json(tmp_path / "cells" / "m__cpu__gc.json", record.failure(spec, "skipped", "made before the edit"))
    fresh = table.load_records([cell], matrix.load(path), "m.yaml")
    assert [r["status"] for r in fresh if r["cell"] == "m__cpu__gc"] == ["skipped"]
    (models / "m.json").write_text(json.dumps({**config, "num_hidden_layers": config["num_hidden_layers"] + 1}))
    stale = [r for r in table.load_records([cell], matrix.load(path), "m.yaml") if r["cell"] == "m__cpu__gc"]
    assert [r["status"] for r in stale] == ["error"]
    assert "stale" in stale[0]["reason"] and "model_config" in stale[0]["reason"]
