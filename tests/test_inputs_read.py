"""What the worker read is what the record claims: the worker copies and digests the
JSON files a cell is built from, and a digest other than the spec's is an error record."""
import json
import shutil
import subprocess
import sys

import pytest

from bench.records import checks
from bench.cells import inputs, matrix
from tests.helpers import MATRIX_DIR


@pytest.fixture
def edited(tmp_path, matrix_file):
    """A cpu and a sim ZeRO-3 spec whose model config and DeepSpeed config lie in tmp_path."""
    models, ds = tmp_path / "models", tmp_path / "deepspeed"
    models.mkdir()
    shutil.copy(MATRIX_DIR / "models" / "tiny-llama.json", models / "tiny-llama.json")
    shutil.copytree(MATRIX_DIR / "deepspeed", ds)
    cells = matrix.load(matrix_file({
        "c": {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["baseline"]},
        "s": {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"], "techniques": ["zero3"]}},
        models_dir=str(models), deepspeed_dir=str(ds)))
    return cells["tiny-llama__cpu__baseline"], cells["tiny-llama__sim__zero3"], models / "tiny-llama.json", ds


def _edit(path, **kw):
    path.write_text(json.dumps(json.loads(path.read_text()) | kw))


def test_pinned_copies_are_what_the_spec_digested(tmp_path, edited):
    cpu, sim, config, _ = edited
    out = inputs.pin(sim, tmp_path / ".")
    assert out["_read_sha256"] == {k: sim["inputs_sha256"][k] for k in ("model_config", "ds_config")}
    _edit(config, rope_theta=1.0)   # the original changes after the copy: the copy is what runs
    assert json.loads(open(out["model_config"]).read()) != json.loads(config.read_text())


@pytest.mark.parametrize("which", ["model_config", "ds_config"])
def test_a_file_changed_after_the_matrix_loaded_is_refused(tmp_path, edited, which):
    _, sim, config, ds = edited
    _edit(config if which == "model_config" else ds / "zero3.json", edited_later=1)
    with pytest.raises(inputs.InputsChanged, match=f"{which} .* digests to"):
        inputs.pin(sim, tmp_path)


def test_the_worker_writes_an_error_record_naming_the_changed_input(tmp_path, edited):
    cpu, _, config, _ = edited
    _edit(config, rope_theta=1.0)
    spec_p, out_p = tmp_path / "spec.json", tmp_path / "rec.json"
    spec_p.write_text(json.dumps(cpu))
    subprocess.run([sys.executable, "-m", "bench.worker", str(spec_p), str(out_p)], check=True, capture_output=True)
    rec = json.loads(out_p.read_text())
    assert rec["status"] == "error" and "InputsChanged" in rec["reason"] and "model_config" in rec["reason"]
    assert checks.problems(rec) == []
