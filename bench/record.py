"""The run record: one JSON object per cell, whatever happened to it.

Torch-free on purpose: the launcher, the Snakefile, the table and the report import this
module, and none of them may pay for (or depend on) a torch import.

Contract (every key is always present; a number that was not measured is ``None``):

- identity: ``cell``, ``study``, ``baseline_cell`` (the cell this one compares against),
  ``model``, ``gpu``, ``techniques`` (list), ``mode`` (cpu|cuda|sim),
  ``provenance`` (cpu-measured | cuda-measured | simulated), ``world_size``
- outcome: ``status`` (ok|oom|error|timeout|skipped), ``reason`` (one line, "" when ok),
  ``log_tail`` (last lines of the worker's output, failures only)
- memory (bytes): ``peak_bytes``, ``breakdown_bytes`` (the six ``CATEGORIES``, summing to
  ``peak_bytes``), ``reserved_peak_bytes`` (cuda only), ``phase_peak_bytes``
  (forward/backward/optimizer), ``step_peak_bytes`` (one per step, warm-up included),
  ``host_peak_rss_bytes`` (worker, whole run), ``load_host_peak_rss_bytes`` (after load),
  ``gpu_memory_bytes`` (capacity of the cell's device profile)
- shape and speed: ``batch_size``, ``seq_len``, ``steps``, ``warmup_steps``,
  ``step_s_median``, ``tokens_per_s`` (tokens of the timed steps / their total time),
  ``flops_per_step`` (sim), ``params_total``, ``params_trainable``
- sim only: ``verdicts`` ({gpu: fits|tight|oom})
- allocator model (every mode, modelled): ``modelled_reserved_peak_bytes`` (the step's
  allocation trace replayed through the CUDA caching-allocator model, bench/allocator.py;
  beside the measured ``reserved_peak_bytes`` in cuda mode), ``allocator_model`` (that
  replay: fragmentation at the peak, segment allocations, per-step peaks, a timeline, the first
  allocation that fails on each GPU; bench/worker/alloctrace.py)
- context: ``versions``, ``machine``, ``started_at``, ``wall_s``, ``details`` (free-form
  facts a technique proved about itself, e.g. the optimizer state dtype)
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

STATUSES = ("ok", "oom", "error", "timeout", "skipped")
MODES = ("cpu", "cuda", "sim")
PROVENANCE = {"cpu": "cpu-measured", "cuda": "cuda-measured", "sim": "simulated"}
CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "temporaries", "other")
PHASES = ("forward", "backward", "optimizer")

FIELDS = (
    "cell", "study", "baseline_cell", "model", "gpu", "techniques", "mode", "provenance", "world_size",
    "status", "reason", "log_tail",
    "peak_bytes", "breakdown_bytes", "reserved_peak_bytes", "phase_peak_bytes",
    "step_peak_bytes", "host_peak_rss_bytes", "load_host_peak_rss_bytes", "gpu_memory_bytes",
    "batch_size", "seq_len", "steps", "warmup_steps", "step_s_median", "tokens_per_s",
    "flops_per_step", "params_total", "params_trainable",
    "verdicts", "versions", "machine", "started_at", "wall_s", "details",
    "modelled_reserved_peak_bytes", "allocator_model",
)


def blank(spec: dict) -> dict:
    """A record for ``spec`` (a cell spec from bench.matrix) with nothing measured yet."""
    rec = {k: None for k in FIELDS}
    rec.update(
        cell=spec["cell"], study=spec.get("study"), baseline_cell=spec.get("baseline_cell"),
        model=spec["model"], gpu=spec["gpu"],
        techniques=list(spec["techniques"]), mode=spec["mode"],
        provenance=PROVENANCE[spec["mode"]], world_size=spec["world_size"],
        batch_size=spec["batch_size"], seq_len=spec["seq_len"], steps=spec["steps"],
        warmup_steps=spec["warmup_steps"], gpu_memory_bytes=spec["gpu_memory_bytes"],
        status="error", reason="", log_tail="", details={},
        breakdown_bytes=None, versions={}, machine={},
    )
    return rec


def failure(spec: dict, status: str, reason: str, log_tail: str = "") -> dict:
    """A record saying the cell did not produce measurements, and why."""
    assert status in STATUSES and status != "ok", status
    rec = blank(spec)
    rec.update(status=status, reason=one_line(reason), log_tail=log_tail)
    return rec


def orphan(cell: str, reason: str) -> dict:
    """An ``error`` record for a cell whose spec could not be had (the matrix no longer loads,
    or no longer has the cell): only the id and the reason are known."""
    rec = {k: None for k in FIELDS}
    rec.update(cell=cell, status="error", reason=one_line(reason), techniques=[], log_tail="", details={},
               versions={}, machine={})
    return rec


def one_line(text: str, limit: int = 500) -> str:
    """The last non-empty line of ``text`` (where exceptions put their message), clipped."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def problems(rec: dict) -> list[str]:
    """What is wrong with ``rec`` against the contract above; empty when it holds."""
    out = [f"missing key {k!r}" for k in FIELDS if k not in rec]
    if out:
        return out
    if rec["status"] not in STATUSES:
        out.append(f"status {rec['status']!r} not in {STATUSES}")
    if rec["mode"] not in MODES:
        out.append(f"mode {rec['mode']!r} not in {MODES}")
    if rec["provenance"] != PROVENANCE.get(rec["mode"]):
        out.append(f"provenance {rec['provenance']!r} does not match mode {rec['mode']!r}")
    if rec["status"] == "ok":
        bd = rec["breakdown_bytes"] or {}
        if set(bd) != set(CATEGORIES):
            out.append(f"breakdown_bytes keys {sorted(bd)} != {sorted(CATEGORIES)}")
        elif rec["peak_bytes"] is None or sum(bd.values()) != rec["peak_bytes"]:
            out.append(f"breakdown sums to {sum(bd.values())}, peak_bytes is {rec['peak_bytes']}")
        for key in ("step_s_median", "tokens_per_s", "host_peak_rss_bytes"):
            if rec[key] is None and rec["mode"] != "sim":
                out.append(f"{key} missing on an ok {rec['mode']} record")
    elif not rec["reason"]:
        out.append(f"status {rec['status']!r} without a reason")
    return out


def write_atomic(path: str | os.PathLike, obj) -> None:
    """Write JSON so that a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(obj, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make shared results unreadable to others
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
