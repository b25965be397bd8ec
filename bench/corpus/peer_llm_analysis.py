"""llm-analysis (PyPI, optional) as a peer on a corpus row, through its own Python API, offline. Torch-free.

    reason = unavailable()                  # None when llm_analysis imports, else why it cannot run
    answer = estimate(row, options, memory) # {"bytes", "fits", "what", "unexpressed"}; Unanswerable if it cannot

Its releases pin huggingface-hub<0.15 and transformers<5, which only its Hub lookup of a model
config by name uses; it is installed without them (``pip install --no-deps llm-analysis==0.2.2``,
with ``fire``, ``six`` and ``termcolor``, its imports: the README's install line) and given
everything by object, never by name:

- ``ModelConfig`` from the row's model config (matrix/models/<name>.json): layers, heads, KV heads,
  hidden size, vocabulary, FFN width. Its config requires the FFN width to be a whole multiple of
  the hidden size (``ffn_embed_dim % hidden_dim == 0``, an assertion): a model that is not
  (Llama 2 and 3, Mistral, Qwen2.5) is a row it cannot answer, with its own message.
- ``GPUConfig`` with the row's GPU memory (its latency figures are not read);
- the dtype: 16-bit weights (``w16a16e16``); fp32 weights are not among its dtype configs;
- ``training(batch, seq, activation_recomputation, ds_zero, flash_attn, mlp_gated_linear_units,
  master_weights_dtype_bytes, other_op_bytes)``: full recomputation for gc; ZeRO 1-3 as its DSZeRO,
  FSDP (FULL_SHARD) as ZeRO-3, which it says shards the same states; the optimizer as its bytes of
  master weights and state: AdamW (fp32 master, 8 bytes of moments; under pure bf16, 2 and 4),
  8-bit AdamW (2), SGD (0).

It models full training only: a LoRA or QLoRA row, offload, generation, or an optimizer it has no
bytes for is a row it cannot answer. Its figure is ``(weight+op_state+grad+act)_memory_per_gpu``:
weights, optimizer state, gradients and activations; what it leaves out of our step (the logits and
the loss's temporaries, the allocator, the CUDA context) and what it counts that ours does not (a
master copy beside pure bf16 weights) is listed in ``unexpressed``.
"""
from __future__ import annotations

import json

from bench.cells import techniques as tech
from bench.corpus import published
from bench.corpus.row import Row

NAME = "llm-analysis"
INSTALL = "pip install --no-deps llm-analysis==0.2.2 fire==0.5.0 six termcolor"
GATED = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "gemma2", "mixtral")   # SwiGLU / GeGLU MLPs


class Unanswerable(ValueError):
    """llm-analysis cannot answer this row (the message says why)."""


def unavailable() -> str | None:
    try:
        import llm_analysis.analysis  # noqa: F401
    except ImportError as exc:
        return f"not run: llm-analysis is optional and not installed or not importable ({exc}; `{INSTALL}`)"
    return None


def _model_config(name: str):
    from llm_analysis.config import ModelConfig
    raw = json.loads((published.MODELS_DIR / f"{name}.json").read_text())
    text = raw.get("text_config") or raw
    try:
        return ModelConfig(name=name, num_layers=text["num_hidden_layers"], n_head=text["num_attention_heads"],
                           hidden_dim=text["hidden_size"], vocab_size=text["vocab_size"],
                           max_seq_len=text.get("max_position_embeddings"),
                           num_key_value_heads=text.get("num_key_value_heads") or text["num_attention_heads"],
                           ffn_embed_dim=text.get("intermediate_size") or 4 * text["hidden_size"],
                           model_type=text.get("model_type"))
    except KeyError as exc:
        raise Unanswerable(f"the model config has no {exc} for llm-analysis's ModelConfig") from None
    except AssertionError as exc:
        raise Unanswerable(f"llm-analysis refuses the model config: {' '.join(str(exc).split())}") from None


