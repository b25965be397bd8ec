"""Will it fit? A verdict per GPU profile from the modelled reserved memory. Torch-free.

    from_replay(model, profiles) -> {gpu: "fits" | "tight" | "oom"}        # a replayed trace
    from_estimate(reserved, allocated, profiles) -> {gpu: ...}              # no per-rank trace

What a real process holds on the card:

- reserved memory: the caching allocator's segments, modelled by replaying the step's
  allocation trace (bench/estimate/allocator.py, bench/estimate/replay.py): allocated memory plus what the
  allocator keeps cached (fragmentation), rounded to its segments;
- memory outside the caching allocator (``RESERVE_BYTES``): the CUDA context (driver state and
  the kernels loaded into it, lazily, CUDA >= 11.7) and the kernels loaded as a step first uses them.
  Measured with NVML (torch 2.11, CUDA 13.0) beside the allocator's reserved memory: on an H200 over
  16 training cells of matrix/cuda-h200.yaml (results/reference/cuda-h200), 524 MiB after CUDA init
  and 742-758 MiB at the step's peak; on an H100 over 10 FSDP2 rank cells of matrix/cuda-h100.yaml
  (results/reference/cuda-h100), 834 MiB on every cell. The reserve is the largest measured, rounded
  up to 8 MiB: 840 MiB. (It was 576 MiB before the H200's measurement, a context of 512 MiB and
  64 MiB of workspaces from the literature; then 768 MiB, 66 MiB under what the H100 showed.)
- cuBLAS's workspaces (``blas_workspace_bytes``): inside the caching allocator, so in torch's
  allocated and reserved memory, but no tensor of the step's trace: torch allocates one per
  (cuBLAS handle, stream) at the first GEMM there and never frees it (CublasHandlePool.cpp,
  ``getNewWorkspace``), and a training step runs GEMMs on two threads, each with its own handle:
  the forward's and autograd's backward thread. Its size is torch's default for the GPU's arch
  (``parseChosenWorkspaceSize``): 32 MiB on sm90 (Hopper: H100, H200), 8 MiB + 128 KiB on every
  other arch. Measured: every one of the 32 H100/H200 cells stored holds 64-66 MiB of allocated
  memory beyond any tensor the tracker saw. Counted per GPU beside the trace's replay, as blocks of
  their own (an upper bound on what they add to the reserved peak: on the H200 they were cut from
  cached segments), from the start (a load runs no GEMM: up to that much strict while loading).

The allocator may use ``memory_bytes - RESERVE_BYTES - blas_workspace_bytes`` for the step's
traced allocations (the replay's capacity; ``memory_bytes`` is the CUDA runtime's total,
matrix/gpus.yaml). A multi-GPU rank also holds NCCL's own device
buffers outside the allocator, modelled from NCCL's defaults for the world size and the GPU's
interconnect (bench/estimate/nccl.py, the record's ``details.nccl``): its capacity is that much
smaller (``capacity``'s ``outside``), and the need printed counts them (bench/estimate/measures.py). CUDA unified memory (bitsandbytes' paged optimizer states) is outside the
caching allocator: it is not in the replay's reserved peak, stays resident in what that leaves,
and is paged to host memory beyond it (``paging``): such a step fits, with paging.
"""
from __future__ import annotations

MiB = 2**20
CUDA_CONTEXT_BYTES = 512 * MiB    # vLLM's start-up plan counts these two apart (bench/cells/workloads.py)
BLAS_WORKSPACE_BYTES = 64 * MiB
# a training process's memory outside the caching allocator, the most measured (H100; module docstring)
RESERVE_BYTES = 840 * MiB
CUBLAS_WORKSPACE_SM90 = 4096 * 8 * 1024              # torch's default on sm90 (Hopper)
CUBLAS_WORKSPACE_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8  # every other arch: 8 MiB + 128 KiB
BLAS_THREADS = 2  # a training step's GEMMs run on the forward's thread and on autograd's backward thread
SM90_CLASSES = ("hopper",)  # matrix/gpus.yaml gpu_class of the sm90 cards
BLAS_LABEL = ("modelled: cuBLAS workspaces, torch's default size for the GPU's arch (32 MiB on sm90, 8 MiB + "
              "128 KiB on others) x 2 (the forward's and autograd's backward thread each hold one); in the "
              "allocator's allocated and reserved memory, beside the step's trace")
