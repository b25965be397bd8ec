"""exclude rules are checked: a rule that matches no cell (a typo) and rules that
exclude every cell are MatrixErrors naming the file and the rule."""
import pytest

from bench.cells import matrix
from tests.helpers import MATRIX_DIR, write_matrix

STUDY = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"], "techniques": ["lora", "gc"]}


def test_a_rule_that_matches_nothing_is_refused(tmp_path):
    path = write_matrix(tmp_path, {"a": dict(STUDY, exclude=[{"techniques": "gc"}, {"techniques": "lroa"}])})
    with pytest.raises(matrix.MatrixError, match=r'matrix.yaml: studies.a.exclude\[1\]: \{"techniques": "lroa"\} '
                                                 "matches no cell of the study"):
        matrix.load(path)


def test_excluding_every_cell_is_refused(tmp_path):
    path = write_matrix(tmp_path, {"a": dict(STUDY, exclude=[{"model": "tiny-llama"}])})
    with pytest.raises(matrix.MatrixError, match="matrix.yaml: studies.a.exclude: excludes every cell of the study"):
        matrix.load(path)


def test_a_rule_that_matches_still_excludes(tmp_path):
    cells = matrix.load(write_matrix(tmp_path, {"a": dict(STUDY, exclude=[{"techniques": "gc"}])}))
    assert sorted(cells) == ["tiny-llama__sim__baseline", "tiny-llama__sim__lora"]


def test_the_default_matrix_loads():
    assert matrix.load(MATRIX_DIR / "default.yaml")
