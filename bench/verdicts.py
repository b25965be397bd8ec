"""Will it fit? A verdict per GPU profile from the modelled reserved memory. Torch-free.

    from_replay(model, profiles) -> {gpu: "fits" | "tight" | "oom"}        # a replayed trace
    from_estimate(reserved, allocated, profiles) -> {gpu: ...}              # no per-rank trace

What a real process holds on the card:

- reserved memory: the caching allocator's segments, modelled by replaying the step's
  allocation trace (bench/allocator.py, bench/replay.py): allocated memory plus what the
  allocator keeps cached (fragmentation), rounded to its segments;
- CUDA context: driver state and the kernels loaded into it. With lazy module loading
  (CUDA >= 11.7, PyTorch's default) about 300-400 MB per process (PyTorch maintainers in
  pytorch/pytorch#107667 and #109888); it grows as more kernels (cuBLAS, cuDNN, flash) load,
  so 512 MiB is reserved;
- cuBLAS and cuBLASLt workspaces: 32 MiB each on Hopper, 4 MiB elsewhere (cuBLAS docs,
  cublasSetWorkspace; PyTorch's defaults since pytorch/pytorch#89027 and #120925): 64 MiB.

The allocator may use ``memory_bytes - RESERVE_BYTES`` (the replay's capacity; ``memory_bytes``
is the CUDA runtime's total, matrix/gpus.yaml). Communication buffers (NCCL) of a multi-GPU
run are not included.
"""
from __future__ import annotations

MiB = 2**20
CUDA_CONTEXT_BYTES = 512 * MiB
BLAS_WORKSPACE_BYTES = 64 * MiB
RESERVE_BYTES = CUDA_CONTEXT_BYTES + BLAS_WORKSPACE_BYTES
RULE = (f"capacity = GPU memory - {RESERVE_BYTES // MiB} MiB reserve (CUDA context 512 MiB, cuBLAS/cuBLASLt "
        "workspaces 64 MiB); the step's allocation trace is replayed through the CUDA caching-allocator "
        "model (bench/allocator.py); fits: the modelled reserved peak <= capacity; tight: it is not, but "
        "the replay under the capacity succeeds by releasing cached segments and retrying (slower, "
        "synchronizing cudaFree); oom: an allocation fails under the capacity")
ESTIMATE_RULE = (f"capacity = GPU memory - {RESERVE_BYTES // MiB} MiB reserve; reserved is estimated per rank as "
                 "the partitioned allocated peak plus the single-process replay's fragmentation at its peak "
                 "(no per-rank trace is replayed); fits: reserved <= capacity; tight: only the allocated peak "
                 "<= capacity (the allocator would have to release its cache); oom: allocated peak > capacity")


def capacity(profile: dict) -> int:
    """Bytes the caching allocator may reserve on this GPU."""
    return profile["memory_bytes"] - RESERVE_BYTES


def from_replay(model: dict, profiles: dict) -> dict[str, str]:
    """{gpu: verdict} from bench.replay.model's result (``reserved_peak_bytes``, ``first_oom``)."""
    out = {}
    for gpu, prof in profiles.items():
        if model["first_oom"].get(gpu) is not None:
            out[gpu] = "oom"
        else:
            out[gpu] = "fits" if model["reserved_peak_bytes"] <= capacity(prof) else "tight"
    return out


def from_estimate(reserved_bytes: int, allocated_bytes: int, profiles: dict) -> dict[str, str]:
    """{gpu: verdict} where no trace of the GPU's own step exists (ESTIMATE_RULE)."""
    out = {}
    for gpu, prof in profiles.items():
        cap = capacity(prof)
        out[gpu] = "fits" if reserved_bytes <= cap else "tight" if allocated_bytes <= cap else "oom"
    return out


def notes(knobs: dict, profiles: dict) -> dict[str, str]:
    """Caveats of one simulation for particular GPUs: {gpu: note}; empty when there are none."""
    low_precision = knobs["precision"] in ("bf16", "amp-bf16") or knobs["adapter"] == "qlora"
    out = {}
    for gpu, prof in profiles.items():
        if low_precision and prof.get("bf16_tflops") is None:
            out[gpu] = ("no bf16 support: bf16 attention falls back to the math kernel (B x H x L x L "
                        "scores), which the simulation (sm80+ kernels) does not include; verdict optimistic")
    return out
