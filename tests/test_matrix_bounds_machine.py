"""Bounds the matrix loader adds on what would otherwise load: real cpu ranks bounded by the machine,
a GPU's memory, a seed that torch can take, a model with no vocabulary or an infinite epsilon; each a
MatrixError naming the key."""
import json
import os

import pytest

from bench.cells import matrix
from tests.helpers import MATRIX_DIR, write_matrix

STUDY = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"], "techniques": ["lora"]}


def test_a_cpu_study_cannot_ask_for_more_real_ranks_than_the_machine_runs(tmp_path):
    many = max(4, 2 * (os.cpu_count() or 1)) + 1
    path = write_matrix(tmp_path, {"c": {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"],
                                         "techniques": [f"zero3+w{many}"]}})
    with pytest.raises(matrix.MatrixError, match=f"studies.c.techniques: zero3\\+w{many}: {many} cpu ranks on a "
                                                 "machine with"):
        matrix.load(path)


def test_a_sim_study_may_still_model_many_ranks(tmp_path):
    path = write_matrix(tmp_path, {"a": dict(STUDY, gpus=["h100-80gb"], techniques=["zero3+w64"])})
    assert "tiny-llama__sim__zero3+w64" in matrix.load(path)


def test_an_absurd_gpu_memory_is_refused(tmp_path):
    path = write_matrix(tmp_path, {"a": STUDY}, gpus={"l40s": {"kind": "cuda", "memory_bytes": 10 ** 40}})
    with pytest.raises(matrix.MatrixError, match="gpus.l40s.memory_bytes: .*maximum"):
        matrix.load(path)


def test_a_seed_beyond_64_bits_is_refused_naming_seed(tmp_path):
    path = write_matrix(tmp_path, {"a": dict(STUDY, seed=2 ** 70)})
    with pytest.raises(matrix.MatrixError, match="studies.a.seed: .*maximum"):
        matrix.load(path)


@pytest.mark.parametrize("key, value, says", [("vocab_size", 0, "without a vocabulary"),
                                              ("rms_norm_eps", float("inf"), "must be finite")])
def test_a_model_that_trains_nothing_is_refused(tmp_path, key, value, says):
    config = json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text())
    config[key] = value
    (tmp_path / "odd.json").write_text(json.dumps(config))
    path = write_matrix(tmp_path, {"a": dict(STUDY, models=[str(tmp_path / "odd.json")])})
    with pytest.raises(matrix.MatrixError, match=f"{key} is .*{says}"):
        matrix.load(path)
