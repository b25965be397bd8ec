"""The real training step under fake tensors: sim mode's context, hook and tracker.

``FakeRun`` is what bench/worker/sim/simulate.py wraps around ``bench.worker.train.train(spec, "cpu", tracker,
sim=fake_run)``: the same Session, model code (transformers), adapters (peft), optimizers
(torch, bitsandbytes) and loop as a real cpu run, on FakeTensorMode tensors of device cpu, so
nothing is allocated. What it has to add, each for a stated reason:

- ``module.to()`` on fake parameters swaps tensors (torch.nn.Module._apply), which fails while
  the fake mode's own memo holds a weak reference to them; the memo entry is dropped first.
- Batches are drawn for real (the same seeded values as a real run), uncounted, and handed to
  the step as fake tensors, counted once (a real input under fake mode would be converted
  again by every view op, counting its bytes twice). transformers decides on the mask's values
  whether to drop it and run SDPA causal
  (masking_utils._ignore_causal_mask_sdpa), and on a fake mask it never drops it ("tracing"),
  which would change the attention kernel (and GQA's repeat_kv) and its memory. The decision
  is taken on the real batch instead: all ones, dropped, as in a real run.
- bitsandbytes builds its 8-bit quantization maps from values (``create_dynamic_map``): built
  for real, they are 1 KiB constants as in a real run, built for each run before its tracker
  starts (bitsandbytes' cache of them swapped for one holding them), as a real load builds them
  with its checkpoint: a record does not depend on what this process ran before.
- QLoRA loads through ``from_pretrained`` + bitsandbytes, which needs a checkpoint on disk and
  a real ``Params4bit``; ``qlora_base`` below builds the same modules from the random-init
  model instead: bitsandbytes' own ``quantize_4bit`` (its fake kernels give the packed uint8
  weight and quant state, bytes equal to a real load: tests/test_sim_bnb.py), wrapped in the
  real ``bnb.nn.Linear4bit`` modules whose forward and autograd run unchanged.
- Python's cyclic garbage collector is off for the run (collected before it, enabled after):
  compiled steps hold some storages in reference cycles, and when the collector frees them
  depends on how many Python objects the process allocated before, not on the cell: the same
  compiled cell gave other frees in a warm server's fork than in a fresh process, and moved
  with the tracker's own allocations per op (1,064,960 B at ``qwen2.5-7b compile+bf16``'s
  peak). With it off, a cell's record depends on the cell alone.
- With ``cuda_model`` on: the CUDA allocator's rounding, CUDA's attention kernels and kernel
  workspaces (bench/worker/cuda_alloc.py, bench/worker/sim/cuda_kernels.py). Off, the step counts exactly what
  a real cpu run counts (tests/test_sim_fidelity.py).
- ``compile``: the decoder layers (and the chunked loss's CE) compiled with sim's own backend
  instead of inductor: inductor's graphs, decompositions and partition, run op by op with the
  values inductor fuses into registers uncounted (bench/worker/sim/fusion.py).
- FakeTensorMode's dispatch-cache key built faster, to the same value (bench/worker/sim/fastkey.py):
  about a quarter of a 7B step's time went into it.
- FLOPs: torch.utils.flop_counter's formulas, counted by the tracker over the first step after
  warm-up (``count_flops``); over the same step, what it costs a GPU (FLOPs per dtype, bytes
  moved, NF4 dequantization, recomputation: bench/worker/sim/stepcost.py, ``cost``).
"""
from __future__ import annotations

import contextlib
import gc

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from transformers import masking_utils
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.flop_counter import flop_registry

from bench.estimate import replay
from bench.worker import cuda_alloc, models, optimizers
from bench.worker.sim import cuda_kernels, fastkey, fusion, rankgroup, stepcost
from bench.worker.memtrack import MemTracker
from bench.cells.techniques import BNB_OPTIMIZERS

_SWAP_TENSORS = torch.utils.swap_tensors
_IGNORE_CAUSAL_MASK = masking_utils._ignore_causal_mask_sdpa