def training_args(knobs: dict, batch: int, seq: int) -> tuple[dict, list[str]]:
    """llm-analysis's ``training`` arguments for our knobs (enums by name), and what of ours it cannot express."""
    if knobs["adapter"]:
        raise Unanswerable("llm-analysis models full training only (no LoRA or QLoRA)")
    if knobs["workload"] != "train":
        raise Unanswerable("llm-analysis's training estimate is for a training step")
    if knobs["dist"] in ("zero2-offload", "zero3-offload", "fsdp-offload"):
        raise Unanswerable("llm-analysis has no CPU offload")
    if knobs["precision"] == "fp32":
        raise Unanswerable("llm-analysis has no 32-bit weights among its dtype configs")
    pure = knobs["precision"] == "bf16"
    opt = knobs["optimizer"]
    if opt in ("adamw", "adamw-fused"):
        master, state = (2, 4) if pure else (4, 8)
    elif opt in ("adamw8bit", "paged-adamw8bit"):
        master, state = (2, 2) if pure else (4, 2)
    elif opt == "sgd":
        master, state = (2, 0) if pure else (4, 0)
    else:
        raise Unanswerable(f"llm-analysis has no optimizer-state bytes for {opt}")
    zero = {None: "NONE", "zero1": "STAGE_1", "zero2": "STAGE_2", "zero3": "STAGE_3", "fsdp": "STAGE_3",
            "fsdp1": "STAGE_3"}[knobs["dist"]]
    unexpressed = [label for cond, label in (
        (True, "the logits and the loss's temporaries, the allocator's cache, the CUDA context"),
        (pure, "a master copy of the weights beside pure bf16 weights (ours keep none)"),
        (not pure, "16-bit weights beside fp32 master weights (ours: fp32 weights under autocast)"),
        (knobs["dist"] in ("fsdp", "fsdp1"), "FSDP as ZeRO-3"),
        (knobs["loss"] != "full", f"{knobs['loss']} loss"), (knobs["compile"], "torch.compile"),
        (knobs["opt_in_bwd"], "optimizer step in backward"), (knobs["act_offload"], "activation offloading"),
        (knobs["batching"] != "fixed", knobs["batching"]), (opt == "paged-adamw8bit", "paged optimizer state"),
        (knobs["accum"] != 1, "gradient accumulation")) if cond]
    return {"batch_size_per_gpu": batch, "seq_len": seq, "activation_recomputation": "FULL" if knobs["gc"] else "NONE",
            "ds_zero": zero, "flash_attn": knobs["attn"] in ("sdpa", "fa2"), "master_weights_dtype_bytes": master,
            "other_op_bytes": state}, unexpressed


def estimate(row: Row, options: dict | None, gpu_memory_bytes: int) -> dict:
    """llm-analysis's answer for a corpus row with our techniques (Unanswerable where it has none)."""
    import logging

    from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
    from llm_analysis.config import GPUConfig, ParallelismConfig, get_dtype_config_by_name
    from llm_analysis.logger import logger
    logger.setLevel(logging.ERROR)   # its advice on efficiency and ZeRO, on every call
    knobs = tech.knobs(row.techniques.split("+"))
    args, unexpressed = training_args(knobs, row.batch_size, row.seq_len)
    model = _model_config(row.model_config_name)
    gated = model.model_type in GATED
    gpu = GPUConfig(name=row.gpu_profile, mem_per_GPU_in_GB=gpu_memory_bytes / 2**30, hbm_bandwidth_in_GB_per_sec=1,
                    intra_node_bandwidth_in_GB_per_sec=1, intra_node_min_message_latency=0, peak_fp16_TFLOPS=1,
                    peak_i8_TFLOPS=1, peak_i4_TFLOPS=1)
    analysis = LLMAnalysis(model, gpu, get_dtype_config_by_name("w16a16e16"),
                           ParallelismConfig(dp_size=max(1, int(row.n_gpus or 1))), flops_efficiency=1.0,
                           hbm_memory_efficiency=1.0)
    try:
        got = analysis.training(**dict(args, activation_recomputation=ActivationRecomputation[args["activation_recomputation"]],
                                       ds_zero=DSZeRO[args["ds_zero"]]), mlp_gated_linear_units=gated)
    except (AssertionError, ValueError, ZeroDivisionError) as exc:
        raise Unanswerable(f"llm-analysis refused the settings: {' '.join(str(exc).split())}") from None
    nbytes = int(got["(weight+op_state+grad+act)_memory_per_gpu"])
    return {"bytes": nbytes, "fits": nbytes <= gpu_memory_bytes,
            "what": f"llm-analysis 0.2.2 training(), (weight+op_state+grad+act)_memory_per_gpu ({args}, gated MLP {gated})",
            "unexpressed": unexpressed}
