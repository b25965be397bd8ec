"""Will it fit? A verdict per GPU profile from one simulated peak. Torch-free.

    verdicts(peak_bytes, {gpu: profile}) -> {gpu: "fits" | "tight" | "oom"}

A simulated peak counts what the training step allocates through PyTorch's caching allocator
(bench/worker/cuda_alloc.py). A real process needs more of the card than that:

- CUDA context: driver state and the kernels loaded into it. With lazy module loading
  (CUDA >= 11.7, PyTorch's default) about 300-400 MB per process (PyTorch maintainers in
  pytorch/pytorch#107667 and #109888); it grows as more kernels (cuBLAS, cuDNN, flash) load,
  so 512 MiB is reserved.
- cuBLAS and cuBLASLt workspaces: 32 MiB each on Hopper, 4 MiB elsewhere (cuBLAS docs,
  cublasSetWorkspace; PyTorch's defaults since pytorch/pytorch#89027 and #120925), taken from
  the caching allocator per handle and stream: 64 MiB reserved.
- The caching allocator's fragmentation: reserved minus allocated, typically a few percent
  to 10-15% of the peak in training; the last 10% of the card is left for it.

``memory_bytes`` of a profile is the CUDA runtime's total (matrix/gpus.yaml), which the
context also lives in. Communication buffers (NCCL) of a multi-GPU run are not included.
"""
from __future__ import annotations

MiB = 2**20
CUDA_CONTEXT_BYTES = 512 * MiB
BLAS_WORKSPACE_BYTES = 64 * MiB
RESERVE_BYTES = CUDA_CONTEXT_BYTES + BLAS_WORKSPACE_BYTES
FITS_FRACTION = 0.90
RULE = (f"need = simulated peak + {RESERVE_BYTES // MiB} MiB reserve (CUDA context 512 MiB, "
        f"cuBLAS/cuBLASLt workspaces 64 MiB); fits: need <= {FITS_FRACTION:.0%} of the GPU's memory; "
        f"tight: need <= 100% (the last {1 - FITS_FRACTION:.0%} is what allocator fragmentation "
        f"usually takes); oom: need > 100%")


def verdict(peak_bytes: int, memory_bytes: int) -> str:
    need = peak_bytes + RESERVE_BYTES
    if need > memory_bytes:
        return "oom"
    return "tight" if need > FITS_FRACTION * memory_bytes else "fits"


def verdicts(peak_bytes: int, profiles: dict) -> dict[str, str]:
    """{gpu: verdict} for every profile (matrix/gpus.yaml entries)."""
    return {gpu: verdict(peak_bytes, prof["memory_bytes"]) for gpu, prof in profiles.items()}


def notes(knobs: dict, profiles: dict) -> dict[str, str]:
    """Caveats of one simulation for particular GPUs: {gpu: note}; empty when there are none."""
    low_precision = knobs["precision"] in ("bf16", "amp-bf16") or knobs["adapter"] == "qlora"
    out = {}
    for gpu, prof in profiles.items():
        if low_precision and prof.get("bf16_tflops") is None:
            out[gpu] = ("no bf16 support: bf16 attention falls back to the math kernel (B x H x L x L "
                        "scores), which the simulation (sm80+ kernels) does not include; verdict optimistic")
    return out