@contextlib.contextmanager
def swapped(obj, name: str, value):
    """``obj.name = value`` for the duration (the sim worker's own process only)."""
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def sim_tracker(cuda_model: bool = True, budget_bytes=None) -> MemTracker:
    """The tracker of a sim step: the CUDA caching allocator's rounding (with ``cuda_model``)
    and each phase's peak live set kept (ZeRO's analytic partitioning needs them). FakeRun
    adds its op hooks (FLOPs, CUDA kernel workspaces)."""
    return MemTracker(budget_bytes=budget_bytes, rounding=cuda_alloc.round_size if cuda_model else None,
                      phase_sets=True)


def _quant_state_back(module) -> None:
    """bitsandbytes' ``fix_4bit_weight_quant_state_from_module`` under fake tensors: FSDP's
    unsharded weight is a plain parameter without the quant state, which bitsandbytes gives back
    from the module (re-wrapping it in Params4bit, which shares its storage: no bytes either way;
    a fake tensor cannot be re-wrapped, so the state is set on it directly)."""
    if getattr(module.weight, "quant_state", None) is None:
        module.weight.quant_state = module.quant_state


class FakeRun:
    """Sim mode's context (fake tensors and the patches above) and bench.train's ``sim`` hook."""

    def __init__(self, spec: dict, tracker: MemTracker, cuda_model: bool = True):
        self.spec, self.knobs, self.tracker = spec, spec["knobs"], tracker
        self.mesh = None  # FSDP2's mesh over the fake process group, when the step is one rank's (rankgroup)
        self.qlora_base = qlora_base  # bench.worker.train's seams: QLoRA's base without a checkpoint,
        self.compile_backend = fusion.backend(tracker)  # and compile without inductor's real-memory kernels
        self.cuda_model = cuda_model
        self.flop_step = spec["warmup_steps"]  # the first timed step: warm-up has built the state
        self.flops = None
        self._counting = None  # FLOPs so far while the FLOP step runs, else None
        self.cost = stepcost.StepCost(self.knobs, tracker)
        tracker.op_hooks.append(self._after_op)
        self.session = None
        self.mode = None
        self._all_ones = False
        self._tokens = None
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        if self.knobs["adapter"] or self.knobs["optimizer"] in BNB_OPTIMIZERS:
            # imported now, their module-level constants (peft's, bitsandbytes' NF4 tables) are
            # real tensors; imported under the fake mode they would be fake for the process
            import bitsandbytes  # noqa: F401
            import peft  # noqa: F401
        s = self._stack
        self.mesh = s.enter_context(rankgroup.ranks(self.spec))  # before the fake mode: the mesh holds values
        if gc.isenabled():  # no cyclic GC inside the step (the module docstring says why)
            gc.collect()
            gc.disable()
            s.callback(gc.enable)
        if self.knobs.get("compile"):  # dynamo's cache would hand this run graphs compiled for another
            torch._dynamo.reset()      # run's backend, which marks fused values in that run's tracker
        self.mode = s.enter_context(fastkey.install(FakeTensorMode(allow_non_fake_inputs=True)))
        s.enter_context(swapped(torch.utils, "swap_tensors", self._swap_tensors))
        s.enter_context(swapped(masking_utils, "_ignore_causal_mask_sdpa", self._ignore_causal_mask_sdpa))
        if self.knobs["optimizer"] in BNB_OPTIMIZERS or self.knobs["adapter"] == "qlora":
            import bitsandbytes.functional as bnbf
            s.enter_context(swapped(bnbf, "create_dynamic_map", real(bnbf.create_dynamic_map)))
            # its cache of that map, made for each run before the tracker starts: a real load builds it with the
            # checkpoint, before its count (tests/test_sim_fidelity.py), and a record may not depend on whether this
            # process quantized before (a per-rank cell's step ran after its single-process step, and found it built)
            s.enter_context(swapped(bnbf, "name2qmap", {"dynamic": real(bnbf.create_dynamic_map)()}))
        if self.mesh is not None and self.knobs["adapter"] == "qlora":
            import bitsandbytes.nn.modules as bnbm
            s.enter_context(swapped(bnbm, "fix_4bit_weight_quant_state_from_module", _quant_state_back))
        if self.knobs["optimizer"].startswith("paged-"):
            from bitsandbytes.optim.optimizer import Optimizer8bit
            s.enter_context(swapped(Optimizer8bit, "get_state_buffer", self._paged_buffer(Optimizer8bit.get_state_buffer)))
        if self.cuda_model:
            s.enter_context(swapped(torch.nn.functional, "scaled_dot_product_attention", cuda_kernels.cuda_sdpa))
        s.enter_context(self.cost.patched())
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)

    def _paged_buffer(self, get_state_buffer):
        """bitsandbytes' ``get_state_buffer`` as on a GPU: a paged optimizer's state that
        bitsandbytes pages (``optimizers.bnb_pages``) is allocated by ``get_paged`` in CUDA unified memory (its cpu fallback
        allocates the same bytes in place); the trace names that allocation so, and the
        allocator replay keeps it outside the caching allocator (bench/estimate/replay.py UNIFIED_OP)."""
        tracker = self.tracker

        def paged(opt, p, dtype=torch.float32):
            buf = get_state_buffer(opt, p, dtype=dtype)
            if opt.is_paged and optimizers.bnb_pages(p.numel()):
                tracker.label(buf, replay.UNIFIED_OP)
            return buf
        paged.__wrapped__ = get_state_buffer
        return paged

    def _swap_tensors(self, t1, t2):
        memo = self.mode.fake_tensor_converter.tensor_memo
        for key in [k for k, v in list(memo.items()) if v is t1 or v is t2]:
            del memo[key]
        return _SWAP_TENSORS(t1, t2)

    # -- bench.train's hook ---------------------------------------------------------------
    def after_build(self, tracker) -> int:
        """Where the step's trace starts: one rank's step from the rank's shards, else from the build."""
        return rankgroup.start_from_shards(tracker) if self.mesh is not None else tracker.reset_peak()

    def batches(self, session, batches):
        """The real batches, with the attention mask as transformers would treat it."""
        self.session = session
        while True:
            with _disable_current_modes():  # real tensors, and not counted: their fake twins are
                batch = next(batches, None)
                mask = None if batch is None else batch.get("attention_mask")
                self._all_ones = mask is not None and bool(mask.all())
                self._tokens = None if batch is None else int(batch["real_tokens"])
            if batch is None:
                return
            fake = {k: self.mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            for v in fake.values():  # shared storages stay shared (the converter keeps them so)
                if isinstance(v, torch.Tensor):
                    self.tracker.track(v)
            del batch, mask
            yield fake

    def _ignore_causal_mask_sdpa(self, padding_mask, *args, **kwargs):
        """transformers' decision to drop the mask and run SDPA causal, taken on the real
        batch's values (transformers refuses to read a fake mask's)."""
        if isinstance(padding_mask, FakeTensor):
            if not self._all_ones:
                return False
            padding_mask = None  # all ones: what fast_all(mask) finds in a real run
        return _IGNORE_CAUSAL_MASK(padding_mask, *args, **kwargs)

    def _after_op(self, func, args, kwargs, out) -> None:
        """The tracker's op hook: FLOPs while counting, and CUDA kernels' scratch."""
        if self._counting is not None:
            flops = count_flops(func, args, kwargs, out)
            self._counting += flops
            self.cost.after_op(func, args, kwargs, out, flops)
        if self.cuda_model:
            self.tracker.transient(cuda_kernels.workspace_bytes(func, args, kwargs))

    @contextlib.contextmanager
    def step(self, index: int):
        if index != self.flop_step:
            yield
            return
        self._counting = 0
        self.cost.counting, self.cost.tokens = True, self._tokens
        try:
            yield
        finally:
            self.flops, self._counting = self._counting, None
            self.cost.counting = False


def _gemm_4bit_flops(a, b, shape_b, *args, out_val=None, **kwargs) -> int:
    return 2 * (a.numel() // a.shape[-1]) * shape_b[0] * shape_b[1]


FLOP_FORMULAS = {**flop_registry, "bitsandbytes.gemm_4bit": _gemm_4bit_flops}
_FLOPS_BY_OP: dict = {}


def count_flops(func, args, kwargs, out) -> int:
    """FLOPs of one op by torch.utils.flop_counter's formulas (plus bitsandbytes' 4-bit GEMM).
    Not FlopCounterMode itself: it decomposes ops it has no formula for, which changes the ops
    (and the memory) of the step being measured."""
    fn = _FLOPS_BY_OP.get(func, 0)
    if fn == 0:
        packet = getattr(func, "overloadpacket", None)
        fn = _FLOPS_BY_OP[func] = FLOP_FORMULAS.get(packet) or FLOP_FORMULAS.get(str(packet))
    return int(fn(*args, **(kwargs or {}), out_val=out)) if fn else 0


def real(fn):
    """``fn`` run on real tensors (fake mode off): for small constants built from values."""
    def wrapper(*args, **kwargs):
        with unset_fake_temporarily():
            return fn(*args, **kwargs)
    return wrapper


def qlora_base(spec: dict, config, device) -> torch.nn.Module:
    """bench.worker.models.load_qlora_base without a checkpoint, loaded as transformers loads it
    (``load_order``): the model is built on the meta device, every Linear but the output head
    replaced by bitsandbytes NF4 ``Linear4bit`` (double quantization unless nf4-no-dq, bf16 compute); then each
    weight arrives on the device one tensor at a time, in the checkpoint's sorted key order and
    the load dtype, and a 4-bit weight is quantized by bitsandbytes itself on arrival (its fake
    kernels give the packed uint8 weight and quant state, bytes equal to a real load:
    tests/test_sim_bnb.py) and its 16-bit copy freed at once. The 16-bit model is never on the
    device; what the allocator holds when the step starts is what such a load leaves. Then the
    same finish as a real load (``models.finish_kbit``)."""
    import bitsandbytes as bnb
    from transformers.integrations.bitsandbytes import replace_with_bnb_linear
    from transformers.quantizers.base import get_keys_to_not_convert

    knobs = spec["knobs"]
    qconfig = models.qlora_config(knobs)  # the real load's (amp-fp16, its one difference, does not run in sim)
    extras = models.kbit_extras(knobs)
    # the dtype the real load reads the checkpoint in: the quant state keeps it (dequantization's output)
    with unset_fake_temporarily():  # shapes only, as transformers builds the model before loading
        model = models.random_init(config, {**knobs, "precision": extras}, "meta")
        replace_with_bnb_linear(model, modules_to_not_convert=get_keys_to_not_convert(model),
                                quantization_config=qconfig)
    for name, module, key, meta in load_order(model):
        arrived = torch.empty(meta.shape, dtype=meta.dtype, device=device)  # its copy to the device
        if isinstance(module, bnb.nn.Linear4bit) and key == "weight":
            w = module.weight
            packed, state = bnb.functional.quantize_4bit(
                arrived, blocksize=w.blocksize, compress_statistics=w.compress_statistics,
                quant_type=w.quant_type, quant_storage=w.quant_storage)
            del arrived  # the 16-bit copy is freed as soon as it is quantized
            module.weight = torch.nn.Parameter(packed, requires_grad=False)
            for attr, value in vars(w).items():  # Params4bit's attributes, which peft reads
                setattr(module.weight, attr, value)
            module.weight.quant_state, module.weight.module = state, module
            module.quant_state = state  # as Params4bit's quantization sets it: FSDP's unsharded weight recovers it there
        elif key in module._parameters:
            module._parameters[key] = torch.nn.Parameter(arrived, requires_grad=False)
        else:
            module._buffers[key] = arrived
    model.tie_weights()
    model.is_loaded_in_4bit = True  # what transformers' bnb quantizer sets after loading
    return models.finish_kbit(model, {**knobs, "kbit_extras": extras})


def load_order(model) -> list:
    """(name, module, key, meta tensor) of every weight and buffer, in the order
    transformers' loader materializes them: the checkpoint's keys sorted by its own
    ``dot_natural_key`` (transformers.core_model_loading), tied weights once, and buffers the
    checkpoint does not hold (rotary tables) at the end, as the model's init leaves them."""
    from transformers.core_model_loading import dot_natural_key

    entries = []
    for full, p in model.named_parameters():
        mod, _, key = full.rpartition(".")
        entries.append((full, model.get_submodule(mod), key, p))
    entries.sort(key=lambda e: dot_natural_key(e[0]))
    for full, b in model.named_buffers():
        mod, _, key = full.rpartition(".")
        entries.append((full, model.get_submodule(mod), key, b))
    return entries
