"""GPU memory in cuda mode, beside torch's own statistics: the cap that makes a bigger card
behave like the cell's GPU profile, the CUDA context's baseline, and an NVML sampler.

Used by bench/worker/main.py's ``run_cuda``. What needs no GPU is plain Python and is tested on
CPU: ``memory_fraction``, ``summarize`` and ``Sampler`` (with any reader function).
NVML comes from nvidia-ml-py (``import pynvml``, the ``[gpu]`` extra); without it, or
without a driver, the NVML numbers are None and ``nvml_note`` says why.

- cap: ``torch.cuda.set_per_process_memory_fraction(f)`` limits the caching allocator to
  ``f * total_memory`` of the physical card. On the profile's card the allocator could use
  its total minus the CUDA context (the context lives outside the allocator on both), so
  ``f = (profile - context) / physical``; out-of-memory then happens where it would there.
- baseline: NVML device-used before this process touches CUDA, and again after it has
  created its context with a one-element tensor; the difference, less the block the
  allocator reserved for that tensor, is the context.
- sampler: a thread (not a process: nothing re-imports torch) reading NVML every 50 ms
  from before the model loads to the end of the run: device used (whole card, every
  process) and this process's own use, as NVML sees it.
"""
from __future__ import annotations

import os
import statistics
import threading
import time

INTERVAL_S = 0.05


def memory_fraction(profile_bytes: int | None, physical_bytes: int, context_bytes: int = 0) -> float | None:
    """The allocator's share of the physical card that leaves it what the profile's card
    would; None when the profile is not smaller than the card (no cap: the card bounds it)."""
    if profile_bytes is None or profile_bytes >= physical_bytes:
        return None
    return max(0, profile_bytes - max(0, context_bytes)) / physical_bytes


class Nvml:
    """One device through NVML, addressed by its torch index (CUDA_VISIBLE_DEVICES applied)."""

    def __init__(self, torch_index: int):
        import pynvml
        pynvml.nvmlInit()
        self.pynvml, self.pid = pynvml, os.getpid()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index(torch_index))

    def read(self) -> tuple[int, int | None]:
        """(bytes used on the device by everyone, bytes this process uses or None)."""
        used = self.pynvml.nvmlDeviceGetMemoryInfo(self.handle).used
        try:
            procs = self.pynvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except self.pynvml.NVMLError:
            procs = []
        mine = [p.usedGpuMemory for p in procs if p.pid == self.pid and p.usedGpuMemory is not None]
        return used, (sum(mine) if mine else None)  # None: NVML cannot see our pid (e.g. a container)


def nvml_index(torch_index: int) -> int:
    """NVML's index of torch's device ``torch_index`` (torch maps CUDA_VISIBLE_DEVICES; the
    helper is private, so an identity fallback for torch versions without it)."""
    import torch
    try:
        return torch.cuda._get_nvml_device_index(torch_index)
    except Exception:  # noqa: BLE001 - private API or UUID lookup missing
        return torch_index


def open_nvml(torch_index: int) -> tuple[Nvml | None, str]:
    """(reader, "") or (None, why NVML numbers will be missing)."""
    try:
        return Nvml(torch_index), ""
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install 'ft-membench[gpu]'): no NVML numbers"
    except Exception as exc:  # noqa: BLE001 - NVMLError_* without a driver, and the like
        return None, f"NVML unavailable: {type(exc).__name__}: {exc}"


def context_baseline(torch, index: int, nvml: Nvml | None) -> dict:
    """Create this process's CUDA context on device ``index`` and measure it: with NVML, the
    card's used memory before and after; without it, the driver's own count after
    (``torch.cuda.mem_get_info``: total - free, less torch's reserved), which counts other
    processes on the card too, so the cap it sets is the lower (``context_bytes``)."""
    before = nvml.read()[0] if nvml else None
    torch.cuda.set_device(index)  # CUDA 12 creates the primary context here
    torch.empty(1, device=f"cuda:{index}")
    torch.cuda.synchronize(index)
    reserved = torch.cuda.memory_reserved(index)
    after, process = nvml.read() if nvml else (None, None)
    free, total = torch.cuda.mem_get_info(index)
    torch.cuda.empty_cache()  # hand the probe's block back: it is not the cell's
    context, how = context_bytes(before, after, reserved, free, total)
    return {"device_used_before_bytes": before, "device_used_after_init_bytes": after,
            "process_after_init_bytes": process, "init_reserved_bytes": reserved,
            "free_after_init_bytes": free, "cuda_context_bytes": context, "cuda_context_how": how}


