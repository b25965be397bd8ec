"""The measure rule of the scoreboard (bench/corpus/scoreboard.py): which simulated figure of a record a
published row's ``measure`` is compared with. Torch-free.

    simulated_figure(rec, measure, gpu) -> (bytes, how)

- allocated, active, not-stated: the allocated peak without bitsandbytes' paged optimizer state (CUDA
  unified memory, outside torch's allocator), plus cuBLAS's workspaces on the row's GPU;
- reserved: the modelled reserved peak plus cuBLAS's workspaces;
- nvidia-smi: the modelled reserved peak + the verdicts' reserve + cuBLAS's workspaces + the paged state
  resident on the row's GPU + a rank's NCCL buffers.

Each is a peak over the run, the model's load included: a sharded record's figure is the larger of its
step's (``step_figure``) and what one GPU holds while the model loads as its engine places it
(``details.load_phase``, bench/estimate/loadplan.py; plus the reserve for nvidia-smi).
"""
from __future__ import annotations

from bench.estimate import verdicts
from bench.search import shapes

GIB = 2**30

COMPARED_AS = {
    "allocated": "allocated peak without paged optimizer state",
    "active": "allocated peak without paged optimizer state",
    "not-stated": "measure not stated: compared as allocated (peak without paged optimizer state)",
    "reserved": "modelled reserved peak",
    "nvidia-smi": "modelled reserved peak + CUDA context/BLAS reserve + resident paged state (+ NCCL buffers "
                  "on several GPUs)",
}


def simulated_figure(rec: dict, measure: str, gpu: str | None) -> tuple[int | None, str]:
    """(bytes, how) of the record's figure that a published ``measure`` is compared with: the step's
    (``step_figure``), or the load's per-GPU bytes where a sharded record's load holds more."""
    step, how = step_figure(rec, measure, gpu)
    load = (rec.get("details") or {}).get("load_phase") or {}
    gpu_bytes = shapes.load_bytes(rec)   # the engine's placement, as the fits search judges it
    if step is None or not gpu_bytes:
        return step, how
    held = gpu_bytes + (verdicts.RESERVE_BYTES if measure == "nvidia-smi" else 0)
    if held <= step:
        return step, how
    return held, (f"the model's load, larger than the step: {load['placement']} holds "
                  f"{gpu_bytes / GIB:.2f} GiB a GPU (details.load_phase)"
                  + (" + CUDA context/BLAS reserve" if measure == "nvidia-smi" else ""))


def step_figure(rec: dict, measure: str, gpu: str | None) -> tuple[int | None, str]:
    """(bytes, how) of the record's training-step figure that a published ``measure`` is compared with."""
    details = rec.get("details") or {}
    if measure in ("allocated", "active", "not-stated"):
        peak = rec.get("peak_bytes")
        if peak is None:
            return None, "the record has no allocated peak"
        paged = details.get("paged_state_bytes")
        if paged is None:
            paged = (rec.get("allocator_model") or {}).get("unified_peak_bytes") or 0
        return int(peak) - int(paged) + _blas(details, gpu), COMPARED_AS[measure]
    reserved = rec.get("modelled_reserved_peak_bytes")
    if reserved is None:
        return None, "the record has no modelled reserved peak"
    if measure == "reserved":
        return int(reserved) + _blas(details, gpu), COMPARED_AS[measure]
    if measure == "nvidia-smi":
        resident = ((details.get("paging") or {}).get(gpu) or {}).get("resident_bytes", 0)
        from bench.estimate.measures import beside_bytes  # cuBLAS's workspaces; a rank's NCCL buffers
        return int(reserved) + verdicts.RESERVE_BYTES + int(resident) + beside_bytes(details, gpu), COMPARED_AS[measure]
    raise ValueError(f"unknown measure {measure!r}")


def _blas(details: dict, gpu: str | None) -> int:
    """cuBLAS's workspaces on the row's GPU: torch's allocated and reserved memory hold them, no trace does."""
    from bench.estimate.measures import blas_bytes
    return blas_bytes(details, gpu) if gpu else 0
