"""The run record: one JSON object per cell, whatever happened to it.

Torch-free on purpose: the launcher, the Snakefile, the table and the report import this
module, and none of them may pay for (or depend on) a torch import.

Contract (every key is always present; a number that was not measured is ``None``):

- identity: ``cell``, ``study``, ``baseline_cell`` (the cell this one compares against),
  ``model``, ``gpu``, ``techniques`` (list), ``knobs`` (what the techniques resolve to:
  bench.spec.techniques.DEFAULT_KNOBS with the cell's settings), ``mode`` (cpu|cuda|sim),
  ``provenance`` (cpu-measured | cuda-measured | simulated), ``world_size``
- outcome: ``status`` (ok|oom|error|timeout|skipped), ``reason`` (one line, "" when ok),
  ``log_tail`` (last lines of the worker's output, failures only)
- memory (bytes): ``peak_bytes``, ``breakdown_bytes`` (the ``CATEGORIES``, summing to
  ``peak_bytes``; ``kv_cache`` may be absent in records older than it), ``reserved_peak_bytes``
  (cuda only), ``phase_peak_bytes`` (the ``PHASES`` of a training step; ``INFERENCE_PHASES``
  for generation; None for an inference engine's plan), ``step_peak_bytes`` (one per step, warm-up included),
  ``host_peak_rss_bytes`` (worker, whole run), ``load_host_peak_rss_bytes`` (after load),
  ``gpu_memory_bytes`` (capacity of the cell's device profile; cpu and cuda),
  ``verdict_gpu_memory_bytes`` ({gpu: capacity} of every GPU a sim cell is judged against;
  {} in cpu and cuda)
- shape and speed: ``batch_size``, ``seq_len``, ``steps``, ``warmup_steps``,
  ``step_s_median``, ``tokens_per_s`` (tokens of the timed steps / their total time),
  ``flops_per_step`` (sim), ``params_total``, ``params_trainable``
- sim only: ``verdicts`` ({gpu: fits|tight|oom}, one per ``verdict_gpu_memory_bytes`` entry)
- allocator model (every mode, modelled): ``modelled_reserved_peak_bytes`` (the step's
  allocation trace replayed through the CUDA caching-allocator model, bench/estimate/allocator.py;
  beside the measured ``reserved_peak_bytes`` in cuda mode), ``allocator_model`` (that
  replay: fragmentation at the peak, segment allocations, per-step peaks, a timeline, the first
  allocation that fails on each GPU; bench/worker/alloctrace.py)
- context: ``versions``, ``machine``, ``started_at``, ``wall_s``, ``details`` (free-form
  facts a technique proved about itself, e.g. the optimizer state dtype; the keys the report
  reads are ``REPORT_DETAILS``, with the records that must carry them)

- version: ``record_version`` (``RECORD_VERSION``; absent in records older than version 2,
  which read as version 1). From version 2 an ok training record carries its loss:
  ``details.final_loss`` (the last step's loss, a finite number; ``None`` in sim, where fake
  tensors carry no values, with ``details.loss_check`` saying what stands in) and
  ``details.losses`` (one per step). In every version, an ok record whose loss is not finite
  breaks the contract.

``problems(rec)`` checks all of this. ``gate(rec, spec)`` is the one gate every reader of a
record goes through (the table, the CLI, the fits search and collector, the comparison page):
the contract, and, given the cell spec the reader answers for, the inputs (``inputs_problems``:
the same input digests, knobs, shape and capacities). A record that fails it never shows as
ok and no answer is built from it.
"""
from __future__ import annotations

import json
import math

from bench.spec import techniques

RECORD_VERSION = 2  # 2: the loss is part of an ok training record (issue 25); 1: records without the key