def context_bytes(before: int | None, after: int | None, reserved: int, free: int, total: int) -> tuple[int, str]:
    """(the CUDA context's bytes, how they were read): NVML's used memory after - before - torch's
    reserved where NVML read both; else the driver's total - free - reserved (cudaMemGetInfo),
    which holds other processes' memory too."""
    if before is not None and after is not None:
        return after - before - reserved, "nvml: device used after the context - before - torch reserved"
    return max(0, total - free - reserved), ("cudaMemGetInfo (torch.cuda.mem_get_info): total - free - torch "
                                             "reserved; other processes on the card included")


def split_peak(breakdown: dict, tracker_peak: int, torch_peak: int) -> dict:
    """The record's peak on a GPU: torch's ``max_memory_allocated`` over the measured steps, always.
    The tracker splits it: what torch holds beyond the tracker's count (block rounding, kernel
    workspaces) is ``other``; where the tracker counted more (a storage it held that torch had
    freed), the excess comes off ``other``, then ``temporaries``, then ``activations``, and
    ``details.tracker_over_cuda_bytes`` says how much."""
    out = dict(breakdown)
    over = tracker_peak - torch_peak
    details = {"peak_source": "torch.cuda.max_memory_allocated over the measured steps"}
    if over <= 0:
        out["other"] += -over
    else:
        details["tracker_over_cuda_bytes"] = over
        for cat in ("other", "temporaries", "activations"):
            take = min(over, out[cat])
            out[cat] -= take
            over -= take
        if over:  # the states alone exceed torch's peak: the tracker is wrong, not torch
            raise RuntimeError(f"the tracker's parameters, gradients and optimizer state exceed torch's peak "
                               f"({torch_peak} bytes) by {over} bytes")
    return {"peak_bytes": torch_peak, "breakdown_bytes": out, "details": details}


def cap_to_profile(spec: dict, torch, index: int, nvml: Nvml | None) -> dict:
    """Create the context on device ``index``, measure it, and cap the allocator so the card
    behaves like the cell's profile; the facts, naming both the card and the profile."""
    facts = context_baseline(torch, index, nvml)
    props = torch.cuda.get_device_properties(index)
    fraction = memory_fraction(spec["gpu_memory_bytes"], props.total_memory, facts["cuda_context_bytes"] or 0)
    if fraction is not None:
        torch.cuda.set_per_process_memory_fraction(fraction, index)
    facts.update(physical_device=props.name, physical_memory_bytes=props.total_memory,
                 device_profile=spec["gpu"], profile_memory_bytes=spec["gpu_memory_bytes"],
                 memory_fraction=fraction, cap_bytes=int(fraction * props.total_memory) if fraction is not None else None)
    return facts


def torch_peaks(torch, index: int) -> dict:
    """The caching allocator's peaks since the last reset: allocated, reserved and active."""
    stats = torch.cuda.memory_stats(index)
    return {"allocated_peak_bytes": stats.get("allocated_bytes.all.peak"),
            "reserved_peak_bytes": stats.get("reserved_bytes.all.peak"),
            "active_peak_bytes": stats.get("active_bytes.all.peak")}


def finish(torch, index: int, sampler, facts: dict) -> dict:
    """``facts`` with torch's peaks and the sampler's summary (the sampler stopped)."""
    facts.update(torch_peaks(torch, index), nvml=sampler.stop() if sampler else None)
    return facts


class Sampler(threading.Thread):
    """Calls ``read() -> (device_used, process_used | None)`` every ``interval_s`` until
    ``stop()``, which returns ``summarize`` of the samples."""

    def __init__(self, read, interval_s: float = INTERVAL_S):
        super().__init__(name="nvml-sampler", daemon=True)
        self.read, self.interval_s = read, interval_s
        self.samples: list[tuple[float, int, int | None]] = []
        self.error = ""
        self._halt = threading.Event()

    def run(self) -> None:
        while True:
            try:
                self.samples.append((time.monotonic(), *self.read()))
            except Exception as exc:  # noqa: BLE001 - a failing read ends sampling, not the run
                self.error = f"{type(exc).__name__}: {exc}"
                return
            if self._halt.wait(self.interval_s):
                return

    def stop(self) -> dict:
        self._halt.set()
        self.join()
        out = summarize(self.samples, self.interval_s)
        out["error"] = self.error
        return out


def summarize(samples: list[tuple[float, int, int | None]], interval_s: float = INTERVAL_S) -> dict:
    """Peaks of (monotonic time, device used, process used or None) samples; None when
    nothing was sampled (a peak that was not measured is not 0)."""
    device = [s[1] for s in samples]
    process = [s[2] for s in samples if s[2] is not None]
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:])]
    return {
        "samples": len(samples),
        "interval_s": interval_s,
        "median_gap_s": statistics.median(gaps) if gaps else None,
        "device_used_peak_bytes": max(device) if device else None,
        "device_used_first_bytes": device[0] if device else None,
        "process_peak_bytes": max(process) if process else None,
    }
