"""What ``ft-membench fit`` and the report both state about a simulated cell, defined once.

- ``need_bytes``: what the cell asks of the card. The modelled reserved peak of one step (the
  caching-allocator replay) plus the verdict's reserve (``details.verdict_reserve_bytes``: the
  CUDA context and kernels) and, on a named GPU, cuBLAS's workspaces there
  (``details.blas_workspaces``), the figure the verdict sets against the card's whole memory.
  Without a modelled reserved peak, the allocated peak plus the reserve, a lower bound.
- ``comparable_step``: the speed model's estimate for a GPU where its step trains the cell's
  whole batch x sequence length of tokens, else None and why. A padded batch of short samples
  (padding-growing) models a step of fewer tokens: its seconds per step and tokens per second
  are those of a shorter sequence, not a faster recipe for the same data, so it is not ranked
  against full-length steps.

Both take a record dict or a report table row (``details`` as a dict or as its JSON text).
Torch-free.
"""
from __future__ import annotations

import json
import math

TOKENS_TOLERANCE = 0.01   # the speed model's tokens per step may differ from batch x seq by rounding only


def _value(row, key):
    try:
        v = row[key] if key in row else None
    except (KeyError, TypeError):
        return None
    if v is None or v == "" or (isinstance(v, float) and math.isnan(v)) or str(v) == "<NA>":
        return None
    return v


def _details(row) -> dict:
    doc = _value(row, "details")
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError:
            return {}
    return doc if isinstance(doc, dict) else {}


def need_bytes(row, gpu: str | None = None) -> tuple[float | None, bool]:
    """(modelled reserved peak + verdict reserve, whether that is only a lower bound), or (None, False);
    with ``gpu``, cuBLAS's workspaces and a multi-GPU rank's NCCL buffers on that GPU too
    (``details.blas_workspaces``, ``details.nccl``: ``beside_bytes``)."""
    details = _details(row)
    reserve = details.get("verdict_reserve_bytes")
    reserve = float(reserve) if isinstance(reserve, (int, float)) else 0.0
    if gpu is not None:
        reserve += beside_bytes(details, gpu)
    modelled = _value(row, "modelled_reserved_peak_bytes")
    if modelled is not None:
        return float(modelled) + reserve, False
    peak = _value(row, "peak_bytes")
    if peak is not None:
        return float(peak) + reserve, True
    return None, False


def comparable_step(row, gpu: str) -> tuple[dict | None, str]:
    """(the speed model's estimate on ``gpu`` if its step trains batch x seq_len tokens, else
    None; why not, '' when it is comparable or there is no estimate at all)."""
    model = _details(row).get("speed_model")
    est = model.get(gpu) if isinstance(model, dict) else None
    if not isinstance(est, dict) or not isinstance(est.get("step_s"), (int, float)) or est["step_s"] <= 0:
        return None, ""
    rate, batch, seq = est.get("tokens_per_s"), _value(row, "batch_size"), _value(row, "seq_len")
    if not isinstance(rate, (int, float)) or batch is None or seq is None:
        return est, ""
    tokens, full = rate * est["step_s"], int(batch) * int(seq)
    if abs(tokens - full) > TOKENS_TOLERANCE * full:
        return None, f"its modelled step trains {tokens:.0f} of {full} tokens (batch x sequence)"
    return est, ""


def nccl_bytes(details: dict, gpu: str) -> int:
    """A multi-GPU rank's NCCL buffers on ``gpu`` as its record holds them (0 where none)."""
    from bench.estimate import nccl
    try:
        return nccl.recorded(details).get(gpu, 0)
    except (TypeError, ValueError, KeyError, AttributeError):
        return 0


def blas_bytes(details: dict, gpu: str) -> int:
    """cuBLAS's workspaces on ``gpu`` as the record holds them (bench/estimate/verdicts.py; 0 where none)."""
    got = ((details.get("blas_workspaces") or {}).get("by_gpu") or {}).get(gpu, 0)
    return int(got) if isinstance(got, (int, float)) else 0


def beside_bytes(details: dict, gpu: str) -> int:
    """What the card holds for the cell on ``gpu`` beside the replay and the reserve: cuBLAS's workspaces
    and a multi-GPU rank's NCCL buffers."""
    return blas_bytes(details, gpu) + nccl_bytes(details, gpu)
