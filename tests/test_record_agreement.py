"""A record's verdicts and need agree with its own numbers: stored reference
records, edited in one field, are refused by the record gate, the results reader, the
workflow table and the fit command, naming the field that disagrees."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.records import agreement, checks, results
from bench.cells import inputs
from report import table

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "results" / "reference" / "cells"
LORA = "qwen2.5-7b__sim__lora+gc"


def rec_of(cell: str) -> dict:
    return json.loads((REF / f"{cell}.json").read_text())["benchmarks"][0]["extra_info"]


def test_every_reference_record_agrees_with_itself():
    found = {p.stem: agreement.disagreements(json.loads(p.read_text())["benchmarks"][0]["extra_info"])
             for p in sorted(REF.glob("*.json"))}
    assert {c: d for c, d in found.items() if d} == {}


@pytest.mark.parametrize("cell, edit, named", [
    (LORA, lambda r: r["verdicts"].update({"rtx-4090": "fits"}), "verdicts.rtx-4090 is 'fits', its own numbers give 'oom'"),
    (LORA, lambda r: r["verdicts"].update({"h100-80gb": "oom"}), "verdicts.h100-80gb is 'oom'"),
    (LORA, lambda r: r.update(modelled_reserved_peak_bytes=10 * 2**30), "modelled_reserved_peak_bytes is 10737418240"),
    (LORA, lambda r: r["details"].update(verdict_reserve_bytes=1), "details.verdict_reserve_bytes is 1"),
    (LORA, lambda r: r["allocator_model"]["first_oom"].update({"h100-80gb": {"step": 0}}),
     "allocator_model.first_oom.h100-80gb is a failed allocation"),
    (LORA, lambda r: r["details"]["load_phase"]["verdicts"].update({"rtx-4090": "fits"}),
     "details.load_phase.verdicts.rtx-4090"),
    (LORA, lambda r: r["details"]["load_phase"].update(largest_shard_bytes=1), "details.load_phase.largest_shard_bytes is 1"),
    ("qwen2.5-7b__sim__zero3+w8", lambda r: r["verdicts"].update({"l40s": "fits"}), "verdicts.l40s is 'fits'"),
    ("qwen2.5-7b__sim__zero3+w8", lambda r: r["details"]["load_phase"]["verdicts"].update({"h200": "oom while loading"}),
     "details.load_phase.verdicts.h200"),
    ("qwen2.5-7b__sim__generate+b8+s2048+bf16", lambda r: r["verdicts"].update({"t4": "fits"}), "verdicts.t4 is 'fits'"),
    ("qwen2.5-7b__sim__vllm+util0.8", lambda r: r["verdicts"].update({"rtx-4090": "fits"}),
     "verdicts.rtx-4090 is 'fits'"),
    ("qwen2.5-7b__sim__vllm+util0.8", lambda r: r["details"]["vllm"]["plans"]["rtx-4090"].update(starts=True),
     "details.vllm.plans.rtx-4090 says starts=True"),
    ("llama-3.2-3b__sim__qlora+bf16+packing+compile+chunked-ce+gc+act-offload",
     lambda r: r["details"]["paging"]["a100-80gb"].update(paged_out_bytes=2**30), "details.paging.a100-80gb"),
])
def test_one_edited_field_is_named_by_the_gate(cell, edit, named):
    rec = rec_of(cell)
    assert checks.problems(rec) == []
    edit(rec)
    found = checks.gate(rec)
    assert any(named in p for p in found), found


def copied(tmp_path: Path, cell: str, edit) -> Path:
    """A results folder holding one reference record, edited, stamped with this engine's digest and sealed as the
    harness seals what it writes (bench/records/seal.py): a record at odds with itself as a faulty run would write
    it, which the agreement gate, not the seal, must catch."""
    (tmp_path / "cells").mkdir(parents=True)
    path = tmp_path / "cells" / f"{cell}.json"
    doc = json.loads((REF / f"{cell}.json").read_text())
    rec = doc["benchmarks"][0]["extra_info"]
    rec["versions"]["ft_membench_engine"] = inputs.engine_digest()
    edit(rec)
    from bench.records import seal
    path.write_text(json.dumps(seal.sealed(doc)))
    return path


def test_results_and_the_workflow_table_refuse_a_record_at_odds_with_itself(tmp_path):
    # T03: "oom" on a card the replay's reserved peak fits, as an error row, never an ok one
    path = copied(tmp_path, LORA, lambda r: r["verdicts"].update({"h200": "oom"}))
    rs = results.read(tmp_path)
    assert not rs.records and "verdicts.h200 is 'oom', its own numbers give 'fits'" in str(rs.problems[0])
    (row,) = table.load_records([path])
    assert row["status"] == "error" and "verdicts.h200" in row["reason"]


def test_fit_refuses_an_edited_verdict_and_names_it(tmp_path):
    copied(tmp_path / "res", LORA, lambda r: r["verdicts"].update({"rtx-4090": "fits"}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "bench.cli", "fit", "qwen2.5-7b", "--gpu", "rtx-4090", "--techniques",
                          "lora+gc", "--no-search", "--no-hints", "--json", "--results", str(tmp_path / "res")],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert out.returncode != 0, out.stdout
    (line,) = json.loads(out.stdout)["recipes"]
    assert line["verdict"] == "error" and "verdicts.rtx-4090 is 'fits', its own numbers give 'oom'" in line["reason"]
