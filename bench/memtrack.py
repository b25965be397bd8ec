"""Exact live-tensor bytes, by category, at the peak: a TorchDispatchMode over storages.

Every op's outputs pass through ``__torch_dispatch__``; each storage not seen before is
counted once (views share storages) and uncounted by a weakref finalizer when it dies.
This works the same on real CPU/CUDA tensors and on fake tensors (sim mode), so the three
modes share one accounting.

The peak's live set is kept (as storage keys) on the first free after a new high-water
mark, which is when the live set at the peak is known to be complete; categories are
assigned afterwards, once the run has revealed which storages were gradients and
optimizer state:

- parameters: storages of model parameters (and of sharded/quantized parameter data)
- gradients: ``.grad`` of model or optimizer parameters
- optimizer: tensors in the optimizer's state, and optimizer-owned master parameters
- activations: allocated during forward and still alive at the peak
- temporaries: allocated during backward or the optimizer step, none of the above
- other: everything else alive (inputs, buffers, anything from before the run)

``rounding`` maps a storage's byte count to what an allocator would hand out (sim mode
passes the CUDA caching allocator's rounding); the default counts exact bytes.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "temporaries", "other")
PHASES = ("forward", "backward", "optimizer")


class OutOfBudget(torch.OutOfMemoryError if hasattr(torch, "OutOfMemoryError") else RuntimeError):
    """Live bytes passed the device profile's capacity (cpu mode emulates that device)."""


def _key(storage) -> int:
    return storage._cdata


class MemTracker(TorchDispatchMode):
    def __init__(self, budget_bytes: int | None = None, rounding=None):
        super().__init__()
        self.budget = budget_bytes
        self.rounding = rounding or (lambda n: n)
        self.live: dict[int, tuple] = {}    # storage key -> (serial, counted bytes, birth phase)
        self.serials = 0                    # storage keys are addresses and get reused: serials don't
        self.total = 0
        self.peak = 0
        self.peak_live: list[tuple] = []    # (serial, bytes, birth phase) of the peak's storages
        self._peak_dirty = False
        self.phase = "other"
        self.phase_peak = dict.fromkeys(PHASES, 0)
        self.step_peak = 0
        self.known = {c: set() for c in ("parameters", "gradients", "optimizer")}  # serials

    # -- counting ---------------------------------------------------------------------
    def track(self, tensor) -> int:
        """Count ``tensor``'s storage if new; return its serial."""
        # a DTensor (FSDP2) holds its local shard; the wrapper's own storage reports the global size
        storage = getattr(tensor, "_local_tensor", tensor).untyped_storage()
        key = _key(storage)
        entry = self.live.get(key)
        if entry is not None:
            return entry[0]
        self.serials += 1
        nbytes = self.rounding(storage.nbytes())
        self.live[key] = (self.serials, nbytes, self.phase)
        self.total += nbytes
        weakref.finalize(storage, self._free, key)
        if self.total > self.peak:
            self.peak = self.total
            self._peak_dirty = True
            if self.budget is not None and self.total > self.budget:
                raise OutOfBudget(
                    f"out of memory: {self.total} live bytes over the device profile's {self.budget}")
        if self.phase in self.phase_peak and self.total > self.phase_peak[self.phase]:
            self.phase_peak[self.phase] = self.total
        if self.total > self.step_peak:
            self.step_peak = self.total
        return self.serials

    def _free(self, key: int) -> None:
        if self._peak_dirty:  # first free after a new high-water mark: the live set is the peak's
            self.peak_live = list(self.live.values())
            self._peak_dirty = False
        entry = self.live.pop(key, None)
        if entry is not None:
            self.total -= entry[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.track(t)
        return out

    # -- what things are --------------------------------------------------------------
    def mark(self, category: str, tensors) -> None:
        """Declare live tensors as parameters / gradients / optimizer state."""
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes() > 0:
                self.known[category].add(self.track(t))

    @contextmanager
    def in_phase(self, phase: str):
        prev, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = prev

    def start_step(self) -> None:
        self.step_peak = self.total

    # -- the answer -------------------------------------------------------------------
    def breakdown(self) -> dict[str, int]:
        """Bytes per category at the peak; sums to ``peak``."""
        entries = list(self.live.values()) if self._peak_dirty else self.peak_live
        out = dict.fromkeys(CATEGORIES, 0)
        for serial, nbytes, born in entries:
            out[self._category(serial, born)] += nbytes
        return out

    def _category(self, serial: int, born: str) -> str:
        for cat in ("parameters", "gradients", "optimizer"):
            if serial in self.known[cat]:
                return cat
        return {"forward": "activations", "backward": "temporaries", "optimizer": "temporaries"}.get(born, "other")
