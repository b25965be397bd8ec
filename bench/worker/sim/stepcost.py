"""What the measured sim step costs a GPU, counted op by op: ``details.step_cost``.

bench/estimate/speedmodel.py turns it into a time per GPU profile (the roofline below, at the profile's
peaks); this module only counts, during the first step after warm-up, as FakeRun's op hook:

- ``flops_by_dtype``: torch.utils.flop_counter's formulas (fakestep.count_flops), keyed by the
  dtype the op computes in (its first floating-point output).
- ``ops``: the ops that have FLOPs (matmuls, attention, bitsandbytes' 4-bit GEMM), grouped as
  ``[op, dtype, flops, bytes, count, part]`` so that the parent can bound each one by compute
  or by memory, whichever is slower, on any GPU (a per-op roofline).
- ``bytes_moved``: the bytes each non-view op reads and writes (its tensor inputs and outputs,
  at their shapes). Views (declared, or an op that mutates nothing and returns only tensors on
  its inputs' storages), metadata ops (no tensor out), allocations (``empty*``) and host copies
  move nothing on the device.
  Compile rule (``_fused_bytes``): with ``compile`` on, pointwise ops (``torch.Tag.pointwise``)
  and casts fuse into chains, as inductor fuses them into one kernel: a chain reads its inputs
  from outside once, and its output is written only when an op outside the chain (a matmul, a
  reduction, an op of a later phase) reads it.
- ``memory_bytes``: the ops without FLOPs, by part: memory-bound kernels.
- ``nf4_dequant_bytes``: NF4 dequantization. bitsandbytes' ``gemm_4bit`` dequantizes the weight
  before a 16-bit GEMM (its fallback for M > 1536 tokens; counted always, an upper bound below
  that): the packed weight and absmax read, the 16-bit weight written (the GEMM's own entry
  reads it back); ``dequantize_4bit`` (the backward's) counts its inputs and output.
- ``recompute_flops`` / part ``recompute``: ops run while torch.utils.checkpoint recomputes a
  forward during backward (its ``_recomputation_hook`` is entered around each recomputation).
- ``pcie_bytes``: copies from host storages (activation offloading's reloads), measured, twice
  (each went to the host in forward).
- ``comm_bytes_per_rank``, ``offload_pcie_bytes``: analytic (``communication`` below), as the
  single-process step has no collectives.
"""
from __future__ import annotations

import contextlib

import torch
import torch.utils.checkpoint as checkpoint
from torch.utils._pytree import tree_flatten

from bench.worker.tensors import tensors_in

POINTWISE = torch.Tag.pointwise
CASTS = ("aten._to_copy", "prims.convert_element_type")
HOW = ("counted over the first step after warm-up (one rank's micro-batches): FLOPs by "
       "torch.utils.flop_counter's formulas per compute dtype; bytes as each non-view op's tensor "
       "inputs + outputs (compile: chains of pointwise ops and casts fused: their outside "
       "inputs read, an output written only when a non-fused op or a later phase reads it); NF4 dequantization as "
       "bitsandbytes' gemm_4bit dequant-then-GEMM path (packed weight + absmax read, 16-bit weight "
       "written); recomputation as the ops run inside torch.utils.checkpoint's recomputation; "
       "host reloads (activation offloading) x 2 as PCIe bytes. ")
COMM_RULE = ("communication per rank, analytic, ring collectives moving (n-1)/n of a buffer per "
             "rank: zero1/zero2 reduce-scatter the gradients of every micro-batch and all-gather the "
             "updated weights once ((accum x gradient + trainable weight bytes) x (n-1)/n); zero3 "
             "and fsdp (fsdp-offload too) all-gather the weights in forward and again in backward and reduce-scatter "
             "the gradients, per micro-batch (accum x (2 x weight + gradient bytes) x (n-1)/n), "
             "gradients in the trainable weights' dtype; *-offload also sends the rank's gradient "
             "partition to the host and its updated weights back over PCIe (trainable gradient + "
             "weight bytes / n); fsdp-offload copies the rank's weight shards to the device before each "
             "all-gather and its gradient shards back (accum x (2 x weight + gradient bytes) / n)")


