"""torchtune recipe configs (``model._component_``, ``batch_size``, ``dtype``,
``enable_activation_checkpointing``, ``optimizer._component_``, ``tokenizer.max_seq_len``...) ->
a Recipe. The model builder's name says the model and the adapter (``qlora_llama3_1_8b``);
torchtune holds the weights in ``dtype``. Torch-free."""
from __future__ import annotations

import re

from bench.cells.trainconfig.hf import rest
from bench.cells.trainconfig.recipe import Recipe, _true, positive_int

# builder family -> the Hub repository of its published config (matrix/models _source names)
BUILDERS = {
    r"llama3_1_8b": "meta-llama/Llama-3.1-8B", r"llama3_1_70b": "meta-llama/Llama-3.1-70B",
    r"llama3_2_1b": "meta-llama/Llama-3.2-1B", r"llama3_2_3b": "meta-llama/Llama-3.2-3B",
    r"llama3_8b": "meta-llama/Meta-Llama-3-8B", r"qwen2_5_0_5b": "Qwen/Qwen2.5-0.5B",
    r"qwen2_5_7b": "Qwen/Qwen2.5-7B", r"qwen2_5_14b": "Qwen/Qwen2.5-14B",
}


def read(doc: dict, file: str) -> Recipe:
    r = Recipe(file, "torchtune")
    used = {"model", "tokenizer", "batch_size", "dtype", "enable_activation_checkpointing", "optimizer",
            "enable_activation_offloading", "compile", "loss", "gradient_accumulation_steps", "optimizer_in_bwd",
            "packed", "dataset", "fsdp_cpu_offload", "fsdp_reshard_after_forward", "custom_sharded_layers"}
    model = doc.get("model") or {}
    builder = str(model.get("_component_", "")).rsplit(".", 1)[-1] if isinstance(model, dict) else ""
    for pattern, repo in BUILDERS.items():
        if re.fullmatch(rf"(lora_|qlora_)?{pattern}", builder):
            r.model = repo
            r.took("model._component_", model["_component_"], f"model {repo}")
            break
    else:
        r.skip("model._component_", builder or model, "a model builder ft-membench does not know: name the model "
                                                      "as the fit command's MODEL argument")
    if builder.startswith("qlora_"):
        r.adapter = "qlora"
    elif builder.startswith("lora_"):
        r.adapter = "lora"
    if r.adapter:
        r.took("model._component_", builder, r.adapter)
        modules = list(model.get("lora_attn_modules") or [])
        modules = [{"output_proj": "o_proj"}.get(m, m) for m in modules]
        if _true(model.get("apply_lora_to_mlp")):
            modules += ["gate_proj", "up_proj", "down_proj"]
        if modules:
            r.lora_setting("model.lora_attn_modules", modules, "target_modules")
        for key, option in (("lora_rank", "r"), ("lora_alpha", "alpha"), ("lora_dropout", "dropout")):
            if model.get(key) is not None:
                r.lora_setting(f"model.{key}", model[key], option)
    if isinstance(model, dict):
        for key, value in model.items():
            if key not in ("_component_", "lora_attn_modules", "apply_lora_to_mlp", "lora_rank", "lora_alpha",
                           "lora_dropout") and value is not None:
                r.skip(f"model.{key}", value, "not a setting of the training step's memory that ft-membench models")
    tok = doc.get("tokenizer") or {}
    if isinstance(tok, dict) and tok.get("max_seq_len") is not None:
        r.seq = positive_int(r, "tokenizer.max_seq_len", tok["max_seq_len"])
        if r.seq:
            r.took("tokenizer.max_seq_len", r.seq, f"sequence length {r.seq}")
    elif isinstance(tok, dict):
        r.skip("tokenizer.max_seq_len", None, "not set: torchtune trains each sample at its own length; answered "
                                              "at the --seq given (default 2048)")
    if doc.get("batch_size") is not None:
        r.batch = positive_int(r, "batch_size", doc["batch_size"])
        if r.batch:
            r.took("batch_size", r.batch, f"batch {r.batch}")
    dtype = str(doc.get("dtype", "fp32")).lower()
    r.precision = {"bf16": "bf16", "bfloat16": "bf16", "fp32": "fp32", "float32": "fp32"}.get(dtype)
    if r.precision:
        r.took("dtype", doc.get("dtype", "fp32"), r.precision)
    else:
        r.skip("dtype", dtype, "only bf16 and fp32 weights are torchtune dtypes here")
    if r.adapter == "qlora" and r.precision == "fp32":
        r.precision = None
    r.gc = _true(doc.get("enable_activation_checkpointing"))
    if "enable_activation_checkpointing" in doc:
        r.took("enable_activation_checkpointing", doc["enable_activation_checkpointing"], "gc" if r.gc else "no gc")
    for key, name in (("enable_activation_offloading", "act-offload"), ("compile", "compile"),
                      ("optimizer_in_bwd", "opt-in-bwd")):
        if key in doc:
            if _true(doc[key]):
                r.extra.append(name)
            r.took(key, doc[key], name if _true(doc[key]) else f"no {name}")
    opt = doc.get("optimizer") or {}
    if isinstance(opt, dict) and opt.get("_component_"):
        comp = str(opt["_component_"])
        if comp == "torch.optim.AdamW" and _true(opt.get("fused")):
            r.optimizer = "adamw-fused"
            r.took("optimizer._component_", comp, "adamw-fused (fused: True)")
        else:
            r.set_optimizer("optimizer._component_", comp)
    loss = doc.get("loss") or {}
    if isinstance(loss, dict) and "Chunked" in str(loss.get("_component_", "")):
        r.extra.append("chunked-ce")
        r.took("loss._component_", loss["_component_"], "chunked-ce")
    elif loss:
        r.took("loss._component_", loss.get("_component_") if isinstance(loss, dict) else loss, "full cross-entropy")
    if "gradient_accumulation_steps" in doc:
        r.skip("gradient_accumulation_steps", doc["gradient_accumulation_steps"],
               "accumulation repeats the batch's step: the peak is batch_size's")
    distributed(doc, r)
    ds = doc.get("dataset") or {}
    if isinstance(ds, dict) and _true(ds.get("packed")) or _true(doc.get("packed")):
        r.packing = True
        r.took("dataset.packed", True, "packing")
    if isinstance(ds, dict):
        r.skip("dataset", ds.get("_component_", "(dataset)"), "the data themselves: answered on fixed-shape rows")
    rest(doc, used, r)
    return r


