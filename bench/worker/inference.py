"""The workloads beyond the training step, per mode: what bench/worker/main.py's ``run`` calls
for a cell whose ``workload`` knob is ``generate`` or ``vllm``.

    generate: cpu / cuda -> bench/worker/generate.py on the device (transformers' generate, real);
              sim -> the same steps under fake tensors (bench/worker/sim/fakestep.FakeRun)
    vllm:     sim -> bench/worker/sim/vllm_plan.py (vLLM's start-up plan per GPU profile);
              cuda -> bench/worker/vllm_real.py (vLLM itself, optional extra [vllm])
"""
from __future__ import annotations

from bench.estimate import verdicts
from bench.worker.outcome import Skip


def run(spec: dict) -> dict:
    workload, mode = spec["knobs"]["workload"], spec["mode"]
    if workload == "generate":
        return generate(spec, mode)
    if mode == "sim":
        from bench.worker.sim import vllm_plan
        return vllm_plan.run(spec)
    from bench.worker import vllm_real
    return vllm_real.run(spec)


def generate(spec: dict, mode: str) -> dict:
    from bench.worker import cuda_alloc
    from bench.worker.generate import InferenceTracker
    from bench.worker.generate import generate as gen
    if mode == "cpu":
        return gen(spec, "cpu", InferenceTracker(budget_bytes=spec["gpu_memory_bytes"]))
    if mode == "cuda":  # the tracker splits the peak; torch's own peak counter is kept beside it
        import torch
        if not torch.cuda.is_available():
            raise Skip("cuda mode needs a CUDA device; none is visible")
        torch.cuda.reset_peak_memory_stats()
        out = gen(spec, "cuda", InferenceTracker(rounding=cuda_alloc.round_size))
        out["details"]["cuda_allocated_peak_bytes"] = torch.cuda.max_memory_allocated()
        out["reserved_peak_bytes"] = torch.cuda.max_memory_reserved()
        return out
    from bench.worker import train
    from bench.worker.sim import fakestep
    tracker = InferenceTracker(rounding=cuda_alloc.round_size)
    with fakestep.FakeRun(spec, tracker) as fake:
        out = gen(spec, "cpu", tracker, sim=fake)
    out.update(step_s_median=None, tokens_per_s=None, host_peak_rss_bytes=train.host_peak_rss())
    for key in ("prefill_s", "decode_s", "generate_s", "decode_tokens_per_s", "timing_load"):
        out["details"].pop(key, None)  # fake time
    out["details"]["simulated"] = ("CUDA caching-allocator rounding (512-byte blocks), CUDA attention kernels "
                                   "(flash / memory-efficient footprint)")
    from bench.worker import alloctrace  # reserved memory: the trace replayed through the allocator model
    # generation runs no backward: one thread's cuBLAS workspace per card, in the capacities and the record alike
    gpus = {g: dict(p, blas_workspace_bytes=verdicts.blas_workspace_bytes(p, threads=1))
            for g, p in spec["verdict_gpus"].items()}
    model = alloctrace.attach(out, tracker, spec, gpus)
    out["verdicts"] = verdicts.from_replay(model, gpus)
    out["details"].update(verdict_rule=verdicts.RULE, verdict_reserve_bytes=verdicts.RESERVE_BYTES,
                          blas_workspaces=verdicts.blas_details(spec["verdict_gpus"], threads=1),
                          verdict_notes=verdicts.notes(spec["knobs"], spec["verdict_gpus"]))
    return out