STATUSES = ("ok", "oom", "error", "timeout", "skipped")
MODES = ("cpu", "cuda", "sim")
PROVENANCE = {"cpu": "cpu-measured", "cuda": "cuda-measured", "sim": "simulated"}
CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "temporaries", "other", "kv_cache")
MODEL_STATES = CATEGORIES[:3]   # what ZeRO/FSDP shard: parameters, gradients, optimizer state
PHASES = ("forward", "backward", "optimizer")
VERDICTS = ("fits", "tight", "oom")
# Added for generation, additively: ``kv_cache`` is the K/V cache of generation (a training step
# has none: records written before the category existed lack the key, and it reads as 0 there).
# Generation records its own phases in ``phase_peak_bytes``; a training record has none of
# them, a generation record none of PHASES (not measured: absent, not 0).
LATER_CATEGORIES = ("kv_cache",)
INFERENCE_PHASES = ("prefill", "decode")

FIELDS = (
    "cell", "study", "baseline_cell", "model", "gpu", "techniques", "knobs", "mode", "provenance",
    "world_size", "status", "reason", "log_tail",
    "peak_bytes", "breakdown_bytes", "reserved_peak_bytes", "phase_peak_bytes",
    "step_peak_bytes", "host_peak_rss_bytes", "load_host_peak_rss_bytes", "gpu_memory_bytes",
    "verdict_gpu_memory_bytes", "inputs_sha256",
    "batch_size", "seq_len", "steps", "warmup_steps", "step_s_median", "tokens_per_s",
    "flops_per_step", "params_total", "params_trainable",
    "verdicts", "versions", "machine", "started_at", "wall_s", "details",
    "modelled_reserved_peak_bytes", "allocator_model",
)
# Fields added after records were first kept: present in every new record, absent in older ones.
LATER_FIELDS = ("record_version",)
# The fields a record takes from its cell spec (blank() sets them before anything runs).
SPEC_FIELDS = ("cell", "study", "baseline_cell", "model", "gpu", "techniques", "knobs", "mode",
               "provenance", "world_size", "batch_size", "seq_len", "steps", "warmup_steps",
               "gpu_memory_bytes", "verdict_gpu_memory_bytes", "inputs_sha256")
SHAPE_FIELDS = ("world_size", "batch_size", "seq_len", "steps", "warmup_steps")
BYTE_FIELDS = ("peak_bytes", "reserved_peak_bytes", "host_peak_rss_bytes", "load_host_peak_rss_bytes",
               "params_total", "params_trainable")
NUMBER_FIELDS = ("step_s_median", "tokens_per_s", "flops_per_step", "wall_s")

# The ``details`` keys the report reads: {key: (type, which records must carry it, what it is)}.
# Any record that has one must have it in this type; the records named must have it.
NUMBER = (int, float)  # a measured ratio (bytes per token) may be fractional
REPORT_DETAILS = {
    "optimizer_state_dtypes": (list, "ok", "dtypes of the optimizer state (claims: Adam is 2x fp16)"),
    "verdict_rule": (str, "sim ok", "the rule the verdicts follow (page notes)"),
    "verdict_reserve_bytes": (int, "sim ok", "bytes the verdict adds to the peak (page notes)"),
    "verdict_notes": (dict, "sim ok", "{gpu: caveat} of the verdicts (page notes)"),
    "peers": (list, "sim ok", "DeepSpeed's and accelerate's estimates beside ours (peer table)"),
    "zero_partitioning": (str, "sim ok sharded", "says the sharding was worked out analytically"),
    "ranks": (list, "measured ok multi-rank", "each rank's peak (claims: per-GPU peak under ZeRO-3)"),
    "device_name": (str, "cuda ok", "the physical GPU the cell ran on (summary group title)"),
    "vllm": (dict, "sim ok vllm", "the engine's memory plan per GPU (pipeline-stage section, its claim)"),
    "new_tokens": (int, "ok generate", "tokens generated after the prompt (stage section)"),
    "kv_bytes_per_token": (NUMBER, "ok generate", "KV cache bytes per token (stage section)"),
    "timing_load": (dict, "measured ok train", "CPU time other processes took while the steps were timed "
                    "(summary: throughput marked when contended)"),
    "published": (dict, "optional", "a published measurement of the same setting, beside ours (published table)"),
    "dtypes": (dict, "optional", "{weights, gradients, optimizer_state, quantized_weights: [dtype]} "
               "(every row of the lookup, effects and summary tables)"),
    "speed_model": (dict, "sim ok", "{gpu: the speed model's estimate: step_s, tokens_per_s, parts, "
                    "efficiency, calibration, how} for every GPU the cell is judged against (bench/estimate/speedmodel.py; "
                    "lookup: ranking and estimated speed; effects: overhead)"),
}
# details keys the report does not read but the contract checks: the speed model's input
SPEED_DETAILS = {
    "step_cost": (dict, "sim ok", "what the simulated step costs a GPU, speed_model's input: FLOPs per dtype, "
                  "bytes moved, NF4 dequantization, recomputation, communication (bench/worker/sim/stepcost.py)"),
}
STEP_COST_KEYS = ("flops_by_dtype", "bytes_moved", "nf4_dequant_bytes", "recompute_flops",
                  "comm_bytes_per_rank", "tokens_per_step", "world_size", "how")
