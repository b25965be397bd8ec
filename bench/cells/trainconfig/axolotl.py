"""axolotl YAML configs (``base_model``, ``adapter``, ``micro_batch_size``, ``sequence_len``,
``sample_packing``...) -> a Recipe. axolotl loads the base model in the training dtype, so
``bf16: true|auto`` means 16-bit weights (the catalogue's ``bf16``). Torch-free."""
from __future__ import annotations

from bench.cells.trainconfig.hf import rest
from bench.cells.trainconfig.fsdpmode import fsdp_dist
from bench.cells.trainconfig.recipe import (Recipe, _true, accumulation, reentrant, autocast_for_sharded_qlora, ds_dist,
                                           positive_int)


def read(doc: dict, file: str) -> Recipe:
    r = Recipe(file, "axolotl")
    used = set()

    def take(key):
        used.add(key)
        return doc.get(key)

    r.model = take("base_model")
    if r.model:
        r.took("base_model", r.model, "model")
    adapter = take("adapter")
    if adapter in ("lora", "qlora"):
        r.adapter = adapter
        r.took("adapter", adapter, adapter)
    elif adapter:
        r.skip("adapter", adapter, "an adapter the catalogue does not have (lora and qlora only)")
    if _true(take("load_in_4bit")):
        r.adapter = "qlora" if r.adapter in (None, "qlora", "lora") else r.adapter
        r.took("load_in_4bit", True, "qlora (NF4 base weights)")
    if _true(take("load_in_8bit")):
        r.skip("load_in_8bit", True, "LLM.int8 base weights are not a technique here")
    for key, option in (("lora_r", "r"), ("lora_alpha", "alpha"), ("lora_dropout", "dropout"),
                        ("lora_target_modules", "target_modules")):
        if take(key) is not None:
            r.lora_setting(key, doc[key], option)
    if _true(take("lora_target_linear")):
        r.lora_all = True
        r.took("lora_target_linear", True, "lora-all")
    if "micro_batch_size" in doc:
        r.batch = positive_int(r, "micro_batch_size", take("micro_batch_size"))
        if r.batch:
            r.took("micro_batch_size", r.batch, f"batch {r.batch}")
    if "sequence_len" in doc:
        r.seq = positive_int(r, "sequence_len", take("sequence_len"))
        if r.seq:
            r.took("sequence_len", r.seq, f"sequence length {r.seq}")
    if take("sample_packing") is not None:
        r.packing = _true(doc["sample_packing"])
        r.took("sample_packing", doc["sample_packing"], "packing" if r.packing else "no packing")
    if _true(take("pad_to_sequence_len")) and not r.packing:
        r.took("pad_to_sequence_len", True, "every row padded to sequence_len (the fixed shape)")
    elif "pad_to_sequence_len" in doc and doc["pad_to_sequence_len"] is not None:
        r.took("pad_to_sequence_len", doc["pad_to_sequence_len"], "packed rows fill sequence_len")
    bf16, fp16 = take("bf16"), take("fp16")
    if _true(bf16) or _true(fp16):
        r.precision = "bf16" if _true(bf16) else "amp-fp16"
        r.took("bf16" if _true(bf16) else "fp16", bf16 if _true(bf16) else fp16, r.precision)
    if take("optimizer") is not None:
        r.set_optimizer("optimizer", doc["optimizer"])
    gc = take("gradient_checkpointing")
    offloaded = str(gc).strip().lower() in ("offload", "offload_disk")
    if gc is not None:   # axolotl's validation: offload -> gc + activation_offloading true, offload_disk -> "disk"
        r.gc = _true(gc) or offloaded
        r.took("gradient_checkpointing", gc, "gc" if r.gc else "no gc")
    if "gradient_checkpointing_kwargs" in doc:
        reentrant(r, "gradient_checkpointing_kwargs", take("gradient_checkpointing_kwargs"))
    moved = take("activation_offloading")
    if offloaded or (moved is not None and (_true(moved) or str(moved).strip().lower() in ("legacy", "disk"))):
        key = "activation_offloading" if moved is not None and not offloaded else "gradient_checkpointing"
        disk = "disk" in str(gc if offloaded else moved).lower()
        r.extra.append("act-offload")
        r.took(key, gc if offloaded else moved, "act-offload: each checkpoint moved off the GPU in forward and back in "
               "backward" + (" (axolotl writes them to disk; the host memory shown counts them in RAM)" if disk else ""))
    if _true(take("flash_attention")):
        r.attention("flash_attention", doc["flash_attention"], kind="flash_attention_2")
    if _true(take("xformers_attention")):
        r.attention("xformers_attention", doc["xformers_attention"], kind="xformers")
    if take("deepspeed"):
        ds_dist(doc["deepspeed"], "deepspeed", r)
    if take("fsdp") or take("fsdp_config"):
        take("fsdp_version")
        if r.dist:
            r.skip("fsdp", doc.get("fsdp") or doc.get("fsdp_config"), "deepspeed is already set")
        else:
            fsdp_dist(doc, "fsdp" if doc.get("fsdp") else "fsdp_config", r)
            autocast_for_sharded_qlora(r, "bf16")
    if take("gradient_accumulation_steps") is not None:  # axolotl trains with the HF Trainer
        accumulation(r, "gradient_accumulation_steps", doc["gradient_accumulation_steps"])
    rest(doc, used, r)
    return r
