"""``gradient_accumulation_steps`` as the HF Trainer runs it under FSDP: accelerate's accumulate() skips the
gradient sync on every micro-batch but a step's last (``Accelerator.no_sync``), unless
``accelerator_config.gradient_accumulation_kwargs.sync_each_batch`` is set. Under FSDP1 a config is answered
with ``no-sync+ga<N>``, under FSDP1 and FSDP2 alike."""
import json

import pytest

from bench.cells import trainconfig
from bench.fit.question import question

BASE = {"model_name_or_path": "Qwen/Qwen2.5-7B", "per_device_train_batch_size": 2, "max_length": 2048,
        "use_peft": True, "gradient_checkpointing": True, "bf16": True, "dtype": "bfloat16",
        "fsdp": "full_shard auto_wrap"}


def _config(tmp_path, **keys):
    path = tmp_path / "sft.json"
    path.write_text(json.dumps({**BASE, **keys}))
    return str(path)


def _mapped(recipe, key):
    return next(m for m in recipe.mapped if m["key"] == key)


@pytest.mark.parametrize("steps, micro", [(2, 2), (8, 3)])
def test_fsdp1_accumulation_keeps_the_unsharded_gradients(tmp_path, steps, micro):
    path = _config(tmp_path, gradient_accumulation_steps=steps)
    recipe = trainconfig.read(path, "trl")
    names = recipe.techniques()
    assert {"fsdp1", "no-sync", f"ga{micro}"} <= set(names)
    assert "no_sync" in _mapped(recipe, "gradient_accumulation_steps")["as"]
    q = question(None, path, "trl", None, None, None)
    assert q.batch == 2 * micro  # the per-device batch times the micro-batches simulated


def test_sync_each_batch_and_deepspeed_answer_the_micro_batch(tmp_path):
    synced = trainconfig.read(_config(tmp_path, gradient_accumulation_steps=4, accelerator_config={
        "gradient_accumulation_kwargs": {"sync_each_batch": True}}), "trl")
    assert "no-sync" not in synced.techniques() and not any(n.startswith("ga") for n in synced.techniques())
    assert any(i["key"] == "gradient_accumulation_steps" and "sync_each_batch" in i["reason"] for i in synced.ignored)
    alone = trainconfig.read(_config(tmp_path, gradient_accumulation_steps=4, fsdp=""), "trl")
    assert "no-sync" not in alone.techniques()
    assert question(None, _config(tmp_path, gradient_accumulation_steps=4, fsdp=""), "trl", None, None, None).batch == 2


def test_fsdp2_accumulation_is_answered_without_the_sync(tmp_path):
    path = _config(tmp_path, gradient_accumulation_steps=4, fsdp_config={"fsdp_version": 2})
    recipe = trainconfig.read(path, "trl")
    assert {"fsdp", "no-sync", "ga3"} <= set(recipe.techniques())
    assert "set_requires_gradient_sync(False)" in _mapped(recipe, "gradient_accumulation_steps")["as"]


def test_axolotl_runs_the_hf_trainer_and_accumulates_the_same_way(tmp_path):
    import yaml
    path = tmp_path / "axolotl.yaml"
    path.write_text(yaml.safe_dump({"base_model": "meta-llama/Llama-3.1-8B", "adapter": "lora", "micro_batch_size": 1,
                                    "sequence_len": 4096, "gradient_accumulation_steps": 16, "bf16": True,
                                    "fsdp": ["full_shard", "auto_wrap"],
                                    "fsdp_config": {"fsdp_transformer_layer_cls_to_wrap": "LlamaDecoderLayer"}}))
    recipe = trainconfig.read(str(path), "axolotl")
    assert {"fsdp1", "no-sync", "ga3"} <= set(recipe.techniques())
    assert question(None, str(path), "axolotl", None, None, None).batch == 3