ESTIMATE_KEYS = ("step_s", "tokens_per_s", "provenance", "how")


def _workload(rec: dict) -> str:
    return (rec["knobs"] or {}).get("workload") or "train"


_MUST = {
    "ok": lambda r: _workload(r) == "train",
    "sim ok": lambda r: r["mode"] == "sim" and _workload(r) == "train",
    "sim ok vllm": lambda r: r["mode"] == "sim" and _workload(r) == "vllm",
    "ok generate": lambda r: _workload(r) == "generate",
    "optional": lambda r: False,
    "measured ok train": lambda r: r["mode"] != "sim" and _workload(r) == "train",
    "sim ok sharded": lambda r: r["mode"] == "sim" and bool(r["knobs"].get("dist")),
    "measured ok multi-rank": lambda r: r["mode"] != "sim" and r["world_size"] > 1,
    "cuda ok": lambda r: r["mode"] == "cuda",
}


def blank(spec: dict) -> dict:
    """A record for ``spec`` (a cell spec from bench.spec.matrix) with nothing measured yet."""
    rec = {k: None for k in FIELDS}
    rec["record_version"] = RECORD_VERSION
    rec.update(
        cell=spec["cell"], study=spec.get("study"), baseline_cell=spec.get("baseline_cell"),
        model=spec["model"], gpu=spec["gpu"],
        techniques=list(spec["techniques"]), knobs=dict(spec["knobs"]), mode=spec["mode"],
        provenance=PROVENANCE[spec["mode"]], world_size=spec["world_size"],
        batch_size=spec["batch_size"], seq_len=spec["seq_len"], steps=spec["steps"],
        warmup_steps=spec["warmup_steps"], gpu_memory_bytes=spec["gpu_memory_bytes"],
        verdict_gpu_memory_bytes={g: p["memory_bytes"] for g, p in spec["verdict_gpus"].items()},
        inputs_sha256=dict(spec.get("inputs_sha256") or {}),
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
               versions={}, machine={}, record_version=RECORD_VERSION)
    return rec


