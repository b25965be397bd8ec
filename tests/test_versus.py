"""report.versus: two results folders -> one page and one CSV; bad input never crashes and
never reads as a complete comparison."""
import json
import re
import csv
import subprocess
import sys
from pathlib import Path

import pytest

from bench.estimate import verdicts
from report import versus
from report.versus_rows import change_pct
from tests.versus_helpers import CELLS, edit, folder

REPO = Path(__file__).resolve().parent.parent
SIM = "qwen2.5-7b__sim__lora"


def run(old, new, out, *extra):
    code = versus.main([str(old), str(new), "--out", str(out), *extra])
    page = (out / "versus.html").read_text()
    with open(out / "versus.csv") as fh:
        rows = list(csv.DictReader(fh))
    return code, page, rows


def test_two_equal_folders_compare_complete_with_nothing_moved(tmp_path):
    code, page, rows = run(folder(tmp_path / "a"), folder(tmp_path / "b"), tmp_path / "out")
    assert code == 0 and "Complete" in page and "INCOMPLETE" not in page
    assert sorted(r["cell"] for r in rows) == sorted(CELLS)
    assert all(r["moved"] == "False" and r["presence"] == "both" for r in rows)
    lora = next(r for r in rows if r["cell"] == SIM)
    assert lora["peak_bytes_old"] == lora["peak_bytes_new"] == "66214027776" and lora["peak_bytes_change_pct"] == "0.0000"
    assert lora["group"] == "sim-7b-8b"   # pytest-benchmark's default grouping: the benchmark group (study)


def test_a_verdict_change_is_highlighted_and_listed_first(tmp_path):
    old, new = folder(tmp_path / "a"), folder(tmp_path / "b")

    def grow(r):   # more activations: the 80 GB cards no longer fit (the verdicts follow the replay's reserved peak)
        r["breakdown_bytes"]["activations"] += 40 * 2**30
        r["peak_bytes"] += 40 * 2**30
        model = r["allocator_model"]
        r["modelled_reserved_peak_bytes"] = model["reserved_peak_bytes"] = model["reserved_peak_bytes"] + 40 * 2**30
        profiles = {g: {"memory_bytes": b} for g, b in r["verdict_gpu_memory_bytes"].items()}
        model["first_oom"] = {g: {"step": 0} if model["reserved_peak_bytes"] > verdicts.capacity(p) else None
                              for g, p in profiles.items()}
        r["verdicts"] = verdicts.from_replay(model, profiles)
        r["details"]["load_phase"]["verdicts"] = verdicts.load_phase(model, profiles, None)["verdicts"]
    edit(new, SIM, grow)
    code, page, rows = run(old, new, tmp_path / "out", "--fail-on-move")
    assert code == 1 and rows[0]["cell"] == SIM and rows[0]["moved"] == "True"
    assert rows[0]["verdict_changes"].startswith("a100-80gb: fits -> oom")
    assert float(rows[0]["peak_bytes_change_pct"]) == pytest.approx(change_pct(66214027776, 66214027776 + 40 * 2**30))
    assert '<span class="verdict-change">a100-80gb: fits → oom</span>' in page
    assert page.index("Moved beyond tolerance") < page.index(SIM) < page.index("Within tolerance")


def test_a_one_byte_move_is_beyond_tolerance_and_cpu_throughput_noise_is_not(tmp_path):
    old, new = folder(tmp_path / "a"), folder(tmp_path / "b")
    edit(new, "tiny-llama__cpu__baseline", lambda r: r.update(tokens_per_s=r["tokens_per_s"] * 1.02))
    edit(new, "qwen2.5-7b__sim__baseline", lambda r: (r["breakdown_bytes"].update(other=r["breakdown_bytes"]["other"] + 512),
                                                      r.update(peak_bytes=r["peak_bytes"] + 512)))
    code, page, rows = run(old, new, tmp_path / "out")
    moved = {r["cell"]: r["why"] for r in rows if r["moved"] == "True"}
    assert code == 0 and list(moved) == ["qwen2.5-7b__sim__baseline"]
    assert "+512 B" in page


def test_different_cell_sets_are_incomplete_with_added_and_removed_listed(tmp_path):
    old = folder(tmp_path / "a")
    new = folder(tmp_path / "b", CELLS[:2] + ("tiny-llama__cpu__gc",))
    code, page, rows = run(old, new, tmp_path / "out")
    assert code == 2 and "INCOMPLETE comparison" in page and "different cell sets" in page
    presence = {r["cell"]: r["presence"] for r in rows}
    assert presence["tiny-llama__cpu__gc"] == "added" and presence["tiny-llama__cpu__baseline"] == "removed"
    code, page, _ = run(old, new, tmp_path / "out2", "--only", "__sim__")
    assert code == 0 and "Complete" in page


def test_corrupt_and_contract_breaking_files_make_it_incomplete(tmp_path):
    old, new = folder(tmp_path / "a"), folder(tmp_path / "b")
    path = new / "cells" / f"{SIM}.json"
    path.write_text(path.read_text()[:300])
    edit(old, "tiny-llama__cpu__baseline", lambda r: r.update(peak_bytes=1))
    code, page, _ = run(old, new, tmp_path / "out")
    assert code == 2 and "INCOMPLETE comparison" in page
    assert f"NEW {SIM}.json: corrupt JSON" in page
    assert "OLD tiny-llama__cpu__baseline.json: breaks the record contract: breakdown sums to" in page


