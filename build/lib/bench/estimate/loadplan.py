"""Loading a model in N processes: where each rank's copy of the weights lands, and whether
the load itself fits. Torch-free, analytic (provenance "modelled").

    placements(weights, largest, unit, n, profiles) -> {placement: {per-GPU bytes, host bytes, verdicts}}

A multi-GPU fine-tune can run out of memory before its first step, while it loads. How much
each GPU holds then depends on how the libraries place the weights, not on the step:

- ``full-per-rank``: every rank runs ``from_pretrained`` onto its own GPU and the engine
  partitions afterwards (DeepSpeed ZeRO-3 without ``zero.Init``: transformers only partitions
  on load when ``is_deepspeed_zero3_enabled()`` is true before the model is built). Each GPU
  holds the whole model in its load dtype; each process also reads it through host memory.
- ``zero-init``: DeepSpeed's ``zero.Init`` (transformers' HfDeepSpeedConfig / accelerate's
  ``zero3_init_flag``): each parameter is partitioned as it is created, and loading gathers one
  parameter at a time to copy its values in. Each GPU holds 1/N of the weights plus the largest
  parameter gathered whole.
- ``fsdp-meta``: FSDP with ``cpu_ram_efficient_loading`` (accelerate, TRL, PEFT's FSDP guide):
  rank 0 loads on the host, the others build on the meta device, and ``sync_module_states``
  broadcasts unit by unit while sharding. Each GPU holds 1/N of the weights plus one unit
  (a decoder layer) unsharded; only rank 0 holds the model in host memory.
- ``fsdp-meta-offload``: the same with FSDP's CPU offload (accelerate's parameter offload): each
  unit is broadcast through the GPU and its shards kept in host memory, so a GPU holds one unit
  unsharded; the host holds rank 0's model and every rank's shards.
- ``same-device``: the pitfall of processes that never set their device (``device_map="auto"``
  or ``"cuda"`` under torchrun, no ``LOCAL_RANK`` handling): every rank places its whole copy
  on GPU 0, beside N CUDA contexts.

The per-GPU figure is the weights a GPU holds at the load's peak plus, for ``same-device``,
the other ranks' CUDA contexts; the caller's GPU capacity already leaves one context aside
(bench/estimate/verdicts.py RESERVE_BYTES). The host figure is the checkpoint as stored, once per
process that reads it, plus the shards an offloading engine keeps there. A single process's
own load (no sharding engine) holds one shard file of it at a time (``largest_shard``). Not
modelled: the allocator's fragmentation during the load (each tensor is one block), NCCL's buffers.
"""
from __future__ import annotations

from bench.estimate import verdicts

PROVENANCE = "modelled"
PLACEMENTS = {
    "full-per-rank": "every rank loads the whole model onto its own GPU, partitioned afterwards "
                     "(ZeRO-3 without zero.Init)",
    "zero-init": "DeepSpeed zero.Init: partitioned as created, one parameter gathered at a time to load it",
    "fsdp-meta": "FSDP cpu_ram_efficient_loading: rank 0 loads on the host, the others on meta, "
                 "broadcast and sharded unit by unit",
    "fsdp-meta-offload": "FSDP cpu_ram_efficient_loading with CPU offload: one unit on the GPU at a time, "
                         "the shards in host memory",
    "same-device": "every rank's whole copy on GPU 0 (processes that never set their device)",
}


# The largest shard file of a checkpoint as published: transformers 4.x's
# ``PreTrainedModel.save_pretrained(max_shard_size="5GB")`` default, the layout of the Hub's checkpoints
# (Llama-3.1-70B: 30 safetensors files of at most 5 GB). transformers 5 raised the default to "50GB"
# (huggingface/transformers PR #42734); the Hub's files stay as they were written.
SHARD_BYTES = 5 * 10**9
SHARD_HOW = ("one process loads a sharded checkpoint one shard file at a time: its largest file, "
             "min(checkpoint, 5 GB: save_pretrained's default max_shard_size before transformers 5, the Hub's layout)")


def largest_shard(stored: int) -> int:
    """The host bytes a single process's ``from_pretrained`` holds at once of a checkpoint of
    ``stored`` bytes: its largest shard file, ``min(stored, SHARD_BYTES)``.

    Rule and source: the checkpoint is split into files of at most ``SHARD_BYTES`` (5 GB, the default
    ``max_shard_size`` of transformers 4.x's ``PreTrainedModel.save_pretrained``, which wrote the Hub's
    checkpoints), and transformers 4.x's ``PreTrainedModel._load_pretrained_model`` loads the
    ``resolved_archive_file`` list one shard at a time (``for shard_file in resolved_archive_file:
    state_dict = load_state_dict(shard_file)``, each state dict dropped before the next). transformers 5
    (this project's, 5.23) holds no more than that: its ``_load_pretrained_model`` opens every shard with
    safetensors' ``safe_open`` (memory-mapped, nothing read yet) and ``convert_and_load_state_dict_in_model``
    (transformers/core_model_loading.py) copies the tensors to their device one by one (in the loading
    thread under on-the-fly quantization such as QLoRA's, else on at most ``GLOBAL_WORKERS``, 4, threads);
    the mapped file pages count in RSS as they are read (the H200 run's QLoRA load grew by its whole
    4.9 GB one-file checkpoint) but are clean page cache the kernel reclaims under pressure. Not
    modelled: a single weight larger than a shard (a file of its own); a checkpoint written by
    transformers 5 with its 50 GB default and loaded by transformers 4.x."""
    return min(stored, SHARD_BYTES)


def per_gpu_bytes(placement: str, weights: int, largest: int, unit: int, n: int,
                  stored: int | None = None) -> tuple[int, int]:
    """(bytes on the most loaded GPU at the load's peak, host bytes on the node) for one placement.
    ``stored``: the checkpoint as stored (its dtype, not quantized; default ``weights``): each
    process that reads it holds it in host memory while it loads (the H200 run: a QLoRA load's host
    RSS grew by the whole fp32 checkpoint it read, though the GPU got 4-bit weights)."""
    read = weights if stored is None else stored
    if placement == "full-per-rank":
        return weights, n * read
    if placement == "zero-init":
        return -(-weights // n) + largest, n * read
    if placement == "fsdp-meta":
        return -(-weights // n) + unit, read
    if placement == "fsdp-meta-offload":
        return unit, read + weights
    if placement == "same-device":
        return n * weights + (n - 1) * verdicts.CUDA_CONTEXT_BYTES, n * read
    raise ValueError(f"unknown placement {placement!r}")


def placements(weights: int, largest: int, unit: int, n: int, profiles: dict, stored: int | None = None) -> dict:
    """Every placement's per-GPU bytes, host bytes and {gpu: "fits" | "oom while loading"}."""
    out = {}
    for name, how in PLACEMENTS.items():
        gpu, host = per_gpu_bytes(name, weights, largest, unit, n, stored)
        out[name] = {"how": how, "gpu_bytes": gpu, "host_bytes": host,
                     "verdicts": {g: "fits" if gpu <= verdicts.capacity(p) else "oom while loading"
                                  for g, p in profiles.items()}}
    return out


def reproduces(reported: dict[int, str], by_n: dict[int, dict], gpu: str) -> list[str]:
    """The placements whose verdicts on ``gpu`` match a reported outcome at every process count
    ({n: "oom" | "fits"}), given ``placements`` at each n."""
    def outcome(v: str) -> str:
        return "fits" if v == "fits" else "oom"
    return [p for p in PLACEMENTS
            if all(outcome(by_n[n][p]["verdicts"][gpu]) == want for n, want in reported.items())]
