"""The run record: one JSON object per cell, whatever happened to it.

Torch-free on purpose: the launcher, the Snakefile, the table and the report import this
module, and none of them may pay for (or depend on) a torch import.

Contract (every key is always present; a number that was not measured is ``None``):

- identity: ``cell``, ``study``, ``baseline_cell`` (the cell this one compares against),
  ``model``, ``gpu``, ``techniques`` (list), ``knobs`` (what the techniques resolve to:
  bench.cells.techniques.DEFAULT_KNOBS with the cell's settings), ``mode`` (cpu|cuda|sim),
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



RECORD_VERSION = 2  # 2: the loss is part of an ok training record; 1: records without the key

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
    "blas_workspaces": (dict, "optional", "cuBLAS's workspaces per GPU the verdict adds beside the replay (verdicts.py)"),
    "verdict_notes": (dict, "sim ok", "{gpu: caveat} of the verdicts (page notes)"),
    "peers": (list, "sim ok", "DeepSpeed's and accelerate's estimates beside ours (peer table)"),
    "zero_partitioning": (str, "sim ok sharded", "how the sharding was worked out: per rank, or analytically"),
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


def blank(spec: dict) -> dict:
    """A record for ``spec`` (a cell spec from bench.cells.matrix) with nothing measured yet."""
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


def version(rec: dict) -> int:
    """The record's contract version (a record without ``record_version`` is version 1)."""
    return rec.get("record_version", 1)