def distributed(doc: dict, r: Recipe) -> None:
    """What the config's recipe runs on several GPUs: torchtune's *_distributed recipes shard with FSDP2
    (``training.shard_model``: ``fully_shard`` on each decoder layer, then the model), with
    ``cpu_offload=cfg.get("fsdp_cpu_offload", False)`` and ``reshard_after_forward=cfg.get(
    "fsdp_reshard_after_forward", True)`` (recipes/lora_finetune_distributed.py, full_finetune_distributed.py).
    The launch command, not the config, says how many GPUs (``--gpus``); on one GPU these keys do nothing."""
    offload = _true(doc.get("fsdp_cpu_offload"))
    r.several = "fsdp-offload" if offload else "fsdp"
    if "fsdp_cpu_offload" in doc:
        r.took("fsdp_cpu_offload", doc["fsdp_cpu_offload"], "fsdp-offload on several GPUs" if offload
               else "no offload on several GPUs")
    if "fsdp_reshard_after_forward" in doc and not _true(doc["fsdp_reshard_after_forward"]):
        r.several_refused = ("fsdp_reshard_after_forward: False keeps every unit's parameters gathered from its "
                             "forward to its backward, more than full sharding holds; ft-membench does not simulate it")
    if doc.get("custom_sharded_layers"):
        r.skip("custom_sharded_layers", doc["custom_sharded_layers"], "separate FSDP units for these layers are not "
               "simulated (each decoder layer and the model are): they gather less at once, so the answer is high by "
               "at most those layers' gathered weights")