class StepCost:
    """The op hook's counters for one step (``start``/``stop`` around it)."""

    def __init__(self, knobs: dict, tracker):
        self.compile = bool(knobs.get("compile"))
        self.tracker = tracker
        self.counting = False
        self.recomputing = 0
        self.flops_by_dtype: dict = {}
        self.ops: dict = {}
        self.memory: dict = {}
        self.bytes_moved = self.nf4 = self.recompute_flops = self.pcie = 0
        self.tokens = None
        self.pending: dict = {}  # compile: serial -> (bytes, phase) of a fused chain's unwritten output
        self._facts: dict = {}  # op -> _op_facts(op), looked up once per op, not per call

    @contextlib.contextmanager
    def patched(self):
        """torch.utils.checkpoint's recomputation, seen (the module looks the hook up per call)."""
        cost, base = self, checkpoint._recomputation_hook

        class Seen(base):
            def __enter__(self):
                cost.recomputing += 1
                return super().__enter__()

            def __exit__(self, *exc):
                cost.recomputing -= 1
                return super().__exit__(*exc)
        checkpoint._recomputation_hook = Seen
        try:
            yield
        finally:
            checkpoint._recomputation_hook = base

    def after_op(self, func, args, kwargs, out, flops: int) -> None:
        """Count one op: its per-op facts looked up once, its outputs and inputs walked without pytree."""
        if not self.counting:
            return
        facts = self._facts.get(func)
        if facts is None:
            facts = self._facts[func] = _op_facts(func)
        name, moves, mutable = facts
        if not moves:
            return  # a view or an allocation
        outs = tensors_in(out)
        if not outs and not mutable:
            return  # metadata (prim.device): no tensor out
        ins = tensors_in(args)
        if kwargs:
            tensors_in(kwargs, ins)
        if not mutable and _aliases(ins, outs):
            return  # a view its schema does not declare (_unsafe_view)
        self._count(func, name, args, ins, outs, flops)

    def _count(self, func, name: str, args, ins: list, outs: list, flops: int) -> None:
        if any(self.tracker.is_host(t) for t in ins + outs if t.device.type != "meta"):
            self.pcie += sum(_nbytes(t) for t in outs)  # one copy: what lands on the other side
            return
        part = "recompute" if self.recomputing else "step"
        if self.compile:
            nbytes = self._fused_bytes(func, name, ins, outs, part)
        else:
            nbytes = sum(_nbytes(t) for t in outs) + sum(_nbytes(t) for t in ins)
        if name == "bitsandbytes.gemm_4bit":
            dequant, weight = _gemm_4bit_dequant(args, outs)
            self.nf4 += dequant
            nbytes += weight - sum(_nbytes(t) for t in ins[1:])  # the GEMM reads the 16-bit weight
        elif name == "bitsandbytes.dequantize_4bit":
            self.nf4 += nbytes
            part = "nf4_dequant"
        self.bytes_moved += nbytes
        if flops:
            dtype = _dtype(outs or ins)
            self.flops_by_dtype[dtype] = self.flops_by_dtype.get(dtype, 0) + flops
            key = (name, dtype, flops, nbytes, part)
            self.ops[key] = self.ops.get(key, 0) + 1
            if part == "recompute":
                self.recompute_flops += flops
        else:
            self.memory[part] = self.memory.get(part, 0) + nbytes

    def _fused_bytes(self, func, name: str, ins, outs, part: str) -> int:
        """Bytes under compile's fusion rule: a pointwise op (or a cast) fuses into the kernel of
        the ops around it. Its output is written only once an op outside that chain reads it
        (a matmul, a reduction, a later phase: forward, recompute, backward), and nothing
        re-reads it; a chain's inputs from outside are read. A mutation lands at once."""
        serial_of, phase = self.tracker.serial_of, (self.tracker.phase, part)
        fusable = POINTWISE in getattr(func, "tags", ()) or name in CASTS
        nbytes = 0
        for t in ins:
            serial = serial_of(t) if t.device.type != "meta" else None
            held = self.pending.get(serial)
            if held is not None and fusable and held[1] == phase:
                continue  # in registers: the chain goes on
            if held is not None:
                nbytes += self.pending.pop(serial)[0]  # materialized for this reader
            nbytes += _nbytes(t)
        for t in outs:
            if fusable and not func._schema.is_mutable and t.device.type != "meta":
                serial = serial_of(t)
                if serial is not None:
                    self.pending[serial] = (_nbytes(t), phase)
                    continue
            nbytes += _nbytes(t)
        return nbytes

    def record(self, spec: dict, facts: dict | None) -> dict:
        comm, offload = communication(spec, facts)
        return {
            "flops_by_dtype": dict(sorted(self.flops_by_dtype.items())),
            "bytes_moved": self.bytes_moved + self.nf4,
            "nf4_dequant_bytes": self.nf4,
            "recompute_flops": self.recompute_flops,
            "comm_bytes_per_rank": comm,
            "offload_pcie_bytes": offload,
            "pcie_bytes": 2 * self.pcie,  # each host copy went there in forward and came back
            "tokens_per_step": self.tokens,
            "world_size": spec["world_size"],
            "dist": spec["knobs"]["dist"],
            "compile_fused": self.compile,
            "act_offload": bool(spec["knobs"].get("act_offload")),
            "memory_bytes": dict(sorted(self.memory.items())),
            "ops": [[*k[:4], n, k[4]] for k, n in sorted(self.ops.items(), key=lambda kv: -kv[0][2] * kv[1])],
            "how": HOW + COMM_RULE,
        }


