"""LLaMA-Factory YAML configs (``model_name_or_path``, ``finetuning_type``, ``quantization_bit``,
``cutoff_len``, ``lora_rank``, ``lora_target``...) -> a Recipe. LLaMA-Factory loads the model in
the compute dtype (``bf16: true`` -> 16-bit weights); its trainer keys are transformers'
TrainingArguments (bench/cells/trainconfig/hf.training_args); it checkpoints the decoder layers unless told not to
(``checkpointing``). Torch-free."""
from __future__ import annotations

from bench.cells.trainconfig.hf import rest, training_args
from bench.cells.trainconfig.recipe import Recipe, _true, positive_int


def read(doc: dict, file: str) -> Recipe:
    r = Recipe(file, "llamafactory")
    used = {"model_name_or_path", "finetuning_type", "quantization_bit", "cutoff_len", "lora_rank", "lora_alpha",
            "lora_dropout", "lora_target", "packing", "neat_packing", "trust_remote_code", "flash_attn",
            "quantization_method", "stage"}
    r.model = doc.get("model_name_or_path")
    if r.model:
        r.took("model_name_or_path", r.model, "model")
    kind = doc.get("finetuning_type", "lora")
    if kind == "lora":
        r.adapter = "lora"
        r.took("finetuning_type", kind, "lora")
    elif kind == "full":
        r.took("finetuning_type", kind, "full fine-tune (no adapter)")
    else:
        r.skip("finetuning_type", kind, "only lora and full fine-tuning are techniques here")
    if doc.get("stage") is not None:  # rm/ppo/dpo/kto never get here (trainconfig/stage.py refuses them)
        r.took("stage", doc["stage"], "a supervised step" if doc["stage"] == "sft" else "a pre-training step")
    bits = doc.get("quantization_bit")
    if bits == 4 and doc.get("quantization_method", "bnb") == "bnb":
        r.adapter = "qlora"
        r.took("quantization_bit", bits, "qlora (NF4 base weights)")
    elif bits is not None:
        r.skip("quantization_bit", bits, "only 4-bit bitsandbytes (QLoRA) quantization is a technique here")
    for key, option in (("lora_rank", "r"), ("lora_alpha", "alpha"), ("lora_dropout", "dropout"),
                        ("lora_target", "target_modules")):
        if doc.get(key) is not None:
            r.lora_setting(key, doc[key], option)
    if doc.get("cutoff_len") is not None:
        r.seq = positive_int(r, "cutoff_len", doc["cutoff_len"])
        if r.seq:
            r.took("cutoff_len", r.seq, f"sequence length {r.seq}")
    if _true(doc.get("packing")) or _true(doc.get("neat_packing")):
        r.packing = True
        key = "neat_packing" if _true(doc.get("neat_packing")) else "packing"
        r.took(key, doc[key], "packing")
    if doc.get("flash_attn") not in (None, "auto"):
        r.attention("flash_attn", doc["flash_attn"], kind=str(doc["flash_attn"]).replace("fa2", "flash_attention_2"))
    if "trust_remote_code" in doc:
        r.skip("trust_remote_code", doc["trust_remote_code"], "never taken from a config: pass --trust-remote-code "
                                                              "to run a model's own code")
    # lora/qlora keep the frozen base in the compute dtype; full fine-tuning upcasts the trainable
    # weights to fp32 unless pure_bf16 (LLaMA-Factory's adapter.py)
    pure = _true(doc.get("pure_bf16"))
    if "pure_bf16" in doc:
        used.add("pure_bf16")
        r.took("pure_bf16", doc["pure_bf16"], "bf16 weights" if pure else "fp32 trainable weights")
    used |= training_args(doc, r, weights_16bit=kind != "full" or pure)
    checkpointing(doc, r, used)
    rest(doc, used, r)
    return r


def checkpointing(doc: dict, r: Recipe, used: set[str]) -> None:
    """LLaMA-Factory checkpoints every decoder layer unless ``disable_gradient_checkpointing`` (ModelArguments,
    default False): model/model_utils/checkpointing.py ``prepare_model_for_training`` enables it on the model
    itself, whatever TrainingArguments' ``gradient_checkpointing`` says. ``use_unsloth_gc`` moves each checkpoint
    to host memory (Unsloth's offloaded checkpointing): the catalogue's ``act-offload`` over ``gc``, whose
    offloaded tensors are the checkpoints."""
    used |= {"disable_gradient_checkpointing", "use_unsloth_gc", "gradient_checkpointing"}
    if _true(doc.get("disable_gradient_checkpointing")):
        r.gc = False
        r.mapped = [m for m in r.mapped if m["key"] != "gradient_checkpointing"]
        r.took("disable_gradient_checkpointing", doc["disable_gradient_checkpointing"], "no gc")
        return
    r.gc = True
    r.mapped = [m for m in r.mapped if m["key"] not in ("gradient_checkpointing", "gradient_checkpointing_kwargs")]
    r.took("disable_gradient_checkpointing", doc.get("disable_gradient_checkpointing", "(not set: False)"),
           "gc: LLaMA-Factory checkpoints every decoder layer unless disable_gradient_checkpointing is true")
    used |= {"use_reentrant_gc", "gradient_checkpointing_kwargs"}
    r.gc_reentrant = _true(doc.get("use_reentrant_gc", True)) and not _true(doc.get("use_unsloth_gc"))
    r.took("use_reentrant_gc", doc.get("use_reentrant_gc", "(not set: True)"),
           "gc-reentrant: LLaMA-Factory passes use_reentrant=use_reentrant_gc (default True) to the checkpoint"
           if r.gc_reentrant else "gc: torch's non-reentrant checkpoint")
    if _true(doc.get("use_unsloth_gc")):
        r.extra.append("act-offload")
        r.took("use_unsloth_gc", doc["use_unsloth_gc"], "act-offload: each checkpoint moved to host memory in "
                                                          "forward and back in backward (Unsloth's offloaded checkpointing)")
