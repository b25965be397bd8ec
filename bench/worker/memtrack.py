"""Exact live-tensor bytes, by category, at the peak: a TorchDispatchMode over storages.

Every op's outputs pass through ``__torch_dispatch__``; each storage not seen before is
counted once (views share storages) and uncounted by a weakref finalizer when it dies.
This works the same on real CPU/CUDA tensors and on fake tensors (sim mode), so the three
modes share one accounting.

The peak's live set is kept (as storage keys) on the first free after a new high-water
mark, which is when the live set at the peak is known to be complete; categories are
assigned afterwards, once the run has revealed which storages were gradients and
optimizer state (the categories: bench/worker/memtrace.py).

Storages moved off the device (DeepSpeed offload) are counted apart, as host bytes
(``to_host``, ``host_phases``); storages resized in place (FSDP2 frees and refills its
all-gather buffers with ``UntypedStorage.resize_``, which no dispatch mode sees) are
followed by wrapping that method while the tracker is active (bench/worker/memresize.py).

``rounding`` maps a storage's byte count to what an allocator would hand out (sim mode
passes the CUDA caching allocator's rounding); the default counts exact bytes.

Seams for sim mode (bench/worker/sim/fakestep.py), so that it never reaches into this
tracker's state: ``op_hooks`` are called after every op with (func, args, kwargs, out)
(FLOP counting, kernel workspaces); ``transient(nbytes)`` counts scratch memory a kernel
takes and frees inside one op; ``phase_breakdown()`` gives the categories at each phase's
own peak (ZeRO's analytic partitioning needs them); ``fused()`` runs ops as one fused
kernel's inside (sim's model of inductor, bench/worker/sim/fusion.py): what they make stays in
registers, so neither it nor a view of it is ever counted (``serial_of`` still names it).

``stop()`` ends the count: nothing after it (a real run's untracked timing steps) is counted or
traced, and what the measured steps left live stays counted as live.

What the tracker reports (``breakdown``, ``phase_breakdown``, ``host_breakdown``, ``trace``) and the
allocation trace's format: bench/worker/memtrace.py.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

from bench.records.record import PHASES
from bench.worker import memresize, memtrace
from bench.worker.streams import FollowsBackwardStreams, cpu_stream, cuda_stream
from bench.worker.tensors import NO_TENSORS, tensors_in


class OutOfBudget(torch.OutOfMemoryError if hasattr(torch, "OutOfMemoryError") else RuntimeError):
    """Live bytes passed the device profile's capacity (cpu mode emulates that device)."""


def _key(storage) -> int:
    return storage._cdata


HOST_SERIALS = 1 << 48  # serials of storages born on the host (offloaded steps): never in the trace