def _op_facts(func) -> tuple[str, bool, bool]:
    """(name, whether it can move bytes, whether its schema mutates) of an op: what ``after_op``
    reads per call, computed once. Views (declared) and allocations (``empty*``) move nothing."""
    name = str(getattr(func, "overloadpacket", func))
    moves = not (getattr(func, "is_view", False) or name.startswith(("aten.empty", "aten.new_empty")))
    return name, moves, func._schema.is_mutable


def _aliases(ins, outs) -> bool:
    """No output of its own: none at all, or every one on an input's storage."""
    mine = {t.untyped_storage()._cdata for t in ins if t.device.type != "meta"}
    return all(t.device.type != "meta" and t.untyped_storage()._cdata in mine for t in outs)


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def _dtype(tensors) -> str:
    floats = [t for t in tensors if t.dtype.is_floating_point]
    return str((floats or tensors)[0].dtype).replace("torch.", "")


def _gemm_4bit_dequant(args, outs) -> tuple[int, int]:
    """(dequantization bytes, the 16-bit weight's bytes) of one ``gemm_4bit``: packed weight and
    absmax (and double quantization's nested absmax and code) read, the weight written."""
    a, shape_b = args[0], args[2]
    weight = shape_b[0] * shape_b[1] * a.element_size()
    read = sum(_nbytes(t) for t in tree_flatten(args[1:])[0] if isinstance(t, torch.Tensor))
    return read + weight, weight


def communication(spec: dict, facts: dict | None) -> tuple[int, int]:
    """(collective bytes per rank per step, offload PCIe bytes per rank per step): COMM_RULE, from the
    model's ``facts`` (bench/worker/sim/measure.py ``model_facts``)."""
    dist, n = spec["knobs"]["dist"], spec["world_size"]
    if not dist or facts is None:
        return 0, 0
    weights, train_w = facts["weights_bytes"], facts["trainable_bytes"]
    grads = train_w  # gradients in the weights' dtype (DeepSpeed's bf16 engine, FSDP2's default)
    ring = (n - 1) / n
    accum = spec["knobs"].get("accum") or 1
    if dist.startswith("zero3") or dist.startswith("fsdp"):
        comm = ring * (2 * weights * accum + grads * accum)
    else:
        comm = ring * (grads * accum + train_w)
    if dist == "fsdp-offload":  # every shard to the device before each all-gather, gradient shards back
        offload = accum * (2 * weights + grads) / n
    else:
        offload = (grads + train_w) / n if dist.endswith("-offload") else 0
    return int(comm), int(offload)
