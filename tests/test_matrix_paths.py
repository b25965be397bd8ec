"""Folders and caches of the matrix: a models_dir symlink loop is a MatrixError, not a
traceback; the config-check cache keys a model with its own code by the folder it is read from."""
import pytest

from bench.cells import matrix, modelref
from tests.helpers import MATRIX_DIR, write_matrix

STUDY = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"], "techniques": ["lora"]}


@pytest.mark.parametrize("key", ["models_dir", "deepspeed_dir"])
def test_a_symlink_loop_is_a_clear_error(tmp_path, key):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    path = write_matrix(tmp_path, {"s": STUDY}, **{key: str(tmp_path / "a")})
    with pytest.raises(matrix.MatrixError, match=f"matrix.yaml: {key}: .*a symlink loop"):
        matrix.load(path)


def test_the_config_check_cache_keys_remote_code_by_its_folder(tmp_path):
    config = {"model_type": "mine", "auto_map": {"AutoConfig": "conf.MyConfig"}}
    keys = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "conf.py").write_text("X = 1\n")
        for trust in (True, False):
            m = modelref.Model("m", config, name, tmp_path / name / "config.json", trust)
            keys.append((trust, modelref.check_key(m, "5.0")))
    trusted = [k for t, k in keys if t]
    plain = [k for t, k in keys if not t]
    assert trusted[0] != trusted[1]          # same content, other folder: asked again
    assert plain[0] == plain[1]              # a plain config is read from its content alone


