"""Workloads beyond the training step: what the matrix checks for them, and vLLM's memory plan.

Torch-free: the matrix loader (bad input refused at load), the sim worker (the plan per GPU)
and the report (the plan again, with another process beside it) all use this module.

vLLM's start-up plan, as the v1 engine computes it. Source: vllm-project/vllm at commit
35d5cda123ec28581759b6d34cde8052314fb1e6 (main, late 2025; the v1 engine):

- ``vllm/v1/worker/gpu_worker.py`` ``Worker.init_device``: after the CUDA context exists,
  ``requested_memory = total_memory * gpu_memory_utilization``; if the free memory is below
  it, a ValueError "Free memory on device (...) on startup is less than desired GPU memory
  utilization (...)". Everything else on the card (other processes, the context) must fit in
  the rest.
- ``Worker.determine_available_memory``: one profiling forward at ``max_num_batched_tokens``
  (``profile_run``) under ``memory_profiling``; ``available_kv_cache_memory =
  requested_memory - non_kv_cache_memory`` where non-KV = weights + torch peak increase
  (activations) + non-torch increase.
- ``Worker.compile_or_warm_up_model``: CUDA graphs are captured *after* the KV cache is
  allocated (``capture_model``), and their memory is not in the requested budget (the code's
  own comment: "memory_profiling does not consider CUDAGraph memory size").
- ``vllm/v1/kv_cache_interface.py`` ``FullAttentionSpec.page_size_bytes`` = 2 (K and V) x
  block_size x num_kv_heads x head_size x dtype bytes, per layer; ``vllm/v1/core/kv_cache_utils.py``:
  ``num_blocks = available // page_size // num_layers``; no memory left gives "No available
  memory for the cache blocks"; one ``max_model_len`` sequence not fitting gives "To serve at
  least one request with the models's max seq len ...".
- ``vllm/engine/arg_utils.py`` ``get_batch_defaults``: the offline ``LLM`` class (what a
  scoring stage runs) defaults to 16384 batched tokens and 1024 sequences on cards of 70 GiB
  or more that are not A100s, 8192 and 256 elsewhere. ``gpu_memory_utilization`` defaults to
  0.9 (``vllm/config/cache.py``), ``block_size`` to 16 on CUDA.

Modelled, not from vLLM's code (each stated in the plan): the CUDA context (512 MiB, as
bench/estimate/verdicts.py reserves it), the non-torch increase while profiling (64 MiB: cuBLAS/cuBLASLt
workspaces), and CUDA graphs' memory (0.5 GiB, what vLLM's own "Graph capturing finished ...
took X GiB" line commonly reports for 7-8B models; 0 under enforce_eager, the ``eager`` knob).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from bench.estimate.verdicts import BLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES

GiB = 2**30
VLLM_SOURCE = ("vllm-project/vllm@35d5cda123ec (v1 engine): vllm/v1/worker/gpu_worker.py (init_device, "
               "determine_available_memory, compile_or_warm_up_model), vllm/v1/kv_cache_interface.py, "
               "vllm/v1/core/kv_cache_utils.py, vllm/engine/arg_utils.py")
BLOCK_SIZE = 16
DEFAULT_UTIL = 0.9
DEFAULT_NEW_TOKENS = 32
NON_TORCH_BYTES = BLAS_WORKSPACE_BYTES
CUDA_GRAPH_BYTES = GiB // 2


def model_limits(config_path) -> dict:
    """The facts of a model's config.json the plan needs (torch-free)."""
    cfg = json.loads(Path(config_path).read_text())
    heads = cfg["num_attention_heads"]
    return {"max_position_embeddings": cfg.get("max_position_embeddings"),
            "layers": cfg["num_hidden_layers"], "kv_heads": cfg.get("num_key_value_heads") or heads,
            "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads}


def kv_bytes_per_token(limits: dict, dtype_bytes: int = 2) -> int:
    """K and V of one token over all layers (vLLM's page size / block_size, times layers)."""
    return 2 * limits["layers"] * limits["kv_heads"] * limits["head_dim"] * dtype_bytes


def load_problem(config_path, knobs: dict) -> str:
    """Why a cell's workload settings cannot be run for this model ('' when they can)."""
    want = knobs.get("max_model_len")
    if not want:
        return ""
    limit = model_limits(config_path)["max_position_embeddings"]
    if limit and want > limit:
        return (f"max_model_len {want} is beyond the model's max_position_embeddings {limit} (vLLM refuses it: "
                f"'User-specified max_model_len ({want}) is greater than the derived max_model_len')")
    return ""


EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def config_problem(config: dict, seq_len: int) -> str:
    """Why a model config cannot give a meaningful training step ('' when it can): no layers,
    a mixture of no experts (or routing to more than there are), a rotary base or norm epsilon
    that is not positive (the loss is NaN), a sequence beyond the model's context."""
    cfg = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    layers = cfg.get("num_hidden_layers")
    if isinstance(layers, int) and layers < 1:
        return f"num_hidden_layers is {layers}: a model without layers trains nothing"
    for key in EXPERT_KEYS:
        n = cfg.get(key)
        if isinstance(n, int) and not isinstance(n, bool) and n < 1:
            return f"{key} is {n}: a mixture of experts without experts"
        per = cfg.get("num_experts_per_tok")
        if isinstance(n, int) and n >= 1 and isinstance(per, int) and per > n:
            return f"num_experts_per_tok {per} is more than {key} {n}"
    for key in ("rope_theta", "rms_norm_eps", "layer_norm_eps"):
        v = cfg.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not v > 0:
            return f"{key} is {v}: it must be positive (the step's loss would be NaN)"
    ctx = cfg.get("max_position_embeddings")
    if isinstance(ctx, int) and ctx > 0 and seq_len > ctx:
        return f"sequence length {seq_len} is beyond the model's context (max_position_embeddings {ctx})"
    return ""


def batch_defaults(gpu: str, profile: dict) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of vLLM's offline LLM class on this card."""
    big = profile["memory_bytes"] >= 70 * GiB and "a100" not in (gpu + str(profile.get("label", ""))).lower()
    return (16384, 1024) if big else (8192, 256)


def _gib(b) -> float:
    return round(b / GiB, 2)


def verdict(plan_: dict) -> str:
    """A vLLM plan's verdict on its card: "fits" when the engine starts there, else "oom"."""
    return "fits" if plan_["starts"] else "oom"


def plan(total: int, util: float, weights: int, activation_peak: int, kv_token_bytes: int, max_model_len: int,
         coresident: int = 0, cuda_graph: int = CUDA_GRAPH_BYTES, non_torch: int = NON_TORCH_BYTES,
         context: int = CUDA_CONTEXT_BYTES) -> dict:
    """vLLM's start-up memory plan on one card (bytes), and whether the engine starts.

    ``coresident``: bytes another process holds on the card before vLLM starts."""
    requested = total * util
    free_at_start = total - context - coresident
    non_kv = weights + activation_peak + non_torch
    kv_available = requested - non_kv
    block_bytes = BLOCK_SIZE * kv_token_bytes
    blocks = max(int(kv_available // block_bytes), 0)
    kv_bytes = blocks * block_bytes
    need_one = math.ceil(max_model_len / BLOCK_SIZE) * block_bytes
    card_used = context + coresident + non_kv + kv_bytes + cuda_graph
    out = {"total_bytes": total, "gpu_memory_utilization": util, "requested_bytes": int(requested),
           "free_at_start_bytes": free_at_start, "coresident_bytes": coresident, "context_bytes": context,
           "weights_bytes": weights, "activation_peak_bytes": activation_peak, "non_torch_bytes": non_torch,
           "kv_available_bytes": int(kv_available), "kv_blocks": blocks, "block_size": BLOCK_SIZE,
           "kv_tokens": blocks * BLOCK_SIZE, "kv_cache_bytes": kv_bytes, "kv_bytes_per_token": kv_token_bytes,
           "max_model_len": max_model_len, "kv_bytes_one_sequence": need_one,
           "max_concurrent_sequences": round(blocks * BLOCK_SIZE / max_model_len, 2),
           "cuda_graph_bytes": cuda_graph, "card_used_bytes": int(card_used), "starts": False, "error": ""}
    if free_at_start < requested:
        out["error"] = (f"Free memory on device ({_gib(free_at_start)}/{_gib(total)} GiB) on startup is less than "
                        f"desired GPU memory utilization ({util}, {_gib(requested)} GiB). Decrease GPU memory "
                        "utilization or reduce GPU memory used by other processes.")
    elif kv_available <= 0:
        out["error"] = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                        f"initializing the engine. (Available KV cache memory: {_gib(kv_available)} GiB)")
    elif need_one > kv_available:
        out["error"] = (f"To serve at least one request with the models's max seq len ({max_model_len}), "
                        f"({_gib(need_one)} GiB KV cache is needed, which is larger than the available KV cache "
                        f"memory ({_gib(kv_available)} GiB). Based on the available memory, the estimated maximum "
                        f"model length is {blocks * BLOCK_SIZE}. Try increasing `gpu_memory_utilization` or "
                        "decreasing `max_model_len` when initializing the engine.")
    elif card_used > total:
        out["error"] = (f"CUDA out of memory while capturing CUDA graphs: the card would hold {_gib(card_used)} of "
                        f"{_gib(total)} GiB (graphs are captured after the KV cache, outside the requested budget)")
    else:
        out["starts"] = True
    return out
