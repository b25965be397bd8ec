"""What a multi-GPU (ZeRO/FSDP) answer is, in words: one line under its row in ``ft-membench fit``.

Torch-free. A sim record of a sharded cell holds one rank's figures (bench/worker/sim/simulate.py):
the need is one GPU's, the speed model's tokens/s is one rank's, and data parallelism runs the
same step on every rank, so the run trains world size x that. The line also says how the model
loads (bench/loadplan.py, the engine's placement) and what an offload keeps in host memory.
"""
from __future__ import annotations

GiB = 2**30


def rank_note(rec: dict) -> str | None:
    """The per-rank line for a sharded record, or None for a single-GPU one."""
    n = rec.get("world_size") or 1
    dist = (rec.get("knobs") or {}).get("dist")
    if n <= 1 or not dist:
        return None
    details = rec.get("details") or {}
    parts = [f"per rank of {n} ({dist}): need is one GPU's; tokens/s is one rank's, the run's is x {n} "
             f"(data parallel: each rank trains its own batch of {rec.get('batch_size')})"]
    load = details.get("load_phase") or {}
    placed = (load.get("placements") or {}).get(load.get("placement"), {})
    if placed.get("gpu_bytes"):
        parts.append(f"loading ({load['placement']}): {placed['gpu_bytes'] / GiB:.2f} GiB per GPU, "
                     f"{placed['host_bytes'] / GiB:.2f} GiB of host memory (modelled)")
    off = details.get("offloaded_bytes") or {}
    if sum(off.values()):
        parts.append(f"offloaded to host memory: {sum(off.values()) / GiB:.2f} GiB per rank "
                     f"({', '.join(k for k, v in off.items() if v)})")
    return "; ".join(parts)