def one_line(text: str, limit: int = 500) -> str:
    """The last non-empty line of ``text`` (where exceptions put their message), clipped."""
    lines = [ln.strip() for ln in str(text).strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def problems(rec) -> list[str]:
    """What is wrong with ``rec`` against the contract above; empty when it holds.
    Never raises, whatever JSON it is given (a corrupt file must become a reason, not a crash)."""
    if not isinstance(rec, dict):
        return [f"a record is a JSON object, not {type(rec).__name__}"]
    out = [f"missing key {k!r}" for k in FIELDS if k not in rec]
    if out:
        return out
    out = _identity_problems(rec) + _version_problems(rec)
    if not _readable(rec):  # the checks below read mode, knobs, the shape and the status
        return out
    out += _number_problems(rec)
    if rec["status"] == "ok":
        out += _ok_problems(rec) + _loss_problems(rec)
    elif not rec["reason"]:
        out.append(f"status {rec['status']!r} without a reason")
    return out + _details_problems(rec)


def _readable(rec: dict) -> bool:
    knobs = rec["knobs"]
    return (rec["mode"] in MODES and rec["status"] in STATUSES and isinstance(knobs, dict)
            and set(knobs) == set(techniques.DEFAULT_KNOBS) and all(_count(rec[k]) for k in SHAPE_FIELDS))


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _identity_problems(rec: dict) -> list[str]:
    out = []
    for key in ("cell", "model", "gpu"):
        if not isinstance(rec[key], str) or not rec[key]:
            out.append(f"{key} {rec[key]!r} is not a name")
    techs = rec["techniques"]
    if not isinstance(techs, list) or not techs or not all(isinstance(t, str) and t for t in techs):
        out.append(f"techniques {techs!r} is not a list of names")
    if rec["status"] not in STATUSES:
        out.append(f"status {rec['status']!r} not in {STATUSES}")
    if rec["mode"] not in MODES:
        out.append(f"mode {rec['mode']!r} not in {MODES}")
    elif rec["provenance"] != PROVENANCE[rec["mode"]]:
        out.append(f"provenance {rec['provenance']!r} does not match mode {rec['mode']!r}")
    knobs = rec["knobs"]
    if not isinstance(knobs, dict) or set(knobs) != set(techniques.DEFAULT_KNOBS):
        got = sorted(knobs) if isinstance(knobs, dict) else knobs
        out.append(f"knobs {got!r} are not the catalogue's knobs {sorted(techniques.DEFAULT_KNOBS)}")
    for key in SHAPE_FIELDS:
        if not _count(rec[key]) or rec[key] < 1:
            out.append(f"{key} {rec[key]!r} is not a count of at least 1")
    if out:
        return out
    for key in ("world_size", "batch_size", "seq_len"):  # the knobs must say what the record ran
        if knobs[key] is not None and knobs[key] != rec[key]:
            out.append(f"knobs say {key} {knobs[key]}, the record ran {rec[key]}")
    return out + _capacity_problems(rec)


def _capacity_problems(rec: dict) -> list[str]:
    out, cap, caps = [], rec["gpu_memory_bytes"], rec["verdict_gpu_memory_bytes"]
    if rec["mode"] != "sim" and (not _count(cap) or cap < 1):
        out.append(f"gpu_memory_bytes {cap!r} is not the capacity of the {rec['mode']} device")
    if not isinstance(caps, dict) or not all(_count(v) and v > 0 for v in caps.values()):
        out.append(f"verdict_gpu_memory_bytes {caps!r} is not {{gpu: bytes}}")
    elif rec["mode"] == "sim" and not caps:
        out.append("verdict_gpu_memory_bytes is empty: a sim cell is judged against at least one GPU")
    return out


def _number_problems(rec: dict) -> list[str]:
    out = [f"{k} {rec[k]!r} is not a byte count" for k in BYTE_FIELDS
           if rec[k] is not None and (not _count(rec[k]) or rec[k] < 0)]
    out += [f"{k} {rec[k]!r} is not a number" for k in NUMBER_FIELDS
            if rec[k] is not None and (isinstance(rec[k], bool) or not isinstance(rec[k], (int, float)))]
    steps = rec["step_peak_bytes"]
    if steps is not None and not (isinstance(steps, list) and all(_count(b) or b is None for b in steps)):
        out.append(f"step_peak_bytes {steps!r} is not a list of byte counts")
    return out


def _ok_problems(rec: dict) -> list[str]:
    out = []
    bd = rec["breakdown_bytes"]
    if isinstance(bd, dict):
        bd = {**dict.fromkeys(LATER_CATEGORIES, 0), **bd}
    if not isinstance(bd, dict) or set(bd) != set(CATEGORIES):
        out.append(f"breakdown_bytes keys {sorted(bd) if isinstance(bd, dict) else bd!r} != {sorted(CATEGORIES)}")
    elif not all(_count(v) and v >= 0 for v in bd.values()):
        out.append(f"breakdown_bytes {bd!r} holds something other than byte counts")
    elif rec["peak_bytes"] is None or sum(bd.values()) != rec["peak_bytes"]:
        out.append(f"breakdown sums to {sum(bd.values())}, peak_bytes is {rec['peak_bytes']}")
    phases, want = rec["phase_peak_bytes"], _phases_of(rec)
    if want is None:
        if phases is not None:
            out.append(f"phase_peak_bytes {phases!r} on a record of a workload without phases")
    elif not isinstance(phases, dict) or set(phases) != set(want) or not all(_count(v) for v in phases.values()):
        out.append(f"phase_peak_bytes {phases!r} is not {{phase: bytes}} for {want}")
    needed = ("params_total", "params_trainable") + (() if rec["mode"] == "sim" else
                                                     ("step_s_median", "tokens_per_s", "host_peak_rss_bytes"))
    out += [f"{k} missing on an ok {rec['mode']} record" for k in needed if rec[k] is None]
    if rec["mode"] == "sim":
        verdicts, caps = rec["verdicts"], rec["verdict_gpu_memory_bytes"]
        if not isinstance(verdicts, dict) or not verdicts or not set(verdicts.values()) <= set(VERDICTS):
            out.append(f"verdicts {verdicts!r} is not {{gpu: {'|'.join(VERDICTS)}}}: an ok sim record has verdicts")
        elif isinstance(caps, dict) and set(verdicts) != set(caps):
            out.append(f"verdicts for {sorted(verdicts)} but capacities for {sorted(caps)}")
    return out


def _phases_of(rec: dict):
    """The phases an ok record of this workload measures (None: an engine's plan has none)."""
    workload = (rec["knobs"] or {}).get("workload", "train")
    return {"train": PHASES, "generate": INFERENCE_PHASES}.get(workload)


def _details_problems(rec: dict) -> list[str]:
    details = rec["details"]
    if not isinstance(details, dict):
        return [f"details {details!r} is not an object"]
    out = []
    for key, (kind, who, _what) in (REPORT_DETAILS | SPEED_DETAILS).items():
        value = details.get(key)
        if value is None:
            if rec["status"] == "ok" and _MUST[who](rec):
                out.append(f"details.{key} missing on a record of kind {who!r}")
        elif not isinstance(value, kind) or (kind in (int, NUMBER) and isinstance(value, bool)):
            name = "number" if kind is NUMBER else kind.__name__
            out.append(f"details.{key} is {type(value).__name__}, the report reads a {name}")
        elif kind is list and key in ("peers", "ranks") and not all(isinstance(x, dict) for x in value):
            out.append(f"details.{key} holds something other than objects")
    out += _speed_problems(details)
    states = details.get("model_state_bytes")
    if rec["status"] == "ok" and isinstance(states, int) and states <= 0 and rec.get("params_total"):
        out.append(f"details.model_state_bytes is {states}: a model with {rec['params_total']} parameters "
                   "holds weights at every phase")
    return out


def _speed_problems(details: dict) -> list[str]:
    """details.step_cost carries its keys; each details.speed_model entry is a modelled
    estimate (a number or None for step_s, with its why)."""
    out = []
    cost = details.get("step_cost")
    if isinstance(cost, dict):
        out += [f"details.step_cost lacks {k}" for k in STEP_COST_KEYS if k not in cost]
    model = details.get("speed_model")
    for gpu, est in (model.items() if isinstance(model, dict) else ()):
        if not isinstance(est, dict) or any(k not in est for k in ESTIMATE_KEYS):
            out.append(f"details.speed_model.{gpu} lacks one of {', '.join(ESTIMATE_KEYS)}")
        elif est["provenance"] != "modelled":
            out.append(f"details.speed_model.{gpu} is {est['provenance']!r}, not 'modelled'")
        elif est["step_s"] is None and not est.get("why"):
            out.append(f"details.speed_model.{gpu} has no step_s and does not say why")
        elif est["step_s"] is not None and (isinstance(est["step_s"], bool) or not isinstance(est["step_s"], NUMBER)
                                            or est["step_s"] <= 0):
            out.append(f"details.speed_model.{gpu}.step_s {est['step_s']!r} is not a positive number")
    return out


def version(rec: dict) -> int:
    """The record's contract version (a record without ``record_version`` is version 1)."""
    return rec.get("record_version", 1)


def _version_problems(rec: dict) -> list[str]:
    v = version(rec)
    if not _count(v) or not 1 <= v <= RECORD_VERSION:
        return [f"record_version {v!r} is not a version this code reads (1 to {RECORD_VERSION})"]
    return []


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _loss_problems(rec: dict) -> list[str]:
    """An ok record's loss: finite wherever it is given (every version); present on a training
    record from version 2 (sim: None, and details.loss_check says what stands in)."""
    details = rec["details"]
    if not isinstance(details, dict):
        return []
    out = []
    losses = details.get("losses")
    if losses is not None and not (isinstance(losses, list) and all(x is None or _finite(x) for x in losses)):
        out.append(f"details.losses {losses!r} holds a loss that is not a finite number: the step did not train")
    if "final_loss" not in details:
        if version(rec) >= 2 and _workload(rec) == "train":
            out.append("details.final_loss missing on an ok training record (record version 2 carries its loss)")
        return out
    loss = details["final_loss"]
    if loss is None:
        if rec["mode"] != "sim":
            out.append(f"details.final_loss is None on an ok {rec['mode']} record: the loss was measured")
        elif not isinstance(details.get("loss_check"), str) or not details["loss_check"]:
            out.append("details.final_loss is None and details.loss_check does not say what stands in")
    elif not _finite(loss):
        out.append(f"details.final_loss {loss!r} is not a finite number: the step did not train")
    return out


# The spec fields a record must share with the spec a reader answers for (who ran it in which
# study is not part of what was measured).
INPUT_FIELDS = tuple(k for k in SPEC_FIELDS if k not in ("study", "baseline_cell"))


def inputs_problems(rec: dict, spec: dict) -> list[str]:
    """How ``rec`` was made from other inputs than ``spec`` (a cell spec from bench.spec.matrix):
    its input digests, knobs, shape or capacities differ. A record without input digests
    matches nothing. Empty when it answers for ``spec``."""
    want = blank(spec)
    have = rec.get("inputs_sha256")
    if not isinstance(have, dict) or (not have and want["inputs_sha256"]):
        return [f"inputs_sha256 {have!r} names no inputs: what the record was made from is unknown"]
    out = []
    for k in INPUT_FIELDS:
        if rec.get(k) == want[k]:
            continue
        if k == "inputs_sha256":
            changed = sorted(x for x in set(have) | set(want[k]) if have.get(x) != want[k].get(x))
            out.append(f"made from other inputs than the matrix's now (changed: {', '.join(changed)}): stale, rerun it")
        else:
            out.append(f"{k} is {json.dumps(rec.get(k), sort_keys=True, default=str)}, the matrix says "
                       f"{json.dumps(want[k], sort_keys=True, default=str)}")
    return out


def gate(rec, spec: dict | None = None) -> list[str]:
    """The one check before any use of a record: the contract (``problems``) and, given the cell
    spec the reader answers for, the inputs (``inputs_problems``). Empty: the record may be
    used; otherwise each reason it may not. Never raises."""
    out = problems(rec)
    if out or spec is None:
        return out
    try:
        return inputs_problems(rec, spec)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        return [f"the cell spec it is checked against is not a cell spec ({type(exc).__name__}: {exc})"]