def test_records_with_different_inputs_are_not_the_same_experiment(tmp_path):
    old, new = folder(tmp_path / "a"), folder(tmp_path / "b")
    edit(new, SIM, lambda r: r.update(seq_len=4096))  # the record and the spec it ran from: another experiment
    path = new / "cells" / f"{SIM}.json"
    doc = json.loads(path.read_text())
    doc["benchmarks"][0]["params"]["cell_spec"]["seq_len"] = 4096
    from bench.records import seal
    path.write_text(json.dumps(seal.sealed(doc)))   # another run's record, written as the harness writes it
    edit(new, "tiny-llama__cpu__baseline", lambda r: r.update(knobs={"gc": True}))   # one side only: not checked
    code, page, rows = run(old, new, tmp_path / "out")
    assert code == 2 and f"{SIM}: not the same experiment on both sides (seq_len: 2048 -&gt; 4096)" in page
    assert next(r for r in rows if r["cell"] == SIM)["inputs_differ"] == "seq_len: 2048 -> 4096"


def test_another_checkout_path_is_not_another_experiment(tmp_path):
    zero3 = ("qwen2.5-7b__sim__zero3+w4",)   # its spec names a DeepSpeed config file by path
    old, new = folder(tmp_path / "a", zero3), folder(tmp_path / "b", zero3)
    path = new / "cells" / f"{zero3[0]}.json"
    text = path.read_text()
    checkout = re.search(r'"(/[^"]*?)/matrix/', text).group(1)  # where the reference was built
    from bench.records import seal   # the same record made in another checkout, written as the harness writes it
    path.write_text(json.dumps(seal.sealed(json.loads(text.replace(f"{checkout}/matrix/", "/elsewhere/matrix/")))))
    code, page, _ = run(old, new, tmp_path / "out")
    assert "/elsewhere/matrix/" in path.read_text() and code == 0 and "Complete" in page


def test_missing_folder_writes_an_incomplete_page_and_record_text_is_escaped(tmp_path):
    old = folder(tmp_path / "a")
    edit(old, "tiny-llama__cpu__fa2", lambda r: r["versions"].update(peft="<script>alert(1)</script>"))
    code, page, rows = run(old, tmp_path / "missing", tmp_path / "out")
    assert code == 2 and "no such results folder" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert all(r["presence"] == "removed" for r in rows)


def test_environment_difference_heads_the_page(tmp_path):
    old, new = folder(tmp_path / "a"), folder(tmp_path / "b")
    for cell in CELLS:
        edit(new, cell, lambda r: r["versions"].update(peft="0.17.0") if r["versions"] else None)
    _, page, _ = run(old, new, tmp_path / "out", "--only", "__sim__")
    env = page[page.index("<h2>Environment</h2>"):page.index("<h2>Tolerances</h2>")]
    assert '<tr class="changed"><td>versions</td><td>peft</td><td>0.21.2</td><td>0.17.0</td></tr>' in env


def test_percent_change_follows_pytest_benchmark():
    assert change_pct(100, 112) == pytest.approx(12.0) and change_pct(0, 0) == 0.0 and change_pct(None, 1) is None
    assert change_pct(0, 5) == float("inf")


@pytest.mark.slow
def test_snakemake_versus_rule(tmp_path):
    old, new = folder(tmp_path / "a"), folder(tmp_path / "b")
    out = tmp_path / "vs"
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "versus", "--config", f"old={old}",
                    f"new={new}", f"out={out}"], cwd=REPO, check=True, capture_output=True)
    assert "Complete" in (out / "versus.html").read_text()


def test_rerun_and_comparison_modules_stay_torch_free():
    code = ("import sys, bench.reproduce, bench.records.identical, bench.records.results, bench.records.noise, "
            "bench.records.lock, report.versus; "
            "print([m for m in ('torch', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_a_cell_that_now_fails_says_so_once_with_its_reason(tmp_path):
    old, new = folder(tmp_path / "a"), folder(tmp_path / "b")
    edit(new, SIM, lambda r: r.update(status="error", reason="ImportError: no such name", peak_bytes=None,
                                      breakdown_bytes=None, verdicts=None, flops_per_step=None))
    code, page, rows = run(old, new, tmp_path / "out")
    assert code == 0 and rows[0]["cell"] == SIM and rows[0]["why"] == "status ok -> error: ImportError: no such name"
    assert "a100-80gb: fits -> -" in rows[0]["verdict_changes"]
    assert '<span class="verdict-change">a100-80gb: fits → -</span>' in page


def test_a_record_edited_away_from_its_own_spec_is_refused(tmp_path):
    """checks.gate: a record whose inputs (digests, knobs, shape) are not those of the cell spec
    stored beside it is not compared, and the comparison says why."""
    old, new = folder(tmp_path / "a"), folder(tmp_path / "b")
    edit(new, SIM, lambda r: r.update(inputs_sha256={}))
    code, page, rows = run(old, new, tmp_path / "out")
    assert code == 2 and f"NEW {SIM}.json: does not match the cell spec it was run from: inputs_sha256" in page
