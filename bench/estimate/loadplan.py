"""Loading a model in N processes: where each rank's copy of the weights lands, and whether
the load itself fits. Torch-free, analytic (provenance "modelled").

    placements(weights, largest, unit, n, profiles) -> {placement: {per-GPU bytes, host bytes, verdicts}}

A multi-GPU fine-tune can run out of memory before its first step, while it loads. How much
each GPU holds then depends on how the libraries place the weights, not on the step:

- ``full-per-rank``: every rank runs ``from_pretrained`` onto its own GPU and the engine
  partitions afterwards. DeepSpeed ZeRO-1/2 keep the whole model on every rank anyway; under
  ZeRO-3 a quantized model (QLoRA) is built so: transformers 5.23 builds a quantized model on the
  meta device, never under ``zero.Init`` (``get_init_context``: zero.Init only "if not
  is_quantized"), and bitsandbytes' quantizer sets ``device_map={"": torch.cuda.current_device()}``
  when none is given (``update_device_map``), so each rank loads the whole 4-bit model onto its
  GPU; ``deepspeed.initialize`` then partitions it (``_convert_to_zero_parameters``) and empties
  the cache (ZeRO-3's ``defragment``). Each GPU holds the whole model as loaded; each process reads
  the checkpoint through host memory one shard file at a time (``largest_shard``).
- ``zero-init``: DeepSpeed's ``zero.Init`` (transformers' HfDeepSpeedConfig / accelerate's
  ``zero3_init_flag``), a model that is not quantized: each parameter is partitioned as it is
  created, and loading gathers one module's parameters at a time to copy rank 0's values in. Each
  GPU holds 1/N of the weights plus the largest parameter gathered whole. Only rank 0 reads the
  checkpoint, whole: transformers 5.23's ``_load_pretrained_model`` merges every file into one
  state dict with ``map_location = "cpu" if torch.distributed.get_rank() == 0 else "meta"``.
- ``zero-init-offload``: the same under ZeRO-3's parameter offload (``offload_param``): ``zero.Init``
  creates each partition on the host (its ``remote_device``), so a GPU holds the parameter being
  loaded; the host holds rank 0's state dict and every rank's partitions.
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

The per-GPU figure is the weights a GPU holds at the load's peak, plus what no engine shards
(``replicated``: bitsandbytes' quantization state, whole on every rank: FSDP2 and ZeRO-3 shard
registered parameters only), plus, for ``same-device``, the other ranks' CUDA contexts; the
caller's GPU capacity already leaves one context aside (bench/estimate/verdicts.py RESERVE_BYTES).
The host figure is what the processes that read the checkpoint hold of it at once (rank 0's whole
state dict where one rank reads it all; a shard file a process where every rank loads its own
copy), plus the shards an offloading engine keeps there. Not modelled: the allocator's
fragmentation during the load (each tensor is one block), NCCL's buffers, the page cache that
processes memory-mapping the same files share.
"""
from __future__ import annotations

from bench.estimate import verdicts

PROVENANCE = "modelled"
PLACEMENTS = {
    "full-per-rank": "every rank loads the whole model onto its own GPU, partitioned afterwards "
                     "(ZeRO-1/2; ZeRO-3 of a quantized model, which transformers never builds under zero.Init)",
    "zero-init": "DeepSpeed zero.Init: partitioned as created, one parameter gathered at a time to load it, "
                 "rank 0 alone reading the checkpoint",
    "zero-init-offload": "DeepSpeed zero.Init with parameter offload: partitions created in host memory, "
                         "one parameter on the GPU at a time",
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
                  stored: int | None = None, replicated: int = 0) -> tuple[int, int]:
    """(bytes on the most loaded GPU at the load's peak, host bytes on the node) for one placement.
    ``stored``: the checkpoint as stored (its dtype, not quantized; default ``weights``): rank 0 holds
    it whole where it alone reads it (zero.Init, FSDP's CPU-RAM-efficient load); a process that loads
    its own copy holds its largest shard file at once (``largest_shard``; the H200 run: a QLoRA load's
    host RSS grew by the whole fp32 one-file checkpoint it read, though the GPU got 4-bit weights).
    ``replicated``: bytes every GPU holds whole whatever the placement (bitsandbytes' quantization state)."""
    read = weights if stored is None else stored
    own = n * largest_shard(read)
    if placement == "full-per-rank":
        return weights + replicated, own
    if placement == "zero-init":
        return -(-weights // n) + largest + replicated, read
    if placement == "zero-init-offload":
        return largest + replicated, read + weights
    if placement == "fsdp-meta":
        return -(-weights // n) + unit + replicated, read
    if placement == "fsdp-meta-offload":
        return unit + replicated, read + weights
    if placement == "same-device":
        return n * (weights + replicated) + (n - 1) * verdicts.CUDA_CONTEXT_BYTES, own
    raise ValueError(f"unknown placement {placement!r}")


def placements(weights: int, largest: int, unit: int, n: int, profiles: dict, stored: int | None = None,
               replicated: int = 0) -> dict:
    """Every placement's per-GPU bytes, host bytes and {gpu: "fits" | "oom while loading"}."""
    out = {}
    for name, how in PLACEMENTS.items():
        gpu, host = per_gpu_bytes(name, weights, largest, unit, n, stored, replicated)
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
