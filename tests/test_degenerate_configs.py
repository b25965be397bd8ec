"""Degenerate model configs are refused before anything runs: no layers, no experts,
a rotary base or norm epsilon that is not positive (a NaN loss, which sim cannot see), a
sequence beyond the model's context; each a MatrixError naming the file, the key and why."""
import json

import pytest

from bench.cells import matrix
from tests.helpers import MATRIX_DIR


@pytest.mark.parametrize("base, edit, says", [
    ("tiny-llama", {"num_hidden_layers": 0}, "num_hidden_layers is 0: a model without layers"),
    ("mixtral-8x7b", {"num_local_experts": 0}, "num_local_experts is 0: a mixture of experts without experts"),
    ("qwen3-30b-a3b", {"num_experts_per_tok": 999}, "num_experts_per_tok 999 is more than num_experts 128"),
    ("tiny-llama", {"rope_theta": 0.0}, "rope_theta is 0.0: it must be positive"),
    ("tiny-llama", {"rms_norm_eps": -10.0}, "rms_norm_eps is -10.0: it must be positive"),
    ("tiny-llama", {"max_position_embeddings": 16}, "sequence length 32 is beyond the model's context"),
])
def test_a_degenerate_config_is_refused(tmp_path, matrix_file, base, edit, says):
    models = tmp_path / "models"
    models.mkdir()
    cfg = json.loads((MATRIX_DIR / "models" / f"{base}.json").read_text()) | edit
    (models / "odd.json").write_text(json.dumps(cfg))
    path = matrix_file({"s": {"mode": "sim", "models": ["odd"], "gpus": ["l40s"], "techniques": ["lora"]}},
                       models_dir=str(models))
    with pytest.raises(matrix.MatrixError, match=f"matrix.yaml: studies.s.techniques: .*odd.json: {says}"):
        matrix.load(path)
