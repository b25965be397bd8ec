"""fitcheck-llm (PyPI, optional) as a peer on a corpus row, through its own Python API, offline. Torch-free.

    reason = unavailable()                  # None when fitcheck imports, else why it cannot run
    answer = estimate(row, options)         # {"bytes", "fits", "what", "unexpressed"}; Unanswerable if it cannot

fitcheck's ``estimate(ModelConfig, TrainingConfig, GpuSpec)`` is given the row's model config
(matrix/models/<name>.json, parsed by fitcheck's own config parser, no hub), the row's batch and
sequence, and what of our techniques its ``TrainingConfig`` can say: precision, NF4 quantization,
optimizer (AdamW with fp32 or bf16 moments, 8-bit AdamW, SGD), LoRA rank and targets, gradient
checkpointing, flash attention (our sdpa cells run CUDA's flash/memory-efficient kernels). What
it cannot say (chunked loss, compile, optimizer in backward, activation offloading, packing,
DoRA) is listed in ``unexpressed``; a sharded or multi-GPU recipe, or an optimizer it has no
figure for, is a row it cannot answer. Its verdict is its ``fits``
on a GPU of the profile's memory (fitcheck's own usable share of it). Its figure is its tensors
tier (``total_mib - overhead_mib``) on a row measured as allocated or active memory, its ``total_mib``
(tensors plus context and cache) on the others.
"""
from __future__ import annotations

import json

from bench.corpus import published
from bench.cells import techniques as tech
from bench.corpus.row import Row

NAME = "fitcheck-llm"
TENSOR_MEASURES = ("allocated", "active")  # rows measured on live tensors: compared with fitcheck's tensors tier


class Unanswerable(ValueError):
    """fitcheck cannot answer this row (the message says why)."""


def unavailable() -> str | None:
    try:
        import fitcheck  # noqa: F401
    except ImportError:
        return "not run: fitcheck-llm is optional and not installed (`pip install fitcheck-llm`)"
    return None


def _model_config(name: str):
    from fitcheck import config_parser as cp
    raw = json.loads((published.MODELS_DIR / f"{name}.json").read_text())
    raw = {k: v for k, v in raw.items() if not k.startswith("_")}
    try:
        cp._reject_unsupported(raw, name)
    except cp.UnsupportedModelError as exc:
        raise Unanswerable(f"fitcheck does not support the model: {' '.join(str(exc).split())}") from None
    fields = cp._parse_fields(raw)
    return cp.ModelConfig(name=name, num_params=cp._count_params(fields), hidden_size=fields.hidden_size,
                          num_layers=fields.num_layers, num_attention_heads=fields.num_attention_heads,
                          num_kv_heads=fields.num_kv_heads, intermediate_size=fields.intermediate_size,
                          vocab_size=fields.vocab_size, head_dim=fields.head_dim,
                          tie_word_embeddings=fields.tie_word_embeddings)


def training_config(knobs: dict, options: dict, batch: int, seq: int) -> tuple[dict, list[str]]:
    """fitcheck's TrainingConfig fields for our knobs, and what of ours it cannot express."""
    if knobs["dist"] or knobs["world_size"] != 1:
        raise Unanswerable("fitcheck estimates one GPU without sharding")
    if knobs["workload"] != "train":
        raise Unanswerable("fitcheck's training estimate is for a training step")
    precision = {"bf16": "bf16", "amp-bf16": "bf16", "amp-fp16": "fp16", "fp32": "fp32"}[knobs["precision"]]
    opt = knobs["optimizer"]
    if opt in ("adamw", "adamw-fused"):
        optimizer, opt_dtype = "adamw", "bf16" if knobs["precision"] == "bf16" else "fp32"
    elif opt in ("adamw8bit", "paged-adamw8bit"):
        optimizer, opt_dtype = "adamw8bit", "fp32"
    elif opt == "sgd":
        optimizer, opt_dtype = "sgd", "fp32"
    else:
        raise Unanswerable(f"fitcheck has no figure for the optimizer {opt}")
    unexpressed = [label for cond, label in (
        (knobs["loss"] != "full", f"{knobs['loss']} loss"), (knobs["compile"], "torch.compile"),
        (knobs["opt_in_bwd"], "optimizer step in backward"), (knobs["act_offload"], "activation offloading"),
        (knobs["batching"] != "fixed", knobs["batching"]), (knobs["dora"], "DoRA"),
        (knobs["precision"].startswith("amp"), "autocast's fp32 master weights"),
        (opt == "paged-adamw8bit", "paged optimizer state (outside torch's allocator)"),
        (knobs["accum"] != 1, "gradient accumulation")) if cond]
    lora = options.get("lora") or options
    fields = {"precision": precision, "quantization": "nf4" if knobs["adapter"] == "qlora" else "none",
              "double_quant": knobs["adapter"] == "qlora" and knobs["double_quant"],
              "optimizer": optimizer, "optimizer_dtype": opt_dtype, "batch_size": batch, "seq_len": seq,
              "lora_rank": lora.get("r") if knobs["adapter"] else None,
              "grad_checkpoint": bool(knobs["gc"]), "flash_attn": knobs["attn"] in ("sdpa", "fa2")}
    if knobs["adapter"]:
        if knobs["lora_targets"] == "all-linear":
            fields["lora_targets"] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        elif lora.get("target_modules"):
            fields["lora_targets"] = list(lora["target_modules"])
    return fields, unexpressed


def estimate(row: Row, options: dict | None, gpu_memory_bytes: int) -> dict:
    """fitcheck's answer for a corpus row with our techniques (Unanswerable where it has none)."""
    import fitcheck
    knobs = tech.knobs(row.techniques.split("+"))
    fields, unexpressed = training_config(knobs, options or {}, row.batch_size, row.seq_len)
    gpu = fitcheck.get_gpu(row.gpu or row.gpu_profile, vram_mib=int(gpu_memory_bytes // 2**20))
    try:
        report = fitcheck.estimate(_model_config(row.model_config_name), fitcheck.TrainingConfig(**fields), gpu)
    except ValueError as exc:
        raise Unanswerable(f"fitcheck refused the settings: {' '.join(str(exc).split())}") from None
    # fitcheck's two tiers: its tensors (what max_memory_allocated reads) and its total (those plus its overhead:
    # the CUDA context and the allocator's cache); each row is compared with the tier of its own measure
    tensors = row.measure in TENSOR_MEASURES
    mib = report.total_mib - report.overhead_mib if tensors else report.total_mib
    what = "tensors tier (total_mib - overhead_mib)" if tensors else "total_mib"
    return {"bytes": int(mib * 2**20), "fits": bool(report.fits),
            "what": f"fitcheck-llm estimate, {what} ({fields})",
            "unexpressed": unexpressed}
