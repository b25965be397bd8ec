"""The training step a cell measures, shared by the cpu, cuda and sim modes.

``train(spec, device, tracker)`` builds the model, optimizer and (if asked) the sharding
engine under the tracker, runs ``warmup_steps + steps`` optimizer steps, and returns the
measurements as a dict of record fields. Memory is tracked for every step (the first step
allocates the optimizer state; a later, longer batch may set the peak). Time, on a real run (cpu,
cuda), is the wall time of ``steps`` more steps run after the tracker has stopped, outside its
dispatch mode (``timed_steps``): the tracker's Python code on every op would slow a GPU's steps to
the CPU's pace. The tracked steps' times stay beside them (``details.tracked_step_s``). Sim's
time is modelled (bench/estimate/speedmodel.py).
"""
from __future__ import annotations

import contextlib
import math
import resource
import statistics
import time

import torch

from bench.worker import cpuload, data, dist, fsdpoffload, losses, models, optimizers, placement, proofs, zeromem
from bench.worker.progress import say

AUTOCAST = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}
SIM_LOSS_CHECK = ("sim: fake tensors carry no values, so no loss is computed; what stands in is the config check "
                  "(bench/worker/configcheck.py: transformers reads the config and has a causal-LM class for it) "
                  "and the matrix's checks of the config's values (bench/cells/workloads.config_problem: layers, experts, "
                  "rope_theta, norm epsilon, context))")


class NonFiniteLoss(RuntimeError):
    """A step's loss is NaN or infinite: the step trained nothing, so the cell is an error."""


def loss_value(loss) -> float | None:
    """The loss as a number (None under fake tensors, which carry no values). On a GPU this
    waits for the forward: a few microseconds in a timed step."""
    from torch._subclasses.fake_tensor import is_fake
    if is_fake(loss) or loss.device.type == "meta":
        return None
    return float(loss.detach().float().mean())


def host_peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


