"""The need's out-of-sample error (bench/corpus/answer_error.py): held-out rows of the answer's kind,
read from the reference scoreboard, checked, and shown by the fit command beside its need."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.corpus import answer_error as ae

ROOT = Path(__file__).resolve().parents[1]


def row(name, err, cell="m__sim__qlora+gc", role="held-out", measure="allocated", n_gpus=1):
    return {"row": name, "role": role, "measure": measure, "cell": cell, "n_gpus": n_gpus,
            "tools": {ae.OURS: {"signed_error": err}}}


def test_a_missing_or_malformed_scoreboard_names_the_file_and_key(tmp_path):
    with pytest.raises(ae.BoardError, match="no scoreboard"):
        ae.load(tmp_path / "none.json")
    bad = tmp_path / "board.json"
    bad.write_text("{not json")
    with pytest.raises(ae.BoardError, match="unreadable"):
        ae.load(bad)
    bad.write_text(json.dumps({"rows": {}}))
    with pytest.raises(ae.BoardError, match="key 'rows'"):
        ae.load(bad)
    bad.write_text(json.dumps({"rows": [{"row": "x", "tools": {ae.OURS: {"signed_error": "0.1"}}, "role": "held-out",
                                         "measure": "allocated", "cell": "c", "n_gpus": 1}]}))
    with pytest.raises(ae.BoardError, match=r"rows\[0\] \(x\).*not a number"):
        ae.load(bad)
    bad.write_text(json.dumps({"rows": [{"row": "x", "tools": {ae.OURS: {"signed_error": 0.1}}}]}))
    with pytest.raises(ae.BoardError, match="no key 'role'"):
        ae.load(bad)


@pytest.mark.parametrize("names, world, kind", [
    (["qlora", "gc"], 1, ("one GPU", "QLoRA")),
    (["lora", "gc", "bf16"], 1, ("one GPU", "LoRA")),
    (["qlora", "fsdp", "gc", "w2"], 2, ("FSDP", "QLoRA")),
    (["lora", "fsdp1", "bf16", "w2"], 2, ("FSDP", "LoRA")),
    (["zero3", "w4"], 4, ("ZeRO", "full fine-tune")),
])
def test_the_kind_of_an_answer_is_its_sharding_and_adapter(names, world, kind):
    assert ae.kind(names, world) == kind


def test_only_held_out_rows_with_a_stated_measure_count():
    rows = [row(f"h{i}", -0.01 * i) for i in range(5)] + [
        row("dev", -0.5, role="development"), row("guess", -0.6, measure="not-stated"),
        row("unscored", None), row("no-cell", -0.7, cell=None)]
    b = ae.band(["qlora", "gc"], 1, rows)
    assert b["rows"] == 5 and b["scope"] == "one GPU, QLoRA"
    assert b["worst_under"] == pytest.approx(-0.04) and b["worst_under_row"] == "h4"
    assert b["worst_over"] == 0.0 and b["worst_over_row"] is None
    assert b["median_abs"] == pytest.approx(0.02)


def test_too_few_of_its_kind_widens_and_says_so():
    fsdp = [row(f"f{i}", 0.01 * i, cell="m__sim__lora+fsdp+w2", n_gpus=2) for i in range(4)]
    zero = [row("z", -0.3, cell="m__sim__zero3+w4", n_gpus=4)]
    one = [row(f"o{i}", -0.9, cell="m__sim__lora") for i in range(9)]
    b = ae.band(["zero3", "w4"], 4, fsdp + zero + one)
    assert b["scope"] == "several GPUs" and b["kind"] == "ZeRO, full fine-tune" and b["rows"] == 5
    assert b["worst_under_row"] == "z"     # never the one-GPU rows
    assert "too few of its own kind (ZeRO, full fine-tune), so over several GPUs" in ae.note(b)
    assert ae.band(["zero3", "w4"], 4, []) is None and ae.note(None).startswith("no held-out")


def test_the_need_at_the_worst_errors():
    rows = [row("a", -0.2), row("b", 0.25), row("c", 0.0), row("d", 0.0), row("e", 0.0)]
    gib = 1 << 30
    b = ae.for_need(["qlora", "gc"], 1, 16 * gib, 24 * gib, rows)
    assert b["need_at_worst_under_bytes"] == 20 * gib and b["fits_at_worst_under"]
    assert b["need_at_worst_over_bytes"] == int(16 * gib / 1.25)
    assert "still within" in ae.at_worst(b, 16 * gib, 24 * gib)
    b = ae.for_need(["qlora", "gc"], 1, 20 * gib, 24 * gib, rows)
    assert not b["fits_at_worst_under"] and "rests on the estimate" in ae.at_worst(b, 20 * gib, 24 * gib)
    b = ae.for_need(["qlora", "gc"], 1, 28 * gib, 24 * gib, rows)   # does not fit; over as the worst, 22.4: would
    assert b["fits_at_worst_over"] and "within" in ae.at_worst(b, 28 * gib, 24 * gib)


def test_every_held_out_row_of_the_reference_is_read_and_kinded():
    rows = ae.load()
    pool = ae.scored(rows)
    stated = [r for r in rows if r["role"] == "held-out" and r["measure"] in ae.STATED and r["cell"]
              and r["tools"][ae.OURS]["signed_error"] is not None]
    assert len(pool) == len(stated) > 100   # no scored row dropped because its cell id no longer resolves
    kinds = {k for k, _ in pool}
    assert {("one GPU", "QLoRA"), ("one GPU", "LoRA"), ("FSDP", "LoRA"), ("FSDP", "QLoRA")} <= kinds


def test_the_fit_command_shows_the_error_beside_its_need(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, "-m", "bench.cli", "fit", "qwen2.5-7b", "--gpu", "rtx-4090", "--techniques", "qlora+gc",
            "--no-hints", "--results", str(tmp_path / "res")]
    text = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert text.returncode == 0, text.stderr
    out = text.stdout.splitlines()
    memory = out.index(next(ln for ln in out if ln.startswith("memory: the need's out-of-sample error")))
    assert out[memory + 1].startswith("  one GPU, QLoRA (qlora+gc): ") and "held-out published runs: median error" in out[memory + 1]
    assert out[memory + 2] == "  1 verdict(s) hold at their kind's worst error"   # 11.09 GiB, 14.06 at the worst: fits
    doc = json.loads(subprocess.run([*args, "--json"], capture_output=True, text=True, env=env, cwd=ROOT,
                                    timeout=300).stdout)
    err = doc["recipes"][0]["need_error"]
    assert doc["need_error_from"] == str(ae.BOARD) and err["kind"] == "one GPU, QLoRA" and err["rows"] >= ae.MIN_ROWS
    need = doc["recipes"][0]["need_bytes"]
    assert err["need_at_worst_under_bytes"] == int(need / (1 + err["worst_under"])) >= need


def test_a_verdict_that_turns_at_the_worst_error_is_named():
    from bench.fit import table
    cells = ROOT / "results" / "reference" / "cells"
    lines = []
    for tech in ("qlora", "qlora+gc"):   # qwen2.5-7b on an RTX 4090: 22.23 and 11.09 GiB of its 23.99
        doc = json.loads((cells / f"qwen2.5-7b__sim__{tech}.json").read_text())
        lines.append({"technique": tech, "record": doc["benchmarks"][0]["extra_info"]})
    profile = lines[0]["record"]["verdict_gpu_memory_bytes"]
    out = table.memory_error_lines(lines, "rtx-4090", {"memory_bytes": profile["rtx-4090"]})
    assert out[1].startswith("  one GPU, QLoRA (qlora, qlora+gc): ")
    assert out[2] == "  verdicts that turn at their kind's worst error:"
    assert out[3].startswith("    qlora: under as the worst, ") and "(the verdict rests on the estimate)" in out[3]
    assert out[4] == "  the other 1 verdict(s) hold at their kind's worst error"


def test_by_kind_is_each_kinds_own_band():
    rows = [row(f"q{i}", -0.1 * i) for i in range(5)] + [row("f", 0.3, cell="m__sim__lora+fsdp+w2", n_gpus=2)]
    kinds = {k["kind"]: k for k in ae.by_kind(rows)}
    assert set(kinds) == {"one GPU, QLoRA", "FSDP, LoRA"}
    q = kinds["one GPU, QLoRA"]
    assert (q["rows"], q["widens"], q["worst_under_row"], q["worst_over_row"]) == (5, False, "q4", None)
    assert q["worst_under"] == pytest.approx(-0.4) and q["median_abs"] == pytest.approx(0.2)
    f = kinds["FSDP, LoRA"]
    assert (f["rows"], f["widens"], f["worst_under_row"], f["worst_over"]) == (1, True, None, 0.3)
    reference = {k["kind"]: k for k in ae.by_kind(ae.load())}   # the CLI's band of a kind with enough rows is this
    b = ae.band(["qlora", "gc"], 1, ae.load())
    assert reference["one GPU, QLoRA"]["worst_under"] == b["worst_under"] and reference["one GPU, QLoRA"]["rows"] == b["rows"]
