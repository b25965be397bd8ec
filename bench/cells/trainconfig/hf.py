"""TRL / transformers ``TrainingArguments`` configs (JSON or YAML; TRL's CLI ``--config``, the
alignment-handbook recipes): SFTConfig/TrainingArguments keys and TRL's ModelConfig keys.

Read as TRL runs them: ``bf16: true`` is autocast (transformers' TrainingArguments sets
``mixed_precision = "bf16"``, training_args.py:1618 in 5.23), never a cast of the weights; the
weights are in the loading dtype, ``dtype`` (TRL >= 1.0; ModelConfig's default ``float32``,
model_config.py:89 in 1.16) or ``torch_dtype`` (TRL < 1.0). Under ``load_in_4bit`` the weights
bitsandbytes does not quantize (embeddings, norms, LM head) stay in that dtype in TRL 1.x, whose
SFTTrainer calls no ``prepare_model_for_kbit_training``; TRL < 1.0 (the ``torch_dtype`` spelling)
ran it (sft_trainer.py:581 in 0.19.1), which upcasts them to fp32 (peft's other.py:205-209):
either way fp32 extras unless a TRL 1.x config loads in 16 bits (``qlora-fp32`` vs ``qlora``).

``training_args`` reads the TrainingArguments keys every HfArgumentParser-based tool shares
(LLaMA-Factory reuses it); ``read`` adds TRL's model and PEFT keys. Torch-free.
"""
from __future__ import annotations

from bench.cells.trainconfig.fsdpmode import fsdp_dist
from bench.cells.trainconfig.recipe import (Recipe, _true, accumulation, reentrant, autocast_for_sharded_qlora, ds_dist,
                                           positive_int, sync_each_batch)

def training_args(doc: dict, r: Recipe, weights_16bit: bool) -> set[str]:
    """Read the shared TrainingArguments keys into ``r``; the keys it consumed."""
    used = set()
    if "per_device_train_batch_size" in doc:
        r.batch = positive_int(r, "per_device_train_batch_size", doc["per_device_train_batch_size"])
        if r.batch:
            r.took("per_device_train_batch_size", r.batch, f"batch {r.batch}")
        used.add("per_device_train_batch_size")
    if doc.get("bf16") is not None or doc.get("fp16") is not None:
        prec = "bf16" if _true(doc.get("bf16")) and weights_16bit else \
            "amp-bf16" if _true(doc.get("bf16")) else "amp-fp16" if _true(doc.get("fp16")) else None
        key = "bf16" if _true(doc.get("bf16")) else "fp16"
        if prec:
            r.precision = prec
            r.took(key, doc[key], prec + (" (16-bit weights)" if prec == "bf16" else " (autocast over fp32 weights)"))
        used |= {"bf16", "fp16"}
    if "optim" in doc:
        r.set_optimizer("optim", doc["optim"])
        used.add("optim")
    if "gradient_checkpointing" in doc:
        r.gc = _true(doc["gradient_checkpointing"])
        r.took("gradient_checkpointing", doc["gradient_checkpointing"], "gc" if r.gc else "no gc")
        used.add("gradient_checkpointing")
    if "gradient_checkpointing_kwargs" in doc:
        reentrant(r, "gradient_checkpointing_kwargs", doc["gradient_checkpointing_kwargs"])
        used.add("gradient_checkpointing_kwargs")
    if doc.get("deepspeed"):
        ds_dist(doc["deepspeed"], "deepspeed", r)
        used.add("deepspeed")
    if doc.get("fsdp"):
        fsdp_dist(doc, "fsdp", r)
        used |= {"fsdp", "fsdp_config"} if isinstance(doc.get("fsdp_config"), (dict, str)) else {"fsdp"}
    if "use_liger_kernel" in doc:   # the Trainer's _apply_liger_kernel_to_instance: fused_linear_cross_entropy=True
        used.add("use_liger_kernel")
        if _true(doc["use_liger_kernel"]):
            r.extra.append("liger-ce")
        r.took("use_liger_kernel", doc["use_liger_kernel"], "liger-ce: Liger's fused linear cross-entropy (its RMSNorm, "
               "SwiGLU and RoPE kernels are not simulated: the answer is high by what they save)"
               if _true(doc["use_liger_kernel"]) else "no Liger kernels")
    if "gradient_accumulation_steps" in doc:
        synced = sync_each_batch(doc)
        accumulation(r, "gradient_accumulation_steps", doc["gradient_accumulation_steps"], synced)
        used |= {"gradient_accumulation_steps"} | ({"accelerator_config"} if synced is not None else set())
    return used