RULE = (f"capacity = GPU memory - {RESERVE_BYTES // MiB} MiB reserve (memory outside the caching allocator: CUDA "
        "context and kernels; measured 742-758 MiB on an H200, 834 MiB on an H100) - cuBLAS's workspaces (in the "
        "allocator, beside the trace: 2 x 32 MiB on sm90, 2 x 8.125 MiB on other GPUs; details.blas_workspaces), "
        "and on several GPUs "
        "- NCCL's buffers (modelled, details.nccl); the step's allocation "
        "trace is replayed through the CUDA caching-allocator "
        "model (bench/estimate/allocator.py) in its steady state (the last step repeated until a repetition "
        "reserves no new memory, bench/estimate/steady.py; allocator_model.steady_state); fits: the modelled reserved peak <= capacity; tight: it is not, but "
        "the replay under the capacity succeeds by releasing cached segments and retrying (slower, "
        "synchronizing cudaFree); oom: an allocation fails under the capacity")
ESTIMATE_RULE = (f"capacity = GPU memory - {RESERVE_BYTES // MiB} MiB reserve - cuBLAS's workspaces "
                 "(details.blas_workspaces) - NCCL's buffers (modelled, "
                 "details.nccl); reserved is estimated per rank as "
                 "the partitioned allocated peak plus the single-process replay's fragmentation at its peak "
                 "(no per-rank trace is replayed); fits: reserved <= capacity; tight: only the allocated peak "
                 "<= capacity (the allocator would have to release its cache); oom: allocated peak > capacity")


def blas_workspace_bytes(profile: dict, threads: int = BLAS_THREADS) -> int:
    """cuBLAS's workspaces a training process holds on this GPU (module docstring); 0 off a GPU. A
    profile rebuilt from a record gives them as the record holds them (``blas_workspace_bytes``)."""
    if "blas_workspace_bytes" in profile:
        return profile["blas_workspace_bytes"]
    if profile.get("kind", "cuda") != "cuda":
        return 0
    size = CUBLAS_WORKSPACE_SM90 if profile.get("gpu_class") in SM90_CLASSES else CUBLAS_WORKSPACE_DEFAULT
    return threads * size


def blas_details(profiles: dict, threads: int = BLAS_THREADS) -> dict:
    """What a record keeps of them (``details.blas_workspaces``): the rule and the bytes per GPU;
    ``threads`` 1 for a process that runs no backward (generation)."""
    label = BLAS_LABEL if threads == BLAS_THREADS else BLAS_LABEL.replace(
        "x 2 (the forward's and autograd's backward thread each hold one)", "x 1 (no backward: one thread)")
    return {"label": label, "by_gpu": {g: blas_workspace_bytes(p, threads) for g, p in profiles.items()}}


BLAS_SIZES = (0, CUBLAS_WORKSPACE_SM90, CUBLAS_WORKSPACE_DEFAULT,
              BLAS_THREADS * CUBLAS_WORKSPACE_SM90, BLAS_THREADS * CUBLAS_WORKSPACE_DEFAULT)


def capacity(profile: dict, outside: int = 0, reserve: int = RESERVE_BYTES) -> int:
    """Bytes the step's traced allocations may reserve on this GPU: its memory less the reserve and
    cuBLAS's workspaces; ``outside``: more device memory held outside the allocator on this GPU (a
    multi-GPU rank's NCCL buffers, bench/estimate/nccl.py). The one copy of the rule: the verdicts
    and the allocator replay's capped runs (bench/estimate/replay.py ``model``) both read it."""
    return profile["memory_bytes"] - reserve - blas_workspace_bytes(profile) - outside


def from_replay(model: dict, profiles: dict, outside: dict | None = None) -> dict[str, str]:
    """{gpu: verdict} from bench.estimate.replay.model's result (``reserved_peak_bytes``, ``first_oom``,
    replayed under the same ``outside`` bytes per GPU)."""
    out, outside = {}, outside or {}
    for gpu, prof in profiles.items():
        if model["first_oom"].get(gpu) is not None:
            out[gpu] = "oom"
        else:
            out[gpu] = "fits" if model["reserved_peak_bytes"] <= capacity(prof, outside.get(gpu, 0)) else "tight"
    return out


