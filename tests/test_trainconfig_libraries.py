"""Each training-config mapping read as its library runs those keys, with the
library line it follows. The versions read: TRL 1.16.0 and 0.19.1 (the alignment-handbook's era,
the ``torch_dtype`` spelling), transformers 5.23.0 and peft 0.21.2 (results/reference/constraints.txt)."""
from __future__ import annotations

import json

import pytest

from bench.cells import trainconfig
from bench.cells.techniques import knobs
from tests.test_fit_guard import CONFIGS


def read(tmp_path, doc: dict):
    (tmp_path / "args.json").write_text(json.dumps(doc))
    return trainconfig.read(tmp_path / "args.json")


def test_trl_bf16_is_autocast_not_bf16_weights(tmp_path):
    # transformers 5.23 training_args.py:1618: `if self.bf16: self.mixed_precision = "bf16"` -> accelerate's
    # autocast; TRL 1.16 model_config.py:89-90: ModelConfig.dtype defaults to "float32" (sft_trainer.py:545:
    # "If `dtype` is not specified ... it defaults to `float32`"): a LoRA base with no dtype is fp32 under autocast
    r = read(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "use_peft": True, "bf16": True})
    assert r.techniques() == ["lora", "amp-bf16"]
    r = read(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "use_peft": True, "bf16": True,
                        "dtype": "bfloat16"})
    assert r.techniques() == ["lora", "bf16"]  # loaded in bf16: the weights are 16-bit


def test_trl_4bit_with_bf16_is_fp32_extras_under_autocast(tmp_path):
    # TRL 1.16 trainer/utils.py:261-268 (get_quantization_config): bitsandbytes quantizes the linear layers only;
    # the rest load in ModelConfig.dtype, float32 by default, and SFTTrainer 1.16 calls no
    # prepare_model_for_kbit_training (sft_trainer.py:906-911 casts only the trainable adapters to bf16)
    r = read(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-7B", "load_in_4bit": True, "use_peft": True,
                        "bf16": True, "gradient_checkpointing": True, "lora_target_modules": "all-linear",
                        "packing": True, "per_device_train_batch_size": 2, "max_length": 4096})
    assert r.techniques() == ["qlora-fp32", "lora-all", "gc", "amp-bf16", "adamw", "packing"]
    k = knobs(r.techniques())
    assert (k["adapter"], k["kbit_extras"], k["precision"]) == ("qlora", "fp32", "amp-bf16")
    # TRL 1.x loading in bf16 keeps the extras bf16 (no prepare call): the catalogue's qlora, 16-bit throughout
    r = read(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-7B", "load_in_4bit": True, "use_peft": True,
                        "bf16": True, "dtype": "bfloat16"})
    assert r.techniques() == ["qlora", "bf16", "adamw"]


def test_trl_before_1_0_prepares_the_4bit_model_in_fp32():
    # TRL 0.19.1 sft_trainer.py:580-581: `if is_qlora and not is_sharded_qlora: model =
    # self._prepare_model_for_kbit_training(model, args)`; peft 0.21.2 utils/other.py:205-209 casts every
    # fp16/bf16 parameter but Params4bit to float32, whatever torch_dtype loaded them in
    r = trainconfig.read(CONFIGS / "trl-zephyr-sft-qlora.yaml")  # alignment-handbook, torch_dtype: bfloat16
    assert r.format == "trl" and r.techniques() == ["qlora-fp32", "gc", "amp-bf16", "adamw"]
    assert any(m["key"] == "load_in_4bit" and "fp32" in m["as"] for m in r.mapped)


def test_axolotl_qlora_keeps_its_extras_in_the_training_dtype():
    # axolotl src/axolotl/loaders/model.py (ae7395e9), _configure_embedding_dtypes: prepare_model_for_kbit_training
    # upcasts to fp32, then `should_convert` (adapter in lora/qlora -> needs_fa2_dtype) casts the embeddings and
    # norms back to cfg.torch_dtype; the 4-bit base computes in cfg.torch_dtype (_set_quantization_config):
    # bf16: true is 16-bit extras, the catalogue's qlora+bf16
    r = trainconfig.read(CONFIGS / "axolotl-llama3-qlora.yml")
    assert r.techniques()[:1] == ["qlora"] and "bf16" in r.techniques()