def read(doc: dict, file: str) -> Recipe:
    r = Recipe(file, "trl")
    used = {"model_name_or_path"}
    r.model = doc.get("model_name_or_path")
    if r.model:
        r.took("model_name_or_path", r.model, "model")
    weights_16bit = str(doc.get("torch_dtype") or doc.get("dtype") or "").lower() in ("bfloat16", "bf16", "float16")
    for key in ("torch_dtype", "dtype"):
        if key in doc:
            used.add(key)
            r.took(key, doc[key], "16-bit weights" if weights_16bit else "fp32 weights")
    # TRL < 1.0 (``torch_dtype``; TRL 1.x spells it ``dtype``) prepared a 4-bit model with peft's
    # prepare_model_for_kbit_training: every non-quantized weight upcast to fp32 whatever the dtype
    extras_16bit = weights_16bit and "torch_dtype" not in doc
    peft = _true(doc.get("use_peft"))
    if "use_peft" in doc:
        used.add("use_peft")
        r.adapter = "lora" if peft else None
        r.took("use_peft", doc["use_peft"], "lora" if peft else "no adapter")
    if "load_in_4bit" in doc:
        used.add("load_in_4bit")
        if _true(doc["load_in_4bit"]):
            r.adapter = "qlora" if extras_16bit else "qlora-fp32"
            extras = "16 bits (TRL 1.x keeps the loading dtype)" if extras_16bit else \
                "fp32 (the loading dtype, or peft's prepare_model_for_kbit_training under TRL < 1.0)"
            r.took("load_in_4bit", doc["load_in_4bit"],
                   f"{r.adapter} (NF4 base weights; embeddings, norms and LM head in {extras})")
    if _true(doc.get("load_in_8bit")):
        used.add("load_in_8bit")
        r.skip("load_in_8bit", doc["load_in_8bit"], "LLM.int8 base weights are not a technique here")
    for key, option in (("lora_r", "r"), ("lora_alpha", "alpha"), ("lora_dropout", "dropout"),
                        ("lora_target_modules", "target_modules")):
        if doc.get(key) is not None:
            used.add(key)
            r.lora_setting(key, doc[key], option)
    # 16-bit weights only where the config loads them so (a LoRA base, or a 4-bit model's extras)
    used |= training_args(doc, r, extras_16bit if r.adapter in ("qlora", "qlora-fp32") else weights_16bit)
    if r.adapter == "qlora-fp32" and weights_16bit and r.dist in ("fsdp", "fsdp1", "zero3", "zero3-offload"):
        # TRL < 1.0 skipped the preparation for a sharded 4-bit model (sft_trainer.py:570-580 in 0.19.1,
        # is_sharded_qlora: FSDP / ZeRO-3 load it on cpu or meta): its extras stay in torch_dtype
        r.adapter = "qlora"
        r.mapped.append({"key": "load_in_4bit", "value": doc["load_in_4bit"],
                         "as": f"qlora: sharded by {r.dist}, so TRL < 1.0 skipped prepare_model_for_kbit_training "
                               "and the extras stay 16-bit"})
    for key in ("max_seq_length", "max_length"):
        if doc.get(key) is not None:
            used.add(key)
            r.seq = positive_int(r, key, doc[key])
            if r.seq:
                r.took(key, r.seq, f"sequence length {r.seq}")
    if "packing" in doc:
        used.add("packing")
        r.packing = _true(doc["packing"])
        r.took("packing", doc["packing"], "packing" if r.packing else "no packing")
    for key in ("attn_implementation",):
        if doc.get(key):
            used.add(key)
            r.attention(key, doc[key])
    autocast_for_sharded_qlora(r, "bf16")
    used.add("loss_type")
    if "liger-ce" in r.extra:   # the loss is Liger's, whatever loss_type says
        r.took("loss_type", doc.get("loss_type", "(not set)"), "Liger's fused linear cross-entropy (use_liger_kernel)")
    elif "torch_dtype" in doc and "loss_type" not in doc:   # TRL < 1.0's spelling: the full-logits loss it ran
        r.took("loss_type", "(not set)", "transformers' causal-LM loss over the full logits, as TRL < 1.7 computes it")
    else:
        r.skip("loss_type", doc.get("loss_type", "(not set: TRL's default)"), TRL_LOSS)
    if "activation_offloading" in doc:   # TRL's SFTConfig: its OffloadActivations, adapted from torchtune's
        used.add("activation_offloading")
        if _true(doc["activation_offloading"]):
            r.extra.append("act-offload")
        r.took("activation_offloading", doc["activation_offloading"], "act-offload (TRL's activation offloading, "
               "torchtune's OffloadActivations)" if _true(doc["activation_offloading"]) else "no activation offloading")
    if _true(doc.get("torch_compile")):
        used.add("torch_compile")
        r.skip("torch_compile", doc["torch_compile"], "the Trainer compiles the whole model (accelerate's "
               "torch.compile(model)); ft-membench's compile is torchtune's, each decoder layer: answered uncompiled, "
               "which keeps the intermediates a fused kernel would not, so the answer is high by those")
    epoch_order(doc, r)
    rest(doc, used, r)
    return r


