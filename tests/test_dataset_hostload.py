"""Host memory of the dataset's load paths (bench/dataset/hostload.py): real runs of each path in
fresh processes, sampled from outside; the report reads the measurements only if they are whole
and of the dataset in the tree."""
from __future__ import annotations

import json

import pytest

from bench.dataset import hostload
from report import dataset_epoch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def measured():
    return hostload.run([1, 2], paths=("json-lists", "datasets-map", "dataloader-workers-0"), say=lambda m: None)


def test_every_path_reads_every_token(measured):
    rows = measured["rows"]
    assert [(r["path"], r["scale"]) for r in rows] == [(p, k) for k in (1, 2) for p in
                                                      ("json-lists", "datasets-map", "dataloader-workers-0")]
    for k in (1, 2):
        tokens = {r["path"]: r["tokens"] for r in rows if r["scale"] == k}
        assert len(set(tokens.values())) == 1 and tokens["json-lists"] > 0, tokens   # the same tokens each way
    one, two = ([r["tokens"] for r in rows if r["scale"] == k][0] for k in (1, 2))
    assert two == 2 * one
    for r in rows:
        assert r["baseline_pss_bytes"] > 100 * 2 ** 20 and r["peak_pss_bytes"] >= r["baseline_pss_bytes"]
    assert set(measured["growth"]) == {"json-lists", "datasets-map", "dataloader-workers-0"}


def test_the_report_reads_whole_measurements_only(measured, tmp_path):
    good = tmp_path / "host.json"
    good.write_text(json.dumps(measured))
    doc, why = dataset_epoch.read_host(good)
    assert why is None and [r["path"] for r in dataset_epoch.host_rows(doc)] == [
        "json-lists", "datasets-map", "dataloader-workers-0"]
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(dict(measured, dataset_sha256="0" * 64)))
    assert "changed since it was measured" in dataset_epoch.read_host(stale)[1]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(dict(measured, code_sha256="0" * 64)))
    assert "hostload.py changed since it was measured" in dataset_epoch.read_host(other)[1]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(measured, rows=[{"path": "json-lists"}])))
    assert "not a host-memory measurement" in dataset_epoch.read_host(bad)[1]
