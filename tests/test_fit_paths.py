"""``ft-membench fit``'s model paths are the user's: a relative MODEL is read against the working
directory and a ``--config``'s ``model_name_or_path`` against the config file's folder, never
against the temp folder the one-study matrix is written in."""
import shutil
from pathlib import Path

from bench.fit import question as fitinput
from tests.helpers import MATRIX_DIR

TINY = MATRIX_DIR / "models" / "tiny-llama.json"


def test_a_relative_model_path_is_read_against_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    shutil.copy(TINY, tmp_path / "cfg" / "mytiny.json")
    monkeypatch.chdir(tmp_path)
    for text in ("cfg/mytiny.json", "./cfg/mytiny.json"):
        q = fitinput.question(text, None, None, ["gc"], None, None)
        assert Path(q.model) == tmp_path / "cfg" / "mytiny.json" and Path(q.model).is_absolute()
        assert q.asked == text   # said as the user wrote it


def test_a_configs_model_path_is_read_against_the_configs_folder(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    shutil.copy(TINY, tmp_path / "cfg" / "model.json")
    (tmp_path / "cfg" / "train.yaml").write_text("model_name_or_path: ./model.json\nper_device_train_batch_size: 1\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    q = fitinput.question(None, "../cfg/train.yaml", None, None, None, None)
    assert Path(q.model).resolve() == tmp_path / "cfg" / "model.json"


def test_matrix_names_and_hub_ids_are_left_as_they_are(tmp_path, monkeypatch):
    (tmp_path / "tiny-llama").mkdir()   # a folder named as a matrix model: the matrix's model wins
    monkeypatch.chdir(tmp_path)
    assert fitinput.anchored("tiny-llama", tmp_path) == "tiny-llama"
    assert fitinput.anchored("Qwen/Qwen2.5-7B", tmp_path) == "Qwen/Qwen2.5-7B"
    assert fitinput.anchored("org/" + "m" * 5000, tmp_path).startswith("org/")
