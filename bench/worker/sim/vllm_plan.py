"""Sim mode's ``vllm`` cell: vLLM's start-up memory plan for every GPU profile of the study.

    python -m bench.worker SPEC.json RECORD.json      # a vllm cell of a `mode: sim` study

What is simulated (fake tensors, CUDA allocator rounding, CUDA attention kernels; nothing
allocated): the model loaded as vLLM loads it (the config's dtype, bf16; qlora: the NF4 base;
lora: adapters on top), and vLLM's profiling run: one forward over ``max_num_batched_tokens``
tokens, then the sampler's fp32 logits and probabilities for ``max_num_seqs`` rows (vLLM's
``_dummy_sampler_run``). Its peak minus the weights is the activation peak vLLM's
``memory_profiling`` would see (``torch_peak_increase``). The forward is transformers' modules,
whose MLP keeps gate, up and their product apart where vLLM's fused SiluAndMul does not: the
activation peak is an upper bound of vLLM's own.

What is computed from vLLM's rules (bench/cells/workloads.py, source cited there): the requested
memory, the KV space, blocks and tokens, the concurrency at max_model_len, and whether the
engine starts, per GPU. The record:

- ``peak_bytes``/``breakdown_bytes``: the profiling run's peak (weights + activations): the
  part of the plan no GPU changes; ``phase_peak_bytes`` is None (no training phases).
- ``verdicts`` {gpu: fits|oom}: fits when the engine starts and the card holds it all.
- ``details.vllm``: ``plans`` {gpu: plan}, the settings used, ``source``, ``modelled``.
"""
from __future__ import annotations

import torch

from bench.cells import workloads
from bench.worker import cuda_alloc, models, train
from bench.worker.generate import InferenceTracker
from bench.worker.sim import fakestep

GiB = 2**30


def serving_spec(spec: dict) -> dict:
    """vLLM loads the model in its config dtype (bf16 for the models here), not fp32."""
    knobs = dict(spec["knobs"])
    if knobs["adapter"] != "qlora":
        knobs["precision"] = "bf16"
    return dict(spec, knobs=knobs)


def profile(spec: dict, sizes: list[tuple[int, int]]) -> dict:
    """Weights, and the activation peak of vLLM's profiling run for each (tokens, seqs)."""
    tracker = InferenceTracker(rounding=cuda_alloc.round_size)
    out = {}
    with fakestep.FakeRun(spec, tracker) as fake, tracker, torch.no_grad():
        model = models.build(spec, "cpu", qlora_base=fake.qlora_base)
        model.eval()
        tracker.mark("parameters", list(model.parameters()) + list(model.buffers()))
        weights = tracker.total
        vocab = model.config.vocab_size
        params = list(model.parameters())
        out.update(params_total=sum(p.numel() for p in params),
                   params_trainable=sum(p.numel() for p in params if p.requires_grad),
)
        for tokens, seqs in sizes:
            tracker.reset_peak()
            tracker.phase = "prefill"
            ids = torch.randint(3, vocab, (1, tokens))
            rows = min(seqs, tokens)
            logits = model(input_ids=ids, use_cache=False, logits_to_keep=rows).logits
            tracker.phase = "sampling"
            probs = torch.softmax(logits.float(), dim=-1)  # vLLM's sampler works in fp32
            del ids, logits, probs
            out[(tokens, seqs)] = {"peak": tracker.peak, "breakdown": tracker.breakdown(),
                                   "activation_peak": tracker.peak - weights}
            tracker.phase = "other"
    out["weights"] = weights
    return out


def run(spec: dict) -> dict:
    knobs = spec["knobs"]
    spec = serving_spec(spec)
    limits = workloads.model_limits(spec["model_config"])
    max_len = knobs["max_model_len"] or limits["max_position_embeddings"]
    util = knobs["gpu_util"] or workloads.DEFAULT_UTIL
    coresident = int((knobs["coresident_gib"] or 0) * GiB)
    graphs = 0 if knobs["attn"] == "eager" else workloads.CUDA_GRAPH_BYTES
    gpus = spec["verdict_gpus"]
    sizes = {g: workloads.batch_defaults(g, p) for g, p in gpus.items()}
    if knobs["max_batched_tokens"]:
        sizes = {g: (knobs["max_batched_tokens"], s) for g, (_, s) in sizes.items()}
    prof = profile(spec, sorted(set(sizes.values())))
    kv_token = workloads.kv_bytes_per_token(limits, 2)  # vLLM's cache dtype "auto": the model's bf16
    plans = {}
    for gpu, size in sizes.items():
        p = workloads.plan(gpus[gpu]["memory_bytes"], util, prof["weights"], prof[size]["activation_peak"],
                           kv_token, max_len, coresident=coresident, cuda_graph=graphs)
        plans[gpu] = {**p, "max_num_batched_tokens": size[0], "max_num_seqs": size[1]}
    notes = {g: ("no bf16 on this card: vLLM refuses the model's bf16 here ('Bfloat16 is only supported on GPUs "
                 "with compute capability of at least 8.0 ... --dtype=half'); in float16 the plan's bytes are the same")
             for g, prof_ in gpus.items() if prof_.get("bf16_tflops") is None and knobs["adapter"] != "qlora"}
    top = max(sizes.values()) if sizes else None
    peak = prof[top] if top else {"peak": prof["weights"], "breakdown": {}}
    details = {"workload": "vllm", "vllm": {
        "plans": plans, "gpu_memory_utilization": util, "max_model_len": max_len,
        "coresident_bytes": coresident, "enforce_eager": knobs["attn"] == "eager",
        "kv_bytes_per_token": kv_token, "weights_bytes": prof["weights"],
        "activation_peak_bytes": {f"{t}x{s}": prof[(t, s)]["activation_peak"] for t, s in set(sizes.values())},
        "source": workloads.VLLM_SOURCE,
        "modelled": {"cuda_context_bytes": workloads.CUDA_CONTEXT_BYTES, "non_torch_bytes": workloads.NON_TORCH_BYTES,
                     "cuda_graph_bytes": graphs,
                     "activation_peak": "transformers' modules under fake tensors (unfused MLP): an upper bound"}},
        "simulated": "CUDA caching-allocator rounding (512-byte blocks), CUDA attention kernels",
        "verdict_notes": notes,
        "weights_dtype": "nf4 base + bf16" if knobs["adapter"] == "qlora" else "bfloat16"}
    return {"peak_bytes": peak["peak"], "breakdown_bytes": peak["breakdown"] or None,
            "phase_peak_bytes": None, "step_peak_bytes": None,
            "params_total": prof["params_total"], "params_trainable": prof["params_trainable"],
            "step_s_median": None, "tokens_per_s": None, "host_peak_rss_bytes": train.host_peak_rss(),
            "verdicts": {g: workloads.verdict(p) for g, p in plans.items()},
            "details": details}
