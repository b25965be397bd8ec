"""Cached checkpoints follow the content they were made from: after a model config is edited,
the cells that load a checkpoint (ckpt-load, low-cpu-mem-usage, qlora) train the edited
model, never the weights cached under the model's name before the edit."""
import json
from pathlib import Path

import pytest

from bench.runner import launch
from bench.cells import matrix
from tests.helpers import MATRIX_DIR

pytestmark = pytest.mark.slow
# tiny-llama cut down so that each worker is mostly its imports
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 256, "num_hidden_layers": 2}


def _params(config: dict) -> int:
    import torch
    import transformers
    raw = {k: v for k, v in config.items() if not k.startswith("_")}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**raw))
    return sum(p.numel() for p in model.parameters())


def test_an_edited_model_config_is_loaded_not_the_old_checkpoint(tmp_path, matrix_file, monkeypatch):
    monkeypatch.setenv("FT_MEMBENCH_CACHE", str(tmp_path / "cache"))  # the workers inherit it
    models = tmp_path / "models"
    models.mkdir()
    config = {**json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text()), **TINY}
    path = matrix_file({"s": {"mode": "cpu", "models": ["tiny"], "gpus": ["cpu"],
                              "techniques": ["ckpt-load", "low-cpu-mem-usage"]}}, models_dir=str(models))

    def run(cell):
        rec = launch.run_cell(matrix.load(path)[cell], tmp_path / f"{cell}.log")
        assert rec["status"] == "ok", (rec["reason"], rec["log_tail"])
        return rec

    (models / "tiny.json").write_text(json.dumps(config))
    two = run("tiny__cpu__ckpt-load")
    assert two["params_total"] == _params(config)

    config["num_hidden_layers"] = 4
    (models / "tiny.json").write_text(json.dumps(config))
    four = run("tiny__cpu__ckpt-load")
    assert four["params_total"] == _params(config) > two["params_total"]
    assert four["details"]["name_or_path"] != two["details"]["name_or_path"]
    loaded = Path(four["details"]["name_or_path"])
    assert loaded.parent == tmp_path / "cache" / "checkpoints"
    saved = json.loads((loaded / "ft-membench-key.json").read_text())
    assert saved["model_config"]["num_hidden_layers"] == 4 and saved["seed"] == 0

    low = run("tiny__cpu__low-cpu-mem-usage")  # the same content: the same checkpoint, reused
    assert low["details"]["name_or_path"] == four["details"]["name_or_path"]
    assert low["params_total"] == four["params_total"]