class Session:
    """Model, optimizer and the three calls a step makes, whatever wraps them."""

    def __init__(self, spec: dict, device, tracker, qlora_base=None, compile_backend=placement.COMPILE_BACKEND,
                 mesh=None):
        """``qlora_base``: how QLoRA's 4-bit base model is built (models.load_qlora_base loads it
        from a checkpoint; sim mode passes its own, which quantizes without one).
        ``compile_backend``: torch.compile's backend for ``compile`` (sim passes its own).
        ``mesh``: FSDP2's device mesh (sim's fake process group passes one; else the default)."""
        knobs = spec["knobs"]
        self.spec, self.device, self.tracker = spec, torch.device(device), tracker
        self.accum = knobs["accum"]
        say("building the model")
        self.model = models.build(spec, device, qlora_base=qlora_base)
        losses.install(self.model, knobs["loss"], device, compile_backend if knobs["compile"] else None)
        self.compiled_layers = placement.compile_layers(self.model, compile_backend) if knobs["compile"] else 0
        tracker.mark("parameters", dist.parameter_tensors(self.model))
        self.optimizer = self._optimizer(knobs)
        self.engine = None
        self.fsdp_offload = None
        if knobs["dist"] in ("fsdp", "fsdp-offload"):
            self.model = dist.wrap_fsdp(self.model, device, offload=knobs["dist"] == "fsdp-offload", mesh=mesh,
                                        param_dtype=AUTOCAST.get(knobs["precision"]))
            if knobs["dist"] == "fsdp-offload":  # shards, gradient shards and the step on the host
                self.fsdp_offload = fsdpoffload.watch(self.model, tracker, device)
            self.optimizer = self._optimizer(knobs)
        elif knobs["dist"] == "fsdp1":  # flat parameters: the optimizer is made again over them
            self.model = dist.wrap_fsdp1(self.model, device, param_dtype=AUTOCAST.get(knobs["precision"]),
                                         quant_storage=models.quant_storage(knobs) if knobs["adapter"] == "qlora" else None,
                                         layers_only=knobs["fsdp1_wrap"] == "layers")
            self.optimizer = self._optimizer(knobs)
        elif knobs["dist"]:
            self.engine, self.optimizer = dist.wrap_deepspeed(
                spec, self.model, self.optimizer, spec["batch_size"] // self.accum)
            zeromem.watch(self.engine, tracker)  # offloaded buffers to the host; gathered ZeRO-3 params
        tracker.mark("parameters", dist.parameter_tensors(self.model, self.optimizer))
        dtype = AUTOCAST.get(knobs["precision"])
        self.autocast = (torch.autocast(self.device.type, dtype=dtype) if dtype
                         else contextlib.nullcontext())
        self.scaler = (torch.amp.GradScaler(self.device.type)
                       if knobs["precision"] == "amp-fp16" and not self.engine else None)
        self.offload = placement.offload_saved(self.model, tracker, device) if knobs["act_offload"] else None
        self.compute_dtype = None
        self.grad_dtypes: set = set()
        self.forward_retained = 0  # most bytes a forward left alive for its backward (activations)
        self.losses: list = []     # one per step: the mean of its micro-batches' losses (None in sim)
        self._micro_losses: list = []
        self._kept = None          # keep-output: the model output the loop still holds
        self._probe = self._dtype_probe()

    def _optimizer(self, knobs):
        if knobs["opt_in_bwd"]:
            return placement.InBackward(optimizers.OPTIMIZERS[knobs["optimizer"]],
                                        [p for p in self.model.parameters() if p.requires_grad])
        return optimizers.make(knobs["optimizer"], self.model)

    def _dtype_probe(self):
        """Record the dtype the first Linear really computed in (proof a precision switch acted)."""
        first = next((m for m in self.model.modules() if isinstance(m, torch.nn.Linear)), None)
        if first is None:
            return None

        def hook(_m, _i, out):
            self.compute_dtype = str(getattr(out, "dtype", None)).replace("torch.", "")
            handle.remove()
        handle = first.register_forward_hook(hook)
        return handle

    def forward_backward(self, micro: dict) -> None:
        t = self.tracker
        call = self.engine or self.model
        before = t.total
        say("forward")
        with t.in_phase("forward"), self.autocast, self.offload or contextlib.nullcontext():
            out = call(**micro)
            loss = out.loss
            # keep-output: the loop's ``out`` holds the output (its logits) until the step ends; a new one replaces
            # it once the next forward has returned, as reassigning a loop variable does
            self._kept = out if self.spec["knobs"]["keep_output"] else None
            del out
        self.forward_retained = max(self.forward_retained, t.total - before)
        if self.spec["knobs"]["dist"] in ("fsdp", "fsdp-offload"):  # its gathered full weights are parameters, not activations
            t.mark("parameters", dist.fsdp_unsharded_tensors(self.model))
        elif self.spec["knobs"]["dist"] == "fsdp1":
            t.mark("parameters", dist.fsdp1_unsharded_tensors(self.model))
        say("backward")
        with t.in_phase("backward"):
            if self.engine:
                self.engine.backward(loss)
            elif self.scaler:
                self.scaler.scale(loss / self.accum).backward()
            else:
                (loss / self.accum).backward()
        self._micro_losses.append(loss_value(loss))
        del loss

    def optimizer_step(self) -> None:
        t = self.tracker
        grads = dist.gradient_tensors(self.model, self.optimizer)
        self.grad_dtypes |= {g.dtype for g in grads}
        t.mark("gradients", grads)
        say("optimizer step")
        with t.in_phase("optimizer"):
            if self.engine:
                self.engine.step()
            elif self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
        t.mark("optimizer", optimizers.state_tensors(self.optimizer))
        if not self.engine:
            self.optimizer.zero_grad(set_to_none=True)
        self._kept = None  # keep-output: the loop's output goes when the step's function returns

    def step(self, batch: dict) -> None:
        micros = data.split(batch, self.accum)
        for i, micro in enumerate(micros):
            # no-sync: FSDP keeps each unit's unsharded gradient until the step's last micro-batch reduces it
            # (sim's one-process step beside the rank's has no FSDP to ask)
            skip_sync = self.spec["knobs"]["no_sync"] and self.spec["knobs"]["dist"] in dist.NO_SYNC_ENGINES \
                and i < len(micros) - 1
            with dist.no_sync(self.model, self.spec["knobs"], skip_sync):
                self.forward_backward(micro)
            if skip_sync:  # the unsharded gradients it keeps are gradients, not the backward's temporaries
                self.tracker.mark("gradients", dist.gradient_tensors(self.model, self.optimizer))
            if self.engine and i < len(micros) - 1:
                self.engine.step()  # DeepSpeed counts micro-batches itself; it steps at the boundary
        self.optimizer_step()
        self._end_step_loss()

    def _end_step_loss(self) -> None:
        """The step's loss into ``losses``; a loss that is not finite ends the run as an error, but on a
        rank run alone over the fake group, whose gathered weights are no model's (its collectives move
        no other rank's data): there the loss says nothing, and the record says so."""
        got, self._micro_losses = self._micro_losses, []
        loss = None if None in got or not got else sum(got) / len(got)
        self.losses.append(loss)
        if loss is not None and not math.isfinite(loss) and not self.spec.get("one_rank"):
            raise NonFiniteLoss(f"step {len(self.losses)}: the loss is {loss} (not finite): the step trained "
                                "nothing (check the model config's values, e.g. rope_theta, rms_norm_eps)")


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def train(spec: dict, device, tracker, sim=None, mesh=None) -> dict:
    """``sim`` is sim mode's hook (bench.worker.sim.fakestep.FakeRun): it builds QLoRA's base
    without a checkpoint, sees the built session, hands the steps their batches as a real run
    would see them, and wraps each step (FLOP counting); cpu and cuda pass None.
    ``mesh``: a cpu or cuda cell run as its rank 0 alone (bench/worker/onerank.py): FSDP2 shards
    over it, and the steps start from the rank's shards, the whole model's build released."""
    knobs = spec["knobs"]
    out: dict = {}
    window = cpuload.Window()
    with tracker:
        session = Session(spec, device, tracker, qlora_base=sim.qlora_base if sim else None,
                          compile_backend=sim.compile_backend if sim else placement.COMPILE_BACKEND,
                          mesh=sim.mesh if sim else mesh)
        out["load_host_peak_rss_bytes"] = host_peak_rss()
        one_rank = {}
        if mesh is not None and sim is None:
            one_rank = after_build_one_rank(device, tracker)
        # loading's staging copies are host memory on a GPU run; sim's per-rank step starts from the rank's shards
        build_peak = sim.after_build(tracker) if sim else one_rank.get("build_peak_bytes", None)
        build_peak = tracker.reset_peak() if build_peak is None else build_peak
        if torch.device(device).type == "cuda":  # torch's peak counters measure the same span as the tracker
            build_peak = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        params = list(session.model.parameters())
        numel = proofs.param_numels(session.model)  # full sizes: ZeRO-3 placeholders, packed NF4, FSDP2's shards
        out["params_total"] = sum(numel)
        out["params_trainable"] = sum(n for n, p in zip(numel, params) if p.requires_grad)
        pads, widths = 0, []
        total = spec["warmup_steps"] + spec["steps"]
        vocab = session.model.config.vocab_size
        step_peaks, step_s, tokens = [], [], 0
        batches = data.batches(knobs["batching"], spec["batch_size"], spec["seq_len"],
                               vocab, total, spec["seed"] + dist.rank(), device)
        for i, batch in enumerate(sim.batches(session, batches) if sim else batches):
            say(f"step {i + 1}/{total}" + (" (warm-up)" if i < spec["warmup_steps"] else ""))
            if i == spec["warmup_steps"]:
                window.__enter__()
            if i:  # the step before ends here, its next batch made: the trace books that batch to it too
                step_peaks.append(tracker.step_peak)
            tracker.start_step()
            synchronize(device)
            t0 = time.perf_counter()
            with sim.step(i) if sim else contextlib.nullcontext():
                session.step(batch)
            synchronize(device)
            dt = time.perf_counter() - t0
            pads += batch["input_ids"].numel() - batch["real_tokens"]
            widths.append(batch["input_ids"].shape[-1])
            if i >= spec["warmup_steps"]:
                step_s.append(dt)
                tokens += batch["real_tokens"]
        if total:
            step_peaks.append(tracker.step_peak)  # the last step: no batch after it
        window.__exit__(None, None, None)
        say("steps done")
        out["details"] = session_details(session)
        out["details"]["timing_load"] = window.facts()
        out["details"].update(build_peak_bytes=build_peak, pad_tokens=pads, batch_widths=widths)
        if one_rank:
            out["details"]["one_rank_build"] = one_rank
        if session.fsdp_offload:
            out["details"]["fsdp_offload"] = session.fsdp_offload
        if tracker.host:
            out["details"].update(offloaded_bytes=tracker.host_breakdown(), offloaded_peak_bytes=tracker.host_peak)
        out["details"].update(losses=list(session.losses), final_loss=session.losses[-1] if session.losses else None)
        if sim:
            out["details"]["loss_check"] = SIM_LOSS_CHECK
        del batch
        out.update(peak_bytes=tracker.peak, breakdown_bytes=tracker.breakdown(),
                   phase_peak_bytes=dict(tracker.phase_peak), step_peak_bytes=step_peaks)
        if torch.device(device).type == "cuda":  # torch's peaks over the tracked span, before the timed steps
            out["details"]["cuda_tracked_peaks"] = {
                k: torch.cuda.memory_stats().get(f"{k}_bytes.all.peak") for k in ("allocated", "reserved", "active")}
        tracker.stop()
    if sim is None:  # a real run: time steps the tracker does not see (module docstring)
        out["details"]["tracked_step_s"] = step_s
        step_s, tokens = timed_steps(session, spec, device, vocab)
    del session
    out["details"].update(timed_tokens=tokens, timed_s=sum(step_s))  # ranks' throughput adds up from these
    out.update(
        step_s_median=statistics.median(step_s),
        tokens_per_s=tokens / sum(step_s),
        host_peak_rss_bytes=host_peak_rss(),
    )
    return out


def after_build_one_rank(device, tracker) -> dict:
    """A rank run alone (bench/worker/onerank.py) built the whole model before sharding it: what its
    device held then, before that build is released (the cached blocks emptied on a GPU) and the
    tracker's trace restarted from the rank's shards, as a rank that loads only its shards starts."""
    from bench.worker import onerank
    out = {}
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        out.update(allocated_bytes=torch.cuda.memory_allocated(), reserved_bytes=torch.cuda.memory_reserved(),
                   allocated_peak_bytes=torch.cuda.max_memory_allocated())
        torch.cuda.empty_cache()
        out["reserved_after_release_bytes"] = torch.cuda.memory_reserved()
    out["build_peak_bytes"] = onerank.start_from_shards(tracker)
    return out


def timed_steps(session: Session, spec: dict, device, vocab: int) -> tuple[list[float], int]:
    """``spec["steps"]`` more steps, with batches of the measured steps' shapes, outside the tracker's
    dispatch mode (its counting stopped): (wall seconds of each, real tokens trained)."""
    step_s, tokens = [], 0
    batches = data.batches(spec["knobs"]["batching"], spec["batch_size"], spec["seq_len"], vocab, spec["steps"],
                           spec["seed"] + dist.rank() + 1, device)
    for i, batch in enumerate(batches):
        say(f"timed step {i + 1}/{spec['steps']} (untracked)")
        synchronize(device)
        t0 = time.perf_counter()
        session.step(batch)
        synchronize(device)
        step_s.append(time.perf_counter() - t0)
        tokens += batch["real_tokens"]
    return step_s, tokens


def session_details(session: Session) -> dict:
    """Facts that prove the knobs acted (bench/worker/proofs.py)."""
    return proofs.collect(session)
