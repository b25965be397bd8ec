"""The matrix's YAML is strict where PyYAML is silent: a duplicate key, an anchor
bomb and non-UTF-8 text are each a MatrixError naming the file, the key and the reason, before
anything runs (and fast)."""
import time

import pytest
import yaml

from bench.cells import matrix, matrixfile
from tests.helpers import MATRIX_DIR, write_matrix

STUDY = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"], "techniques": ["lora"]}


def test_a_study_written_twice_is_refused_with_both_lines(tmp_path):
    path = write_matrix(tmp_path, {"a": STUDY})
    text = path.read_text()
    body = text.split("studies:\n", 1)[1]
    path.write_text(text + body)     # the same study name again, under studies:
    with pytest.raises(matrix.MatrixError, match=r"matrix.yaml: a: duplicate key 'a' at line \d+ \(first at line \d+\)"):
        matrix.load(path)


def test_a_gpu_written_twice_in_gpus_yaml_is_refused(tmp_path):
    gpus = (MATRIX_DIR / "gpus.yaml").read_text()
    first = next(ln for ln in gpus.split("\n") if ln.endswith(":") and ln[:1].isalnum())
    (tmp_path / "gpus.yaml").write_text(gpus + "\n" + first + "\n  kind: cuda\n  memory_bytes: 1\n")
    path = write_matrix(tmp_path, {"a": STUDY}, gpus_file=str(tmp_path / "gpus.yaml"))
    with pytest.raises(matrix.MatrixError, match=f"gpus.yaml: {first[:-1]}: duplicate key"):
        matrix.load(path)


def test_a_merge_key_may_be_overridden(tmp_path):
    path = write_matrix(tmp_path, {"a": STUDY})
    text = path.read_text().replace("studies:\n  a:\n", "base: &b {seq_len: 64}\nstudies:\n  a:\n    <<: *b\n    seq_len: 32\n")
    path.write_text(text.replace("base:", "x-base:"))
    with pytest.raises(matrix.MatrixError) as err:   # the schema refuses an unknown top key, not the merge
        matrix.load(path)
    assert "duplicate" not in str(err.value)


def test_an_anchor_bomb_is_refused_quickly_naming_key_and_limit(tmp_path):
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 7)]
    path = write_matrix(tmp_path, {"a": STUDY})
    path.write_text("x-bomb:\n" + "\n".join("  " + ln for ln in levels) + "\n" + path.read_text())
    t0 = time.monotonic()
    with pytest.raises(matrix.MatrixError, match=r"matrix.yaml: x-bomb.*more than 100000 values.*the limit is 100000"):
        matrix.load(path)
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("name", ["matrix", "gpus"])
def test_non_utf8_text_is_a_clear_error(tmp_path, name):
    path = write_matrix(tmp_path, {"a": STUDY}, gpus_file=str(tmp_path / "gpus.yaml"))
    (tmp_path / "gpus.yaml").write_bytes((MATRIX_DIR / "gpus.yaml").read_bytes())
    target = path if name == "matrix" else tmp_path / "gpus.yaml"
    target.write_bytes(target.read_bytes() + b"\n# caf\xe9\n")
    with pytest.raises(matrix.MatrixError, match=f"{name}.yaml: <top>: not UTF-8 text: byte 0xe9"):
        matrix.load(path)


def test_the_default_matrix_still_loads_under_the_strict_loader():
    assert yaml.load((MATRIX_DIR / "gpus.yaml").read_text(), Loader=matrixfile.SAFE_LOADER)
