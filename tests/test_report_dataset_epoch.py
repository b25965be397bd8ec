"""The report's dataset-epoch section (report/dataset_epoch.py) reads the reference study and says
why when a study is stale, cut or foreign, never showing it as an answer."""
from __future__ import annotations

import json

from report import dataset_epoch
from tests.helpers import REPO

STUDY = REPO / "results" / "reference" / "dataset" / "epoch.json"


def test_the_reference_study_is_current_and_tells_the_staircase():
    doc, why = dataset_epoch.read(STUDY)
    assert why is None
    pad, pack = doc["padding"]["epoch"], doc["packing"]["epoch"]
    # the seed's story from a real dataset: padded batches climb in stairs past the card while no
    # step alone needs as much; packed rows hold one level below it
    stairs = [s["reserved_bytes"] for s in pad["staircase"]]
    assert len(stairs) >= 4 and stairs == sorted(stairs)
    assert pad["verdict"] in ("tight", "oom") and pad["per_step_allocated"]["max"] < pad["capacity_bytes"]
    assert pack["verdict"] == "fits" and pack["reserved_peak_bytes"] < pad["reserved_peak_bytes"]
    section = dataset_epoch.section(STUDY)
    assert section["kind"] == "dataset_epoch" and section["image"].startswith("data:image/png;base64,")
    assert any(line.startswith("Padded (") and "Verdict: " + pad["verdict"] in line for line in section["lines"])
    need = doc["padding"]["host_need"]   # the recipe's host need and the data's, on the node
    assert need["need_bytes"] == need["recipe_bytes"] + need["data_bytes"] and need["data_bytes"] > 0
    assert any(line.startswith("Host memory on the node") for line in section["lines"])


def _edit(tmp_path, change):
    doc = json.loads(STUDY.read_text())
    change(doc)
    path = tmp_path / "epoch.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_study_made_by_other_engine_code_is_stale(tmp_path):
    path = _edit(tmp_path, lambda d: d["versions"].update(ft_membench_engine="0" * 64))
    doc, why = dataset_epoch.read(path)
    assert doc is None and "is stale: made by engine 00000000" in why
    assert dataset_epoch.section(path)["image"] is None


def test_a_study_made_by_other_dataset_code_is_stale(tmp_path):
    path = _edit(tmp_path, lambda d: d.update(code_sha256="0" * 64))
    assert "bench/dataset/ changed since it was made" in dataset_epoch.read(path)[1]


def test_a_changed_dataset_makes_it_stale(tmp_path):
    path = _edit(tmp_path, lambda d: d["inputs_sha256"].update({"tests/data/c4-demo.jsonl": "f" * 64}))
    assert "tests/data/c4-demo.jsonl changed since it was made" in dataset_epoch.read(path)[1]


def test_cut_or_foreign_files_are_named(tmp_path):
    cut = tmp_path / "cut.json"
    cut.write_text(STUDY.read_text()[:500])
    assert "cannot read it" in dataset_epoch.read(cut)[1]
    path = _edit(tmp_path, lambda d: d["padding"]["epoch"].pop("by_step"))
    assert "not a dataset-epoch study" in dataset_epoch.read(path)[1]
    path = _edit(tmp_path, lambda d: d["padding"]["epoch"].update(verdict="maybe"))
    assert "not a dataset-epoch study" in dataset_epoch.read(path)[1]
    assert dataset_epoch.section(None) is None


def test_the_study_digest_covers_every_module_it_runs():
    """A module added to bench/dataset/ is either in the study's code digest or named here as not run by it."""
    from bench.dataset import study
    # hostload.py: the host measurement, digested apart; words.py: the CLI's text, which the study does not print
    files = {p.name for p in (REPO / "bench" / "dataset").glob("*.py")} - {"__init__.py", "hostload.py", "words.py"}
    assert set(study.CODE) == files
