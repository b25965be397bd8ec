"""A preference or RL config (DPO, GRPO, PPO, a reward model) gets no answer: answered as the SFT
step its other keys describe, it would be too low, and the guard could say "fits" for a run that dies.
Before this refusal, LLaMA-Factory's own DPO example read as a LoRA SFT step that fits an H100 (exit
0), with `stage: dpo` listed as ignored. The configs are the projects' published examples
(tests/data/configs/SOURCES.md)."""
from __future__ import annotations

import json

import pytest

from bench.cells import trainconfig
from tests.test_fit_guard import CONFIGS, fit


@pytest.mark.parametrize("name, key, stage", [
    ("llamafactory-llama3-lora-dpo.yaml", "stage: 'dpo'", "DPO"),
    ("torchtune-llama3_1-8B_lora_dpo.yaml", "loss._component_: 'torchtune.rlhf.loss.DPOLoss'", "DPO"),
    ("open-r1-qwen2.5-1.5b-grpo.yaml", "num_generations: 7", "GRPO"),
])
def test_a_published_preference_or_rl_config_is_refused_naming_its_key(name, key, stage):
    with pytest.raises(trainconfig.ConfigError) as exc:
        trainconfig.read(CONFIGS / name)
    message = str(exc.value)
    assert str(CONFIGS / name) in message and key in message, message
    assert f"a {stage} stage, which ft-membench does not simulate" in message and "too low" in message


@pytest.mark.parametrize("doc, key, stage", [
    ({"base_model": "Qwen/Qwen2.5-7B", "rl": "dpo", "adapter": "lora", "micro_batch_size": 1}, "rl", "DPO"),
    ({"base_model": "Qwen/Qwen2.5-7B", "rl": "grpo", "micro_batch_size": 1}, "rl", "GRPO"),
    ({"base_model": "Qwen/Qwen2.5-7B", "reward_model": True, "micro_batch_size": 1}, "reward_model", "RM"),
    ({"model_name_or_path": "Qwen/Qwen2.5-7B", "per_device_train_batch_size": 1, "beta": 0.1}, "beta", "DPO"),
    ({"model_name_or_path": "Qwen/Qwen2.5-7B", "per_device_train_batch_size": 1, "desirable_weight": 1.0,
      "beta": 0.1}, "desirable_weight", "KTO"),
    ({"model_name_or_path": "Qwen/Qwen2.5-7B", "finetuning_type": "lora", "stage": "ppo"}, "stage", "PPO"),
])
def test_each_format_says_its_stage_its_own_way(tmp_path, doc, key, stage):
    (tmp_path / "c.json").write_text(json.dumps(doc))
    with pytest.raises(trainconfig.ConfigError) as exc:
        trainconfig.read(tmp_path / "c.json")
    assert f"{key}: " in str(exc.value) and f"a {stage} stage" in str(exc.value), str(exc.value)


def test_supervised_and_pretraining_stages_still_read(tmp_path):
    r = trainconfig.read(CONFIGS / "llamafactory-llama3-lora-sft.yaml")
    assert r.techniques()[0] == "lora" and not [i for i in r.ignored if i["key"] == "stage"]
    (tmp_path / "pt.json").write_text(json.dumps({"model_name_or_path": "Qwen/Qwen2.5-7B", "finetuning_type": "full",
                                                  "stage": "pt", "cutoff_len": 1024}))
    assert trainconfig.read(tmp_path / "pt.json").seq == 1024
    (tmp_path / "sft.json").write_text(json.dumps({"base_model": "Qwen/Qwen2.5-7B", "rl": None, "micro_batch_size": 2}))
    assert trainconfig.read(tmp_path / "sft.json").batch == 2


def test_the_cli_exits_2_before_simulating_anything(tmp_path):
    done = fit(["qwen2.5-7b", "--gpu", "h100-80gb", "--config", str(CONFIGS / "llamafactory-llama3-lora-dpo.yaml")],
               tmp_path, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "a DPO stage" in done.stderr and "no answer is given" in done.stderr
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").rglob("*.json"))
    # beside the refusal, what others measured of that stage: the corpus's DPO rows (Row.beyond), as published
    assert "published DPO runs, measured by others on GPUs and not simulated here" in done.stderr
    assert "trl-3168-qwen2.5-0.5b-dpo-bf16-a100-80g-fits" in done.stderr


@pytest.mark.parametrize("doc, kind, words", [
    ({"model_name_or_path": "Qwen/Qwen2.5-7B", "per_device_train_batch_size": 8, "num_generations": 8}, "grpo", "GRPO"),
    ({"model_name_or_path": "Qwen/Qwen2.5-7B", "per_device_train_batch_size": 1,
      "parallelism_config": {"cp_size": 4, "dp_shard_size": 2}}, "context", "context-parallel"),
])
def test_a_refused_config_carries_its_kind_and_the_published_runs_of_it_come_with_the_models_first(tmp_path, doc, kind,
                                                                                                 words):
    from bench.corpus import published
    from bench.fit import beyond
    (tmp_path / "c.json").write_text(json.dumps(doc))
    with pytest.raises(trainconfig.ConfigError) as exc:
        trainconfig.read(tmp_path / "c.json")
    assert exc.value.beyond == kind
    lines = beyond.lines(exc.value.beyond, "Qwen/Qwen2.5-7B")
    rows = {r.id: r for r in published.load()}
    shown = [ln.split(":", 1)[0].strip() for ln in lines[1:]]
    assert lines[0].startswith(f"published {words} runs, measured by others") and shown
    assert all(kind in rows[i].beyond for i in shown)                   # only runs of that kind
    firsts = [rows[i].model_config_name == "qwen2.5-7b" for i in shown]
    assert firsts == sorted(firsts, reverse=True)                        # the asked model's rows first
    assert len(shown) <= beyond.LIMIT


def test_a_bad_value_is_no_stage_and_shows_no_published_runs(tmp_path):
    from bench.fit import beyond
    (tmp_path / "c.json").write_text(json.dumps({"model_name_or_path": "Qwen/Qwen2.5-7B",
                                                 "per_device_train_batch_size": "four"}))
    with pytest.raises(trainconfig.ConfigError) as exc:
        trainconfig.read(tmp_path / "c.json")
    assert exc.value.beyond is None and beyond.lines(None, "qwen2.5-7b") == []
    assert beyond.lines("warp-drive", "qwen2.5-7b") == []


@pytest.mark.parametrize("combo, says, kind", [
    ("lora+dpo", "a DPO stage", "DPO"), ("qlora+gc+grpo", "a GRPO stage", "GRPO"),
    ("lora+gc+bf16+fsdp+cp4", "context-parallel training", "context-parallel"),
    ("bf16+tp8", "tensor-parallel training", "tensor-parallel"),
])
def test_a_technique_name_for_what_is_not_simulated_is_refused_with_what_others_measured(combo, says, kind):
    from bench.fit import beyond
    why = beyond.refusal([combo], "llama-3.1-8b")
    assert why.startswith(f"techniques: {combo}: ") and says in why and "does not simulate yet" in why
    assert f"published {kind} runs, measured by others" in why


@pytest.mark.parametrize("combo", ["lora+gc", "lora+gc+tp1", "fsdp+w8", "qlora+s512"])
def test_a_supported_combination_or_a_degree_of_one_is_not_refused_here(combo):
    from bench.fit import beyond
    assert beyond.refusal([combo], "llama-3.1-8b") is None