# TRL's SFTTrainer computes the loss without the full logits since 1.7 (loss_type "chunked_nll", the default
# from huggingface/trl b58947c, v1.7.0; in 1.16 every loss type, through a fused LM head in tiles of 4096
# tokens x 32768 vocabulary columns: trainer/utils.py add_fused_lm_head). ft-membench's step is transformers'
# causal-LM loss, which holds a micro-batch's logits and their fp32 copy: TRL < 1.7, or loss_type "nll" before 1.16
TRL_LOSS = ("the loss is answered as transformers computes it, over a micro-batch's full logits (their fp32 copy "
            "too), as TRL's SFTTrainer did before 1.7; TRL 1.7 and later by default (and 1.16 for every loss type) "
            "never hold the full logits, so for those versions this answer is high by about that much")


def epoch_order(doc: dict, r: Recipe) -> None:
    """How the trainer draws the epoch's batches, for ``fit --dataset`` only (the step's memory does not
    depend on it, so the keys stay listed as not modelled there): the sampler's seed (``data_seed``,
    else ``seed``, as the Trainer seeds it), the sampling strategy (``train_sampling_strategy``, or
    ``group_by_length: true``), the collator's ``padding_free`` and its ``pad_to_multiple_of``."""
    seed = doc.get("data_seed") if doc.get("data_seed") is not None else doc.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        r.epoch["seed"] = seed
    strategy = doc.get("train_sampling_strategy")
    if strategy in ("random", "group_by_length", "sequential"):
        r.epoch["sampling"] = strategy
    elif _true(doc.get("group_by_length")):
        r.epoch["sampling"] = "group_by_length"
    if _true(doc.get("padding_free")):
        r.epoch["padding_free"] = True
    pad = doc.get("pad_to_multiple_of")
    if isinstance(pad, int) and not isinstance(pad, bool) and pad > 0:
        r.epoch["pad_to_multiple_of"] = pad


def rest(doc: dict, used: set[str], r: Recipe) -> None:
    """Every other key with a value: ignored, listed."""
    for key, value in doc.items():
        if key not in used and value is not None and value != "" and not r_has(r, key):
            r.skip(key, value if isinstance(value, (str, int, float, bool)) else f"({type(value).__name__})",
                   "not a setting of the training step's memory that ft-membench models")


def r_has(r: Recipe, key: str) -> bool:
    return any(x["key"] == key for x in r.mapped + r.ignored)
