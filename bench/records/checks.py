"""How a record is checked against its contract (bench/records/record.py): ``problems(rec)``,
what is wrong with one record; ``inputs_problems(rec, spec)``, whether it was made from the
spec's inputs; ``gate(rec, spec)``, the one gate every reader (the fit CLI, the fits search,
the table, the results reader) passes a record through before it trusts it. Never raises on
bad JSON: a corrupt file becomes a reason. An ok sim record must also agree with itself: its
verdicts and its need re-derived from its own fields (bench/records/agreement.py). Torch-free.
"""
from __future__ import annotations

import json
import math

from bench.records import agreement
from bench.records.record import (BYTE_FIELDS, CATEGORIES, ESTIMATE_KEYS, FIELDS, INFERENCE_PHASES, LATER_CATEGORIES,
                                  MODES, NUMBER, NUMBER_FIELDS, PHASES, PROVENANCE, RECORD_VERSION, REPORT_DETAILS,
                                  SHAPE_FIELDS, SPEC_FIELDS, SPEED_DETAILS, STATUSES, STEP_COST_KEYS, VERDICTS, blank,
                                  version)
from bench.cells import techniques


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
    "measured ok multi-rank": lambda r: (r["mode"] != "sim" and r["world_size"] > 1
                                         and not (r["details"] or {}).get("rank_program")),  # rank 0 alone
    "cuda ok": lambda r: r["mode"] == "cuda",
}


def problems(rec) -> list[str]:
    """What is wrong with ``rec`` against the record's contract (bench/records/record.py); empty when it holds.
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
    if rec["status"] == "ok":  # an ok record of the right shape must also agree with itself
        out += _ok_problems(rec) + _loss_problems(rec) or agreement.disagreements(rec)
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
    program = details.get("rank_program")
    if (rec["mode"] != "sim" and isinstance(program, dict) and program.get("process_group") == "fake"
            and isinstance(program.get("loss"), str) and program["loss"]):
        return out  # one rank alone over the fake group: its weights are no model's, and the record says its loss is not
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
    """How ``rec`` was made from other inputs than ``spec`` (a cell spec from bench.cells.matrix):
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