def test_llamafactory_qlora_keeps_its_extras_in_the_compute_dtype():
    # LLaMA-Factory model/model_utils/checkpointing.py, prepare_model_for_training: layernorms go to fp32 only
    # under `upcast_layernorm` (ModelArguments default False); the model loads in the compute dtype (bf16: true)
    (r := trainconfig.read(CONFIGS / "llamafactory-llama3-lora-sft.yaml"))
    assert r.techniques() == ["lora", "lora-all", "gc-reentrant", "bf16"]


@pytest.mark.parametrize("extra, gc, offload", [({}, "gc-reentrant", False),
                                               ({"gradient_checkpointing": False}, "gc-reentrant", False),
                                               ({"use_reentrant_gc": False}, "gc", False),
                                               ({"disable_gradient_checkpointing": True}, None, False),
                                               ({"use_unsloth_gc": True}, "gc", True)])
def test_llamafactory_checkpoints_unless_told_not_to(tmp_path, extra, gc, offload):
    # LLaMA-Factory model/model_utils/checkpointing.py, prepare_model_for_training: `if not
    # model_args.disable_gradient_checkpointing:` -> model.gradient_checkpointing_enable(...) with use_reentrant =
    # use_reentrant_gc (ModelArguments default True; use_unsloth_gc: the checkpoints offloaded by Unsloth's own
    # function), whatever TrainingArguments' gradient_checkpointing says
    r = read(tmp_path, {"model_name_or_path": "meta-llama/Meta-Llama-3-8B-Instruct", "stage": "sft",
                        "finetuning_type": "lora", "template": "llama3", "bf16": True, **extra})
    names = r.techniques()
    assert [n for n in names if n.startswith("gc")] == ([gc] if gc else []) and ("act-offload" in names) == offload


@pytest.mark.parametrize("kwargs, gc", [({"use_reentrant": True}, "gc-reentrant"), ({"use_reentrant": False}, "gc"),
                                        ({}, "gc")])
def test_the_trainers_checkpoint_kwargs_choose_the_reentrant_checkpoint(tmp_path, kwargs, gc):
    # transformers' gradient_checkpointing_enable(gradient_checkpointing_kwargs): use_reentrant is torch's choice;
    # left out, transformers 5's default {"use_reentrant": False}
    r = read(tmp_path, {"model_name_or_path": "meta-llama/Llama-3.1-8B", "use_peft": True, "bf16": True,
                        "gradient_checkpointing": True, "gradient_checkpointing_kwargs": kwargs})
    assert [n for n in r.techniques() if n.startswith("gc")] == [gc]


def test_trl_before_1_0_skips_the_preparation_of_a_sharded_4bit_model(tmp_path):
    # TRL 0.19.1 sft_trainer.py:570-580: is_sharded_qlora (a Params4bit on cpu/meta: FSDP or ZeRO-3 loading)
    # -> no prepare_model_for_kbit_training: the extras stay in torch_dtype (answer.ai's FSDP-QLoRA via TRL)
    r = read(tmp_path, {"model_name_or_path": "meta-llama/Llama-3.1-70B", "load_in_4bit": True, "use_peft": True,
                        "torch_dtype": "bfloat16", "bf16": True, "fsdp": "full_shard auto_wrap",
                        "gradient_checkpointing": True, "num_processes": 2})
    assert r.techniques()[0] == "qlora" and "fsdp1" in r.techniques()  # accelerate's default fsdp_version 1


@pytest.mark.parametrize("extra, dist", [({}, "fsdp1"), ({"fsdp_config": {"fsdp_version": 2}}, "fsdp"),
                                         ({"fsdp_config": {"version": 2}}, "fsdp"), ({"fsdp_config": {"fsdp_version": 1}}, "fsdp1")])
def test_fsdp_is_fsdp1_unless_the_config_asks_for_version_2(tmp_path, extra, dist):
    # accelerate's FullyShardedDataParallelPlugin: fsdp_version defaults to 1 (FullyShardedDataParallel);
    # transformers' fsdp_config takes fsdp_version (or version) 2 for fully_shard
    r = read(tmp_path, {"model_name_or_path": "meta-llama/Llama-3.1-8B", "use_peft": True, "dtype": "bfloat16",
                        "bf16": True, "fsdp": "full_shard auto_wrap", "num_processes": 2, **extra})
    assert dist in r.techniques() and ({"fsdp", "fsdp1"} - {dist}).isdisjoint(r.techniques())


