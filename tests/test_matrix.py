"""The matrix loader: valid files expand to cells with stable ids; bad files fail before
anything runs, naming the file, the key and the reason."""
import re
import subprocess
import sys

import pytest

from bench import matrix
from tests.helpers import REPO

ID = re.compile(r"[a-z0-9.-]+__[a-z0-9.-]+__[a-z0-9.-]+(\+[a-z0-9.-]+)*")
STUDY = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["gc", "lora+gc"]}


def test_default_matrix_loads_with_well_formed_unique_ids():
    cells = matrix.load()
    assert cells, "the default matrix has cells"
    for cid, spec in cells.items():
        assert ID.fullmatch(cid), cid
        assert spec["cell"] == cid
        assert spec["baseline_cell"] in cells, f"{cid} compares against a cell that is not in the matrix"


def test_ids_carry_axes_as_data(matrix_file):
    cells = matrix.load(matrix_file({"s": STUDY}))
    assert list(cells) == ["tiny-llama__cpu__baseline", "tiny-llama__cpu__gc", "tiny-llama__cpu__lora+gc"]
    spec = cells["tiny-llama__cpu__lora+gc"]
    assert (spec["model"], spec["gpu"], spec["techniques"], spec["mode"]) == ("tiny-llama", "cpu", ["lora", "gc"], "cpu")
    assert spec["knobs"]["adapter"] == "lora" and spec["knobs"]["gc"] is True
    assert spec["baseline_cell"] == "tiny-llama__cpu__baseline"


def test_sim_cells_share_one_simulation_across_gpus(matrix_file):
    study = {"mode": "sim", "models": ["qwen2.5-7b"], "gpus": ["h100-80gb", "rtx-4090"], "techniques": ["lora"]}
    cells = matrix.load(matrix_file({"s": study}))
    assert list(cells) == ["qwen2.5-7b__sim__baseline", "qwen2.5-7b__sim__lora"]
    assert set(cells["qwen2.5-7b__sim__lora"]["verdict_gpus"]) == {"h100-80gb", "rtx-4090"}


def test_exclude_drops_matching_cells(matrix_file):
    study = dict(STUDY, models=["tiny-llama", "tiny-qwen2"], exclude=[{"model": "tiny-qwen2", "techniques": "lora"}])
    cells = matrix.load(matrix_file({"s": study}))
    assert "tiny-qwen2__cpu__lora+gc" not in cells and "tiny-qwen2__cpu__gc" in cells
    assert "tiny-llama__cpu__lora+gc" in cells


@pytest.mark.parametrize("change, key, reason", [
    ({"techniques": ["gc", "lroa"]}, "studies.s.techniques[1]", "unknown technique 'lroa'"),
    ({"techniques": ["bf16+amp-bf16"]}, "studies.s.techniques[0]", "both set precision"),
    ({"techniques": ["fa2+eager"]}, "studies.s.techniques[0]", "both set attn"),
    ({"techniques": ["zero3+fsdp"]}, "studies.s.techniques[0]", "both set dist"),
    ({"techniques": ["qlora+fp32"]}, "studies.s.techniques[0]", "cannot be combined with fp32"),
    ({"techniques": ["gc+w2"]}, "studies.s.techniques[0]", "needs a sharding technique"),
    ({"techniques": ["LoRA"]}, "studies.s.techniques.0", "does not match"),
    ({"models": ["tiny-lama"]}, "studies.s.models[0]", "no model config"),
    ({"gpus": ["h100"]}, "studies.s.gpus[0]", "unknown gpu 'h100'"),
    ({"gpus": ["h100-80gb"]}, "studies.s.gpus[0]", "cpu mode needs a cpu gpu profile"),
    ({"mode": "gpu"}, "studies.s.mode", "is not one of"),
    ({"technqiues": ["gc"]}, "studies.s", "technqiues"),
    ({"batch_size": 3, "techniques": ["ga2"]}, "studies.s.techniques", "does not split into 2"),
    ({"warmup_steps": 0}, "studies.s.warmup_steps", "minimum"),
])
def test_bad_matrix_names_file_key_and_reason(matrix_file, change, key, reason):
    path = matrix_file({"s": {**STUDY, **change}})
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: {key}"), msg
    assert reason in msg, msg


def test_unreadable_files_name_the_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(matrix.MatrixError, match="no such matrix file"):
        matrix.load(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("studies: [unclosed\n")
    with pytest.raises(matrix.MatrixError, match=f"{broken}: .*not valid YAML"):
        matrix.load(broken)


def test_same_cell_with_other_settings_in_two_studies_is_refused(matrix_file):
    path = matrix_file({"a": STUDY, "b": dict(STUDY, seq_len=64)})
    with pytest.raises(matrix.MatrixError, match="also in study a with other settings"):
        matrix.load(path)


def _collect(*args):
    out = subprocess.run([sys.executable, "-m", "pytest", "bench", "--collect-only", "-q", *args],
                         cwd=REPO, capture_output=True, text=True)
    return out.returncode, [ln.split("[", 1)[1].rstrip("]") for ln in out.stdout.splitlines() if "::test_cell[" in ln], out


def test_pytest_ids_are_the_cell_ids_and_k_selects_by_them(matrix_file):
    path = matrix_file({"s": dict(STUDY, models=["tiny-llama", "tiny-qwen2"], techniques=["gc", "zero3", "zero3+gc"])})
    code, ids, _ = _collect("--matrix", str(path))
    assert code == 0 and ids == list(matrix.load(path))
    code, ids, _ = _collect("--matrix", str(path), "-k", "zero3")
    assert sorted(ids) == sorted(c for c in matrix.load(path) if "zero3" in c) and len(ids) == 4
    code, ids, _ = _collect("--matrix", str(path), "-k", "tiny-qwen2 and not gc")
    assert ids == ["tiny-qwen2__cpu__baseline", "tiny-qwen2__cpu__zero3"]


def test_k_accepts_dotted_model_names(matrix_file):
    study = {"mode": "sim", "models": ["qwen2.5-7b", "llama-3.1-8b"], "gpus": ["h100-80gb"], "techniques": ["lora"]}
    code, ids, out = _collect("--matrix", str(matrix_file({"s": study})), "-k", "qwen2.5-7b")
    assert code == 0, out.stderr
    assert ids == ["qwen2.5-7b__sim__baseline", "qwen2.5-7b__sim__lora"]


def test_bad_matrix_stops_pytest_collection_with_the_reason(matrix_file):
    path = matrix_file({"s": dict(STUDY, techniques=["lroa"])})
    code, ids, out = _collect("--matrix", str(path))
    assert code != 0 and ids == []
    assert f"{path}: studies.s.techniques[0]" in out.stdout + out.stderr
