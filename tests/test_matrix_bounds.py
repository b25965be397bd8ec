"""Bounds on every shape, rank count and time limit: each refused before anything
runs, with a message naming the file, the key and the limit."""
import pytest

from bench.cells import matrix, techniques
from tests.helpers import write_matrix

STUDY = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"], "techniques": ["lora"]}


@pytest.mark.parametrize("tech, says", [
    ("w10000", "w10000 sets world_size to 10000, above its limit of 256"),
    ("s1000000000", "s1000000000 sets seq_len to 1000000000, above its limit of 1048576"),
    ("b100000", "b100000 sets batch_size to 100000, above its limit of 65536"),
    ("ga100000", "above its limit of 65536"),
    ("new9999999", "new9999999 sets new_tokens to 9999999, above its limit"),
])
def test_a_numbered_technique_beyond_its_limit_is_refused(tmp_path, tech, says):
    path = write_matrix(tmp_path, {"a": dict(STUDY, techniques=[tech])})
    with pytest.raises(matrix.MatrixError, match=f"matrix.yaml: studies.a.techniques\\[0\\]: {tech}: .*{says}"):
        matrix.load(path)


@pytest.mark.parametrize("key, value", [("seq_len", 1 << 21), ("batch_size", 1 << 17), ("steps", 10 ** 6),
                                        ("warmup_steps", 10 ** 6), ("timeout_s", 10 ** 9)])
def test_a_shape_beyond_its_limit_is_refused(tmp_path, key, value):
    path = write_matrix(tmp_path, {"a": dict(STUDY, **{key: value})})
    limit = techniques.MAXIMUMS[key]
    with pytest.raises(matrix.MatrixError, match=f"matrix.yaml: studies.a.{key}: .*maximum of {limit}"):
        matrix.load(path)


@pytest.mark.parametrize("text", [".inf", ".nan", "-.inf"])
def test_a_time_limit_that_is_not_finite_is_refused(tmp_path, text):
    path = write_matrix(tmp_path, {"a": dict(STUDY, timeout_s=5)})
    path.write_text(path.read_text().replace("timeout_s: 5", f"timeout_s: {text}"))
    with pytest.raises(matrix.MatrixError, match="matrix.yaml: studies.a.timeout_s: "):
        matrix.load(path)
