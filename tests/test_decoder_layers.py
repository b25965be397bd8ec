"""Every architecture with a config in matrix/models has its decoder layers found (the gather
units, FSDP2's wrapping and compile per layer walk them), and the peers' parameter count from the
config equals the model's own."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from bench.corpus import published
from bench.corpus.peer_rules import count_params
from bench.worker.decoder import decoder_layers

CONFIGS = sorted(p.stem for p in published.MODELS_DIR.glob("*.json"))


def _meta_model(name: str):
    cfg = AutoConfig.from_pretrained(published.MODELS_DIR / f"{name}.json")
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg), cfg


@pytest.mark.parametrize("name", CONFIGS)
def test_layers_found_and_params_counted(name):
    model, cfg = _meta_model(name)
    layers = decoder_layers(model)
    assert len(layers) == cfg.num_hidden_layers
    raw = json.loads((published.MODELS_DIR / f"{name}.json").read_text())
    assert count_params(raw) == sum(p.numel() for p in model.parameters())


def test_unknown_layout_is_named():
    with pytest.raises(ValueError, match="no decoder layers at any of model.layers"):
        decoder_layers(torch.nn.Linear(2, 2))
