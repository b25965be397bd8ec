"""The need an answer states for a record: what the card must hold for the run, read off the record's
own fields when the answer is given (the CLI's rows and hints, the report's need, answers-moved).
Torch-free.

    need_bytes(rec, gpu) -> (bytes, lower_bound)

The step's need (bench/estimate/measures.py ``need_bytes``: the modelled reserved peak plus the CUDA
reserve, cuBLAS's workspaces and a rank's NCCL buffers), or, where a sharded cell's model load holds
more on a GPU than that (``details.load_phase``, its engine's placement, bench/estimate/loadplan.py:
QLoRA under ZeRO-3 loads the whole 4-bit model on every GPU before DeepSpeed partitions it), the
load's bytes plus the CUDA reserve: the figure its "oom while loading" verdict sets against the card.
Without it a 70B QLoRA + ZeRO-3 rank on an RTX 4090 read "oom, need 23.50 GiB" on a 23.99 GiB card.

Nothing here is stored in a record or a search, so it is outside the engine digest
(bench/cells/inputs.py): a change to it restates the answers without making the stored records stale.
"""
from __future__ import annotations

from bench.estimate import measures
from bench.search import shapes


def load_need_bytes(rec) -> float:
    """What one GPU holds while a sharded cell's model loads, as its engine places it, plus the verdict's
    reserve (the load verdict's capacity is the card less that reserve); 0 without a load plan."""
    details = measures._details(rec)
    held = shapes.load_bytes({"details": details})   # the engine's placement, as the fits search judges it
    if not held:
        return 0.0
    reserve = details.get("verdict_reserve_bytes")
    return float(held) + (float(reserve) if isinstance(reserve, (int, float)) else 0.0)


def need_bytes(rec, gpu: str | None = None) -> tuple[float | None, bool]:
    """(the larger of the step's need and the load's, whether the step's is only a lower bound)."""
    need, lower = measures.need_bytes(rec, gpu)
    if need is None:
        return None, False
    return max(need, load_need_bytes(rec)), lower