class MemTracker(memtrace.TrackerReports, memresize.FollowsResize, FollowsBackwardStreams, TorchDispatchMode):
    def __init__(self, budget_bytes: int | None = None, rounding=None, op_hooks=(), phase_sets: bool = False,
                 stream_of=None):
        """``stream_of``: () -> a key of the stream allocations go to now, None for the default stream
        (``cpu_stream``: torch.cpu's, which FSDP2 switches on a cpu device as on a GPU; ``cuda_stream``)."""
        super().__init__()
        self.op_hooks = list(op_hooks)
        self.phase_sets = phase_sets  # keep each phase's peak live set (costs a copy per new phase peak)
        self.budget = budget_bytes
        self.rounding = rounding or (lambda n: n)
        self.live: dict[int, tuple] = {}    # storage key -> (serial, counted bytes, birth phase)
        self.serials = 0                    # storage keys are addresses and get reused: serials don't
        self.host_serials = 0               # storages born on the host count from HOST_SERIALS: the trace's
        # serials stay dense, so a step's are the same however much an offloaded optimizer allocates
        self.total = 0
        self.peak = 0
        self.peak_live: list[tuple] = []    # (serial, bytes, birth phase) of the peak's storages
        self._peak_dirty = False
        self.phase = "other"
        self.phase_peak = dict.fromkeys(PHASES, 0)
        self.step_peak = 0
        self.known = {c: set() for c in ("parameters", "gradients", "optimizer")}  # serials
        self.host: dict[int, tuple] = {}    # storages off the device (offload): same entries as live
        self.host_total = 0
        self.host_peak = 0
        self.host_phases: set = set()       # phases whose new storages are born on the host
        self._resize_saved = None
        self.phase_live: dict[str, list] = {}  # phase -> live entries at that phase's peak
        self._phase_dirty = None
        self.events: list[tuple] = []       # (1, serial, bytes, step, phase, op, stream) | (0, serial, step, phase)
        self.stream_of = stream_of or cpu_stream  # the current stream's key (its index in ``streams``)
        self.streams: dict = {}             # stream key -> index in the trace (0: the default stream)
        self.dropped_events = 0
        self.trace_reset_at = 0
        self.step = -1                      # -1: building the model, before the first step
        self.ops: dict = {"(direct)": 0}    # op name -> index in the trace
        self._op = 0
        self._phase_index = {p: i for i, p in enumerate(memtrace.TRACE_PHASES)}
        self.fusing = False                 # inside a fused kernel (``fused``): outputs are never stored
        self.stopped = False                # ``stop()``: nothing after it is counted
        self.in_registers: dict[int, int] = {}  # storage key -> negative serial: values no kernel wrote
        self._unstored = 0

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """Let torch.compile run under the tracker (dynamo skips frames under any other
        dispatch mode): compiled code's ops and buffers still pass through here; tracing's
        own fake tensors do not (bench/worker/placement.py)."""
        return True

    # -- counting ---------------------------------------------------------------------
    def track(self, tensor) -> int:
        """Count ``tensor``'s storage if new; return its serial (0: holds no memory)."""
        if self.stopped:
            return 0
        if (tensor.fake_device if isinstance(tensor, FakeTensor) else tensor.device).type == "meta":
            return 0  # a meta tensor is shape only (DeepSpeed keeps such copies of every param), sim's too
        # a DTensor (FSDP2) holds its local shard; the wrapper's own storage reports the global size
        storage = getattr(tensor, "_local_tensor", tensor).untyped_storage()
        key = _key(storage)
        entry = self.live.get(key)
        if entry is not None:
            return entry[0]
        if key in self.host:
            return self.host[key][0]
        if key in self.in_registers or self.fusing:
            return self._in_registers(storage, key)
        nbytes = self.rounding(storage.nbytes())
        weakref.finalize(storage, self._free, key)
        if self.phase in self.host_phases:  # born on the host: a serial of its own range, none of the trace's
            self.host_serials += 1
            self.host[key] = (HOST_SERIALS + self.host_serials, nbytes, self.phase)
            self.host_total += nbytes
            self.host_peak = max(self.host_peak, self.host_total)
            return HOST_SERIALS + self.host_serials
        self.serials += 1
        self.live[key] = (self.serials, nbytes, self.phase)
        self._alloc_event(self.serials, storage.nbytes())
        self._grow(nbytes)
        return self.serials

    def _in_registers(self, storage, key: int) -> int:
        serial = self.in_registers.get(key)
        if serial is None:
            self._unstored -= 1
            serial = self.in_registers[key] = self._unstored
            weakref.finalize(storage, self.in_registers.pop, key, None)
        return serial

    @contextmanager
    def fused(self):
        """Ops run here are the inside of one fused kernel: their outputs are never stored."""
        prev, self.fusing = self.fusing, True
        try:
            yield
        finally:
            self.fusing = prev

    def serial_of(self, tensor) -> int | None:
        """The serial of ``tensor``'s storage if it is tracked (negative: held in registers)."""
        key = _key(tensor.untyped_storage())
        entry = self.live.get(key)
        return entry[0] if entry is not None else self.in_registers.get(key)

    def _event(self, ev: tuple) -> None:
        if len(self.events) < memtrace.MAX_TRACE_EVENTS:
            self.events.append(ev)
        else:
            self.dropped_events += 1

    def _alloc_event(self, serial: int, nbytes: int) -> None:
        if nbytes > 0:  # allocate(0) never reaches the CUDA allocator
            key = self.stream_of()
            stream = 0 if key is None else self.streams.setdefault(key, len(self.streams) + 1)
            self._event((1, serial, nbytes, self.step, self._phase_index.get(self.phase, 0), self._op, stream))

    def _grow(self, nbytes: int) -> None:
        self.total += nbytes
        if self.total > self.peak:
            self.peak = self.total
            self._peak_dirty = True
            if self.budget is not None and self.total > self.budget:
                raise OutOfBudget(
                    f"out of memory: {self.total} live bytes over the device profile's {self.budget}")
        if self.phase in self.phase_peak and self.total > self.phase_peak[self.phase]:
            self.phase_peak[self.phase] = self.total
            if self.phase_sets:
                self._phase_dirty = self.phase
        if self.total > self.step_peak:
            self.step_peak = self.total

    def _snapshot_if_peak(self) -> None:
        self._snapshot_phase()
        if self._peak_dirty:  # first free after a new high-water mark: the live set is the peak's
            self.peak_live = list(self.live.values())
            self._peak_dirty = False

    def _snapshot_phase(self) -> None:
        if self._phase_dirty:  # likewise for the current phase's own peak
            self.phase_live[self._phase_dirty] = list(self.live.values())
            self._phase_dirty = None

    def transient(self, nbytes: int) -> None:
        """Count ``nbytes`` allocated and freed again at once: scratch a kernel takes inside
        one op (allocated after the op's outputs, freed before it returns)."""
        requested, nbytes = nbytes, self.rounding(nbytes)
        if nbytes <= 0:
            return
        self.serials += 1
        key = -self.serials  # never a storage address
        self.live[key] = (self.serials, nbytes, self.phase)
        self._alloc_event(self.serials, requested)
        self._grow(nbytes)
        self._free(key)

    def _free(self, key: int) -> None:
        if self.stopped:
            return
        if key in self.host:
            self.host_total -= self.host.pop(key)[1]
            return
        self._snapshot_if_peak()
        entry = self.live.pop(key, None)
        if entry is not None:
            self.total -= entry[1]
            self._event((0, entry[0], self.step, self._phase_index.get(self.phase, 0)))

    def renumber_live(self) -> None:
        """New serials for the live storages, dense and in the order of their old ones, their
        categories kept: a rank's trace starts from them (bench/worker/onerank.py
        ``start_from_shards``), and the serials its build used and freed (a number that grows with
        the layers, between each layer's shards and its quantization state) are no part of it."""
        mapping = {}
        for key, (serial, nbytes, born) in sorted(self.live.items(), key=lambda kv: kv[1][0]):
            self.serials += 1
            mapping[serial] = self.serials
            self.live[key] = (self.serials, nbytes, born)
        for cat, serials in self.known.items():
            self.known[cat] = {mapping.get(s, s) for s in serials}

    def to_host(self, tensors) -> None:
        """Count these tensors' storages as host memory from now on (DeepSpeed offload keeps
        them in CPU memory; in cpu mode the device and the host are the same RAM)."""
        if self.stopped:
            return
        for t in tensors:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            key = _key(t.untyped_storage())
            if key not in self.live:
                self.track(t)
            entry = self.live.get(key)
            if entry is None:
                continue
            self._snapshot_if_peak()
            del self.live[key]
            self.total -= entry[1]
            self._event((0, entry[0], self.step, self._phase_index.get(self.phase, 0)))  # off the device
            self.host[key] = entry
            self.host_total += entry[1]
            self.host_peak = max(self.host_peak, self.host_total)

    def label(self, tensor, op_name: str) -> None:
        """Name the op that allocated ``tensor`` in the trace (its allocation event must be among
        the latest): bench/estimate/replay.py reads UNIFIED_OP as memory outside the caching allocator."""
        serial = self.track(tensor)
        op = self.ops.setdefault(op_name, len(self.ops))
        for i in range(len(self.events) - 1, max(-1, len(self.events) - 64), -1):
            ev = self.events[i]
            if ev[0] == 1 and ev[1] == serial:
                self.events[i] = (*ev[:5], op, *ev[6:])
                return
        raise ValueError(f"no recent allocation event for serial {serial}")

    def is_host(self, tensor) -> bool:
        return _key(tensor.untyped_storage()) in self.host

    def reset_peak(self) -> int:
        """Start the peak afresh from what is live now (the model's build and load stay out of
        the training peak); returns the peak so far."""
        before = self.peak
        self.peak, self._peak_dirty, self.peak_live = self.total, True, []
        self.phase_peak = dict.fromkeys(PHASES, 0)
        self.phase_live, self._phase_dirty = {}, None
        self.step_peak = self.total
        self.trace_reset_at = len(self.events)
        return before

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _PRIM_DEVICE and type(args[0]) is FakeTensor:
            # A fake tensor's device, asked from C++ (autograd asks it of every output, and
            # more): 60% of a sim step's dispatches. Answered as FakeTensor's own handler
            # answers it, without dispatching on: no tensor comes out, so nothing is tracked,
            # and the op hooks count nothing for it (no FLOPs, no bytes, no scratch). Its op
            # number is taken as before, so the trace's op numbers stay what they were.
            if func not in self.ops:
                self.ops[func] = len(self.ops)
            fake = args[0]
            return _META if fake.fake_mode.in_kernel_invocation else fake.fake_device
        out = func(*args, **(kwargs or {}))
        op = self.ops.get(func)
        if op is None:
            op = self.ops[func] = len(self.ops)
        self._op = op
        if isinstance(out, torch.Tensor):  # most ops: one tensor, no pytree walk
            self.track(out)
        elif out is not None and not isinstance(out, NO_TENSORS):
            for t in tensors_in(out):
                self.track(t)
        for hook in self.op_hooks:
            hook(func, args, kwargs, out)
        self._op = 0
        return out

    # -- what things are --------------------------------------------------------------
    def mark(self, category: str, tensors) -> None:
        """Declare live tensors as parameters / gradients / optimizer state."""
        if self.stopped:
            return
        for t in tensors:  # empty storages too: FSDP2 resizes its gather buffers to 0 between uses
            if isinstance(t, torch.Tensor):
                self.known[category].add(self.track(t))

    @contextmanager
    def in_phase(self, phase: str):
        self._snapshot_phase()  # a phase's peak set is complete when the phase ends
        prev, self.phase = self.phase, phase
        try:
            yield
        finally:
            self._snapshot_phase()
            self.phase = prev

    def stop(self) -> None:
        """End the count: the figures and the trace stay as they are now (module docstring)."""
        self._snapshot_if_peak()
        self.stopped = True

    def start_step(self) -> None:
        self.step_peak = self.total
        self.step += 1


_PRIM_DEVICE = torch.ops.prim.device.default
_META = torch.device("meta")