def load_phase(model: dict, profiles: dict, host_rss: int | None) -> dict:
    """The load phase apart from the step (bench.estimate.replay's ``load_*`` figures): its allocated and
    modelled reserved peaks, what the allocator holds when the step starts, the host's peak RSS
    while loading, and per GPU "fits" or "oom while loading" (the first failing allocation under
    the GPU's capacity comes before the step's first event)."""
    verdicts = {}
    for gpu in profiles:
        oom = model["first_oom"].get(gpu)
        verdicts[gpu] = "oom while loading" if oom is not None and oom.get("step", 0) < 0 else "fits"
    return {"allocated_peak_bytes": model.get("load_allocated_peak_bytes"),
            "modelled_reserved_peak_bytes": model.get("load_reserved_peak_bytes"),
            "reserved_at_step_start_bytes": model.get("load_end_reserved_bytes"),
            "allocated_at_step_start_bytes": model.get("load_end_allocated_bytes"),
            "host_peak_rss_bytes": host_rss, "verdicts": verdicts,
            "how": "the allocation trace's events before the training step (the model's build or load: "
                   "from_pretrained places each weight on the device one tensor at a time, and quantizes a "
                   "bitsandbytes 4-bit weight on arrival), replayed through the caching-allocator model; "
                   "the step's replay starts from the state they leave"}


def paging(model: dict, profiles: dict) -> dict[str, dict]:
    """{gpu: residency} of CUDA unified memory (bitsandbytes' paged optimizer states,
    ``unified_peak_bytes`` of bench.estimate.replay) on every GPU where the step fits the allocator: it
    stays resident in what the allocator's reserved peak leaves of the capacity, and the driver
    pages the rest to host memory (``paged_out_bytes``). A step that fits with some of it paged
    out fits, with paging; the speed model charges that traffic (bench/estimate/speedmodel.py)."""
    unified = model.get("unified_peak_bytes") or 0
    out = {}
    for gpu, prof in profiles.items():
        if not unified or model["first_oom"].get(gpu) is not None:
            continue
        room = max(0, capacity(prof) - model["reserved_peak_bytes"])
        out[gpu] = {"unified_bytes": unified, "resident_bytes": min(unified, room),
                    "paged_out_bytes": max(0, unified - room)}
    return out


def paging_notes(pages: dict) -> dict[str, str]:
    """{gpu: note} for the GPUs where part of the unified memory is paged to host memory."""
    return {gpu: (f"fits, with paging: {p['paged_out_bytes'] / 2**30:.2f} of {p['unified_bytes'] / 2**30:.2f} GiB "
                  "of paged optimizer state (CUDA unified memory, outside the caching allocator) is paged to "
                  "host memory; each step moves it over the host link (speed model part 'paging')")
            for gpu, p in pages.items() if p["paged_out_bytes"] > 0}


def from_estimate(reserved_bytes: int, allocated_bytes: int, profiles: dict,
                  outside: dict | None = None) -> dict[str, str]:
    """{gpu: verdict} where no trace of the GPU's own step exists (ESTIMATE_RULE)."""
    out, outside = {}, outside or {}
    for gpu, prof in profiles.items():
        cap = capacity(prof, outside.get(gpu, 0))
        out[gpu] = "fits" if reserved_bytes <= cap else "tight" if allocated_bytes <= cap else "oom"
    return out


def after_load(step: dict[str, str], load: dict[str, str]) -> dict[str, str]:
    """{gpu: verdict} of a step whose load is judged apart (a sharded cell's load plan,
    bench/estimate/loadplan.py): a GPU the load does not fit ("oom while loading") is "oom",
    whatever the step's verdict."""
    return {gpu: "oom" if load.get(gpu, "fits") != "fits" else v for gpu, v in step.items()}


def notes(knobs: dict, profiles: dict) -> dict[str, str]:
    """Caveats of one simulation for particular GPUs: {gpu: note}; empty when there are none."""
    low_precision = knobs["precision"] in ("bf16", "amp-bf16") or knobs["adapter"] == "qlora"
    out = {}
    for gpu, prof in profiles.items():
        if low_precision and prof.get("bf16_tflops") is None:
            out[gpu] = ("no bf16 support: bf16 attention falls back to the math kernel (B x H x L x L "
                        "scores), which the simulation (sm80+ kernels) does not include; verdict optimistic")
    return out
