"""The data's share of the host memory (bench/dataset/hostshare.py): a line through the measured load
paths (the reference measurement), a rank's figure and the node's, and said as missing where it is not
modelled."""
from __future__ import annotations

import json

from bench.dataset import command, hostshare
from tests.helpers import REPO

REFERENCE = REPO / "results" / "reference" / "dataset" / "hostload.json"


def test_the_line_passes_through_the_measured_sizes():
    doc, why = hostshare.read(REFERENCE)
    assert why is None
    for path in ("datasets-map", "dataloader-workers-0", "json-lists"):
        a, b = hostshare.line(doc, path)
        for r in (r for r in doc["rows"] if r["path"] == path):
            got = a + b * r["dataset_bytes"]
            # three sizes, one line: each point within 60 MiB of it (the measurement's own scatter)
            assert abs(got - r["peak_above_baseline_bytes"]) < 60 * 2 ** 20, (path, r["scale"])
        assert abs(b - doc["growth"][path]) < 0.01   # the slope the measurement states


def test_a_ranks_share_and_the_nodes():
    doc, _ = hostshare.read(REFERENCE)
    size = 20 * 2 ** 20
    one, four = hostshare.share(doc, size, 1), hostshare.share(doc, size, 4)
    assert set(one["phases"]) == {"tokenize", "train"} and one["within_measured"]
    for phase in one["phases"]:
        assert four["phases"][phase]["rank_bytes"] == one["phases"][phase]["rank_bytes"] > 0
        assert four["phases"][phase]["node_bytes"] == 4 * one["phases"][phase]["rank_bytes"]
    assert one["provenance"].startswith("modelled")
    workers = hostshare.share(doc, size, 1, workers=True)
    assert workers["phases"]["tokenize"]["path"] == "datasets-map-num-proc-2"
    assert not hostshare.share(doc, 2 ** 30, 1)["within_measured"]


def test_not_modelled_is_said_never_guessed(tmp_path):
    assert command.data_share(None, 2) is None                            # --lengths: no file to load
    parquet = tmp_path / "rows.parquet"
    parquet.write_bytes(b"PAR1")
    assert "JSON lines files only" in command.data_share(str(parquet), 1)["missing"]
    assert "a Hub dataset" in command.data_share("org/some-dataset", 1)["missing"]
    rows = tmp_path / "chat.jsonl"
    rows.write_text(json.dumps({"text": "hello"}) + "\n")
    got = command.data_share(str(rows), 2)
    assert got["ranks_per_node"] == 2 and got["dataset_bytes"] == rows.stat().st_size


def test_a_stale_measurement_is_not_read(tmp_path):
    doc = json.loads(REFERENCE.read_text())
    stale = tmp_path / "h.json"
    stale.write_text(json.dumps(dict(doc, code_sha256="0" * 64)))
    assert hostshare.read(stale)[0] is None and "changed since" in hostshare.read(stale)[1]


def test_the_nodes_need_is_the_recipes_and_the_datas():
    from bench.estimate import hostmem
    doc = json.loads((REPO / "results" / "reference" / "cells" / "qwen2.5-7b__sim__lora+gc+bf16.json").read_text())
    rec = doc["benchmarks"][0]["extra_info"] if "benchmarks" in doc else doc
    data = hostshare.share(hostshare.read(REFERENCE)[0], 20 * 2 ** 20, 1)
    recipe = hostmem.need(rec, "rtx-4090")["bytes"]
    got = hostshare.node_need(rec, "rtx-4090", data)
    larger = max(v["node_bytes"] for v in data["phases"].values())
    assert got["recipe_bytes"] == recipe and got["data_bytes"] == larger
    assert got["need_bytes"] == recipe + larger and got["verdict"] is None   # without --host-mem: shown, not judged
    assert hostshare.node_need(rec, "rtx-4090", data, got["need_bytes"])["verdict"] == "fits"
    assert hostshare.node_need(rec, "rtx-4090", data, got["need_bytes"] - 1)["verdict"] == "oom"
    alone = hostshare.node_need(rec, "rtx-4090", None)   # --lengths: no data file, the recipe's need alone
    assert alone["need_bytes"] == recipe and alone["data_bytes"] is None
    assert hostshare.node_need({"status": "error"}, "rtx-4090", data) is None
