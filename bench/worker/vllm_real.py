"""cuda mode's ``vllm`` cell: start vLLM's engine for real and record what it planned.

Needs the optional extra (``pip install -e ".[vllm]"``) and a CUDA GPU; without either the
cell is a ``skipped`` record saying so. No hub access: the model is the cell's config with
random weights, saved locally (bench/worker/models.checkpoint_dir) and loaded by vLLM in
bf16. The engine's start-up errors about memory (bench/cells/workloads.py quotes them) make an
``oom`` record with vLLM's own message; what it planned comes from the engine's config
(``num_gpu_blocks``) and the driver's free memory (``torch.cuda.mem_get_info``, cudaMemGetInfo:
the whole card's, not NVML's, not this process's alone).
"""
from __future__ import annotations

import importlib.util

from bench.cells import workloads
from bench.worker.outcome import Skip

MEMORY_ERRORS = ("Free memory on device", "No available memory for the cache blocks",
                 "KV cache is needed, which is larger than", "out of memory")


def run(spec: dict) -> dict:
    if importlib.util.find_spec("vllm") is None:
        raise Skip('vLLM is not installed: pip install -e ".[vllm]" on a CUDA machine')
    import torch
    if not torch.cuda.is_available():
        raise Skip("the vllm workload in cuda mode needs a CUDA device; none is visible")
    from bench.worker import models
    knobs = spec["knobs"]
    limits = workloads.model_limits(spec["model_config"])
    path = models.checkpoint_dir(spec)
    util = knobs["gpu_util"] or workloads.DEFAULT_UTIL
    max_len = knobs["max_model_len"] or limits["max_position_embeddings"]
    kwargs = dict(model=str(path), tokenizer=None, skip_tokenizer_init=True, dtype="bfloat16",
                  gpu_memory_utilization=util, max_model_len=max_len, enforce_eager=knobs["attn"] == "eager",
                  enable_lora=knobs["adapter"] == "lora")
    if knobs["max_batched_tokens"]:
        kwargs["max_num_batched_tokens"] = knobs["max_batched_tokens"]
    free0, total = torch.cuda.mem_get_info()
    try:
        from vllm import LLM
        llm = LLM(**kwargs)
    except Exception as exc:
        if any(m in str(exc) for m in MEMORY_ERRORS):
            raise MemoryError(f"vLLM could not start: {exc}") from exc
        raise
    free1, _ = torch.cuda.mem_get_info()
    import time

    from vllm import SamplingParams
    batch, new = spec["batch_size"], knobs["new_tokens"] or workloads.DEFAULT_NEW_TOKENS
    prompts = [{"prompt_token_ids": [3 + (i * 7919 + j) % 1000 for j in range(spec["seq_len"])]} for i in range(batch)]
    t0 = time.perf_counter()
    llm.generate(prompts, SamplingParams(max_tokens=new, ignore_eos=True, temperature=0.0))
    wall = time.perf_counter() - t0
    cache = llm.llm_engine.vllm_config.cache_config
    blocks = cache.num_gpu_blocks
    used = free0 - free1
    plan = {"num_gpu_blocks": blocks, "block_size": cache.block_size, "kv_tokens": blocks * cache.block_size,
            "max_concurrent_sequences": round(blocks * cache.block_size / max_len, 2),
            "card_used_by_engine_bytes": used, "free_before_bytes": free0, "total_bytes": total,
            "gpu_memory_utilization": util, "max_model_len": max_len}
    from bench.records import record
    from bench.worker import train
    return {"peak_bytes": used, "breakdown_bytes": {**dict.fromkeys(record.CATEGORIES, 0), "other": used},
            "phase_peak_bytes": None, "step_s_median": wall / new, "tokens_per_s": batch * new / wall,
            "host_peak_rss_bytes": train.host_peak_rss(),
            "details": {"workload": "vllm", "vllm": {"measured": plan, "engine_kwargs": kwargs,
                                                   "note": "peak_bytes: device memory the engine took: the driver's free "
                                                           "memory (cudaMemGetInfo, torch.cuda.mem_get_info) before "
                                                           "- after start-up; a change by another process on the card "
                                                           "counts too"}}}
