"""The training step a cell measures, shared by the cpu, cuda and sim modes.

``train(spec, device, tracker)`` builds the model, optimizer and (if asked) the sharding
engine under the tracker, runs ``warmup_steps + steps`` optimizer steps, and returns the
measurements as a dict of record fields. Memory is tracked for every step (the first step
allocates the optimizer state; a later, longer batch may set the peak); time is the wall
time of the steps after warm-up.
"""
from __future__ import annotations

import contextlib
import resource
import statistics
import time

import torch

from bench import data, dist, models, optimizers

AUTOCAST = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}


def host_peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


class Session:
    """Model, optimizer and the three calls a step makes, whatever wraps them."""

    def __init__(self, spec: dict, device, tracker):
        knobs = spec["knobs"]
        self.spec, self.device, self.tracker = spec, torch.device(device), tracker
        self.accum = knobs["accum"]
        self.model = models.build(spec, device)
        tracker.mark("parameters", dist.parameter_tensors(self.model))
        self.optimizer = optimizers.make(knobs["optimizer"], self.model)
        self.engine = None
        if knobs["dist"] == "fsdp":
            self.model = dist.wrap_fsdp(self.model, device)
            self.optimizer = optimizers.make(knobs["optimizer"], self.model)
        elif knobs["dist"]:
            self.engine, self.optimizer = dist.wrap_deepspeed(
                spec, self.model, self.optimizer, spec["batch_size"] // self.accum)
        tracker.mark("parameters", dist.parameter_tensors(self.model, self.optimizer))
        dtype = AUTOCAST.get(knobs["precision"])
        self.autocast = (torch.autocast(self.device.type, dtype=dtype) if dtype
                         else contextlib.nullcontext())
        self.scaler = (torch.amp.GradScaler(self.device.type)
                       if knobs["precision"] == "amp-fp16" and not self.engine else None)
        self.compute_dtype = None
        self._probe = self._dtype_probe()

    def _dtype_probe(self):
        """Record the dtype the first Linear really computed in (proof a precision switch acted)."""
        for module in self.model.modules():
            if isinstance(module, torch.nn.Linear):
                def hook(_m, _i, out):
                    self.compute_dtype = str(getattr(out, "dtype", None)).replace("torch.", "")
                    handle.remove()
                handle = module.register_forward_hook(hook)
                return handle
        return None

    def forward_backward(self, micro: dict) -> None:
        t = self.tracker
        call = self.engine or self.model
        with t.in_phase("forward"), self.autocast:
            loss = call(**micro).loss
        with t.in_phase("backward"):
            if self.engine:
                self.engine.backward(loss)
            elif self.scaler:
                self.scaler.scale(loss / self.accum).backward()
            else:
                (loss / self.accum).backward()
        del loss

    def optimizer_step(self) -> None:
        t = self.tracker
        t.mark("gradients", dist.gradient_tensors(self.model, self.optimizer))
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

    def step(self, batch: dict) -> None:
        micros = data.split(batch, self.accum)
        for i, micro in enumerate(micros):
            self.forward_backward(micro)
            if self.engine and i < len(micros) - 1:
                self.engine.step()  # DeepSpeed counts micro-batches itself; it steps at the boundary
        self.optimizer_step()


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def train(spec: dict, device, tracker) -> dict:
    knobs = spec["knobs"]
    out: dict = {}
    with tracker:
        session = Session(spec, device, tracker)
        out["load_host_peak_rss_bytes"] = host_peak_rss()
        params = list(session.model.parameters())
        out["params_total"] = sum(p.numel() for p in params)
        out["params_trainable"] = sum(p.numel() for p in params if p.requires_grad)
        total = spec["warmup_steps"] + spec["steps"]
        vocab = session.model.config.vocab_size
        step_peaks, step_s, tokens = [], [], 0
        for i, batch in enumerate(data.batches(knobs["batching"], spec["batch_size"], spec["seq_len"],
                                               vocab, total, spec["seed"] + dist.rank(), device)):
            tracker.start_step()
            synchronize(device)
            t0 = time.perf_counter()
            session.step(batch)
            synchronize(device)
            dt = time.perf_counter() - t0
            step_peaks.append(tracker.step_peak)
            if i >= spec["warmup_steps"]:
                step_s.append(dt)
                tokens += batch["real_tokens"]
        out["details"] = session_details(session)
        out["details"].update(timed_tokens=tokens, timed_s=sum(step_s))  # ranks' throughput adds up from these
        del session, batch
    out.update(
        peak_bytes=tracker.peak,
        breakdown_bytes=tracker.breakdown(),
        phase_peak_bytes=dict(tracker.phase_peak),
        step_peak_bytes=step_peaks,
        step_s_median=statistics.median(step_s),
        tokens_per_s=tokens / sum(step_s),
        host_peak_rss_bytes=host_peak_rss(),
    )
    return out


def session_details(session: Session) -> dict:
    """Facts that prove the knobs acted: compute dtype, optimizer state dtypes, shard sizes."""
    opt_dtypes = sorted({str(t.dtype).replace("torch.", "") for t in optimizers.state_tensors(session.optimizer)
                         if t.dim() > 0})
    params = list(session.model.parameters())
    return {
        "compute_dtype": session.compute_dtype,
        "param_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in params}),
        "optimizer_state_dtypes": opt_dtypes,
        "optimizer_class": type(getattr(session.optimizer, "optimizer", session.optimizer)).__name__,
        "engine": type(session.engine).__name__ if session.engine else None,
        "gradient_checkpointing": bool(getattr(session.model, "is_gradient_checkpointing", False)),
    }