def test_trl_1x_qlora_on_fsdp1_runs_under_the_trainers_autocast(tmp_path):
    # TRL 1.x keeps a 16-bit model's extras 16-bit (qlora), and bf16: true is the Trainer's autocast: QLoRA on
    # FSDP1 runs only under it (the adapters fp32, the shards bf16), so it reads amp-bf16, not 16-bit weights alone
    r = read(tmp_path, {"model_name_or_path": "meta-llama/Llama-3.1-70B", "load_in_4bit": True, "use_peft": True,
                        "dtype": "bfloat16", "bf16": True, "fsdp": "full_shard auto_wrap", "num_processes": 2})
    assert r.techniques()[0] == "qlora" and "fsdp1" in r.techniques() and "amp-bf16" in r.techniques()


def test_torchtune_qlora_builds_everything_in_its_dtype():
    # torchtune recipes/lora_finetune_single_device.py, _setup_model: `with training.set_default_dtype(self._dtype),
    # self._device: model = config.instantiate(cfg_model)`: the qlora_* builders quantize the base linears
    # (quantize_base=True) and build the rest (embeddings, norms, output) in `dtype`: bf16 extras, no autocast
    r = trainconfig.read(CONFIGS / "torchtune-llama3_1-8B_qlora_single_device.yaml")
    assert r.techniques()[:3] == ["qlora", "gc", "bf16"]


def test_trls_loss_says_which_versions_the_answer_holds_for(tmp_path):
    # huggingface/trl b58947c (v1.7.0): SFTConfig.loss_type defaults to "chunked_nll", the LM head on the labelled
    # tokens only and the cross-entropy in chunks; 1.16 sft_trainer.py:1144 add_fused_lm_head for every loss type.
    # ft-membench's step holds transformers' full logits: right for TRL < 1.7 (the torch_dtype spelling is < 1.0)
    new = read(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "use_peft": True, "dtype": "bfloat16"})
    loss, = [i for i in new.ignored if i["key"] == "loss_type"]
    assert "TRL 1.7 and later" in loss["reason"] and "high" in loss["reason"]
    old = read(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "use_peft": True, "torch_dtype": "bfloat16"})
    assert not [i for i in old.ignored if i["key"] == "loss_type"]
    assert [m["as"] for m in old.mapped if m["key"] == "loss_type"] == [
        "transformers' causal-LM loss over the full logits, as TRL < 1.7 computes it"]


def test_the_trainers_torch_compile_is_listed_as_answered_uncompiled(tmp_path):
    # transformers' torch_compile: accelerate compiles the whole model; the catalogue's compile is per decoder layer
    r = read(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "use_peft": True, "torch_compile": True})
    assert "compile" not in r.techniques()
    assert any(i["key"] == "torch_compile" and "answered uncompiled" in i["reason"] for i in r.ignored)


@pytest.mark.parametrize("extra, gc, offload", [({"gradient_checkpointing": True}, True, False),
                                               ({"gradient_checkpointing": "offload"}, True, True),
                                               ({"gradient_checkpointing": "offload_disk"}, True, True),
                                               ({"gradient_checkpointing": True, "activation_offloading": "legacy"}, True, True),
                                               ({"gradient_checkpointing": False}, False, False)])
def test_axolotl_offloaded_checkpointing_is_gc_with_its_checkpoints_offloaded(tmp_path, extra, gc, offload):
    # axolotl utils/schemas/validation.py: gradient_checkpointing "offload" -> True with activation_offloading
    # True, "offload_disk" -> True with activation_offloading "disk" (it had read as no gc: a larger run)
    r = read(tmp_path, {"base_model": "meta-llama/Meta-Llama-3-8B", "adapter": "lora", "micro_batch_size": 1,
                        "sequence_len": 2048, "bf16": True, **extra})
    assert ("gc" in r.techniques()) == gc and ("act-offload" in r.techniques()) == offload


def test_trls_activation_offloading_is_act_offload(tmp_path):
    # TRL SFTConfig.activation_offloading: trl/models/activation_offloading.py, adapted from torchtune's
    # OffloadActivations (the catalogue's act-offload); it had been listed as a setting not modelled
    r = read(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "use_peft": True, "gradient_checkpointing": True,
                        "activation_offloading": True})
    assert r.techniques() == ["lora", "gc", "act-offload"]


def test_the_trainers_liger_kernel_is_liger_ce(tmp_path):
    # transformers' Trainer, use_liger_kernel: _apply_liger_kernel_to_instance(model) with its defaults
    # (fused_linear_cross_entropy=True): the logits never materialise, so TRL's full-logits loss note does not apply
    r = read(tmp_path, {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "use_peft": True, "use_liger_kernel": True})
    assert r.techniques() == ["lora", "liger-ce"]
    assert not any(i["key"] == "loss_type" for i in r.ignored)
