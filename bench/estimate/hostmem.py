"""The host memory a run needs on its node, from a record's own fields (provenance "modelled").
Torch-free.

    need(rec, gpu) -> {"bytes", "parts": {part: bytes}, "phase": "load" | "step", "ranks", "how"}
    judge(need_bytes, host_bytes) -> "fits" | "oom"
    parse_bytes("128GB") -> 128 * 10**9 ("GiB" for 2**30)

All ranks of a cell are taken to share one node (the matrix's world sizes are 1-8 GPUs). Parts:

- ``runtime``: each process's own footprint (the interpreter, torch, the CUDA libraries,
  transformers): ``RUNTIME_BYTES`` a rank, the largest host peak RSS of the non-QLoRA cells of
  the H200 run (results/reference/cuda-h200: 1.47-1.71 GiB);
- ``load``: what the load holds on the host at its peak. For a sharded cell, its engine's placement
  (bench/estimate/loadplan.py ``host_bytes``): the checkpoint as stored (unquantized, in its config's
  dtype) whole where one rank reads it all (rank 0 under FSDP's CPU-RAM-efficient load and under
  DeepSpeed's zero.Init), one shard file a rank where every rank loads its own copy (ZeRO-1/2, QLoRA
  under ZeRO-3), and the shards an offloading engine keeps there. For a single process, the largest
  shard file of that checkpoint (``details.load_phase.largest_shard_bytes``, loadplan.py
  ``largest_shard``: min(checkpoint, 5 GB), save_pretrained's 5 GB shards as on the Hub, loaded one
  shard file at a time by transformers 4.x and memory-mapped and copied tensor by tensor by
  transformers 5); a record made before that field counts its whole ``checkpoint_bytes``. Measured on
  the H200 (results/reference/cuda-h200): a QLoRA load's host RSS grew by the whole fp32 checkpoint it
  read, one file under 5 GB (Llama-3.2-1B: 5.64 GB at load against about 1.1 GB for a model built on
  the GPU), though the GPU got 4-bit weights;
- ``offloaded``: what each rank keeps in host memory during the step (DeepSpeed and FSDP offload:
  parameter shards, gradients, optimizer states, ``details.offloaded_bytes``; pinned where the
  engine pins them, so not swappable), times the ranks;
- ``paged``: bitsandbytes' paged optimizer state the driver pages out to the host on this GPU
  (``details.paging``), times the ranks.

The need is the runtime plus the larger of the load and the step (offloaded + paged): the load's
host copies are freed before the first step. Not included: the data loader and its workers, the
operating system, the page cache of a memory-mapped checkpoint beyond the shard counted (clean
pages the kernel reclaims under pressure).
"""
from __future__ import annotations

import re

RUNTIME_BYTES = int(1.75 * 2**30)
HOW = ("modelled: per node, all ranks on one: each process's runtime (1.75 GiB, the H200 run's host peak RSS), "
       "plus the larger of the load's host bytes and the step's offloaded and paged-out bytes. The load: for a "
       "sharding engine, the checkpoint as stored, whole where one rank reads it all (FSDP, zero.Init), a shard "
       "file a rank where each rank loads its own copy, and the shards an offloading engine keeps "
       "(bench/estimate/loadplan.py); for a single process, its largest shard file, "
       "min(checkpoint, 5 GB: save_pretrained's shards, loaded one at a time). The data loader not included")
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def need(rec: dict, gpu: str) -> dict | None:
    """The record's host need on one node (see the module docstring); None for a record without
    the figures (a failed cell, a cpu run)."""
    details = rec.get("details") or {}
    if rec.get("status") != "ok" or rec.get("mode") != "sim":
        return None
    ranks = rec.get("world_size") or 1
    load = details.get("load_phase") or {}
    placement = (load.get("placements") or {}).get(load.get("placement")) or {"host_bytes": one_process_load(load)}
    offloaded = sum(v for v in (details.get("offloaded_bytes") or {}).values() if isinstance(v, int)) * ranks
    paged = int(((details.get("paging") or {}).get(gpu) or {}).get("paged_out_bytes") or 0) * ranks
    parts = {"runtime": RUNTIME_BYTES * ranks, "load": int(placement.get("host_bytes") or 0),
             "offloaded": offloaded, "paged": paged}
    step = offloaded + paged
    return {"bytes": parts["runtime"] + max(parts["load"], step), "parts": parts,
            "phase": "load" if parts["load"] > step else "step", "ranks": ranks, "how": HOW}


def one_process_load(load: dict) -> int | None:
    """The host bytes a single process's load holds (``details.load_phase`` of a record without a
    sharding engine): its largest shard file; the whole checkpoint for a record made before
    ``largest_shard_bytes`` was recorded."""
    shard = load.get("largest_shard_bytes")
    return shard if shard is not None else load.get("checkpoint_bytes")


def judge(need_bytes: int, host_bytes: int | None) -> str | None:
    """fits | oom against the host memory given; None when none was given (shown, not judged)."""
    if host_bytes is None:
        return None
    return "fits" if need_bytes <= host_bytes else "oom"


def parse_bytes(text: str) -> int:
    """'128GB' (10**9), '128GiB' or '128G' (2**30), '512MB', or a plain byte count; ValueError else."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text or "")
    unit = m.group(2).upper() if m else None
    if m is None or unit not in UNITS:
        raise ValueError(f"{text!r} is not a memory size (e.g. 128GB, 96GiB, 64G)")
    value = float(m.group(1)) * UNITS[unit]
    if not 0 < value < 2**60:
        raise ValueError(f"{text!r}: a host memory size is above 0 and below 1 EiB")
    return int(value)
