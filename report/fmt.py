"""Number formatting and row facts shared by every section of the report. Never imports torch.

Every number on the page passes through ``fmt_gib`` / ``fmt_pct`` / ``fmt_count``, so a value
that was not measured is always a dash, never a zero. ``provenance`` says how a row's numbers
were obtained; ``jcol`` reads a JSON column of the long-form table back into Python.
"""
from __future__ import annotations

import json
import math

import pandas as pd

from bench.records import record
from bench.records.noise import CPU_THROUGHPUT_BAND
from report import GIB

DASH = "—"                       # not measured (or not comparable): never shown as 0
MINUS = "\N{MINUS SIGN}"


def missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) or v == ""


def fmt_gib(nbytes, signed: bool = False) -> str:
    if missing(nbytes):
        return DASH
    gib = float(nbytes) / GIB
    mag = abs(gib)
    text = "0" if mag == 0 else "<0.001" if mag < 0.001 else f"{mag:.3f}" if mag < 1 else f"{mag:,.2f}"
    sign = MINUS if gib < 0 else ("+" if signed and gib > 0 else "")
    return sign + text


def fmt_pct(value, signed: bool = False) -> str:
    if missing(value):
        return DASH
    sign = MINUS if value < 0 else ("+" if signed and value > 0 else "")
    return f"{sign}{abs(value):.1f}%"


def fmt_count(value, unit: str = "") -> str:
    """1.23e13 -> '12.3 T'; for FLOPs per step and tokens per second."""
    if missing(value):
        return DASH
    value = float(value)
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:,.3g} {prefix}{unit}".rstrip()
    return f"{value:,.3g} {unit}".rstrip()


def change_pct(value, ref):
    """(value / ref - 1) in percent, or None when either is missing or ref is 0."""
    if missing(value) or missing(ref) or float(ref) == 0:
        return None
    return (float(value) / float(ref) - 1) * 100


def tone(value, higher_is_better: bool = True) -> str:
    """CSS class for a change: 'better', 'worse' or '' (none, or not measured)."""
    if missing(value) or value == 0:
        return ""
    return "better" if (value > 0) == higher_is_better else "worse"


def sort_key(value) -> str:
    """The raw number a sortable table column sorts by ('' sorts last)."""
    return "" if missing(value) else repr(float(value))


def jcol(row, column: str):
    """A JSON column of a table row (details, verdicts, step_peak_bytes...) as Python; None if blank."""
    text = row.get(column) if hasattr(row, "get") else None
    if missing(text):
        return None
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def within_cpu_noise(row, pct) -> bool:
    """True when a cpu-measured timing change of ``pct`` % is inside the measured run-to-run noise
    of CPU throughput (±CPU_THROUGHPUT_BAND, bench/records/noise.py): no evidence of a cost or a gain."""
    return row["mode"] == "cpu" and pct is not None and abs(pct) < CPU_THROUGHPUT_BAND * 100


def noise_text(pct) -> str:
    return f"within noise ({fmt_pct(pct, signed=True)}; ±{CPU_THROUGHPUT_BAND * 100:g}% repeat-run spread)"


def row_gpus(row) -> list[str]:
    """The GPUs a row answers for, as the page's GPU filter reads them (``data-gpus``): the device
    it ran on and, for a sim row, every GPU it is judged against (its verdicts), so a sim row stays
    in view under any GPU it has a verdict for."""
    verdicts = jcol(row, "verdicts")
    return [row["gpu"], *(verdicts if isinstance(verdicts, dict) else {})]


def details(row) -> dict:
    doc = jcol(row, "details")
    return doc if isinstance(doc, dict) else {}


def knobs(row) -> dict:
    """The record's resolved knobs (bench.cells.techniques.DEFAULT_KNOBS keys); {} on a row without them."""
    doc = jcol(row, "knobs")
    return doc if isinstance(doc, dict) else {}


def contended(row) -> bool:
    """Whether the row's steps were timed beside other load (bench/worker/cpuload.py): its
    throughput is not the cell's own."""
    load = details(row).get("timing_load")
    return isinstance(load, dict) and bool(load.get("contended"))


def analytic_note(row) -> str:
    """The record's statement that part of its numbers are worked out, not simulated ('' if none)."""
    note = details(row).get("zero_partitioning")
    return note if isinstance(note, str) and note.lower().startswith("analytic") else ""


def provenance(row) -> str:
    """How the row's numbers were obtained: cpu-measured, cuda-measured, simulated, or
    'simulated + analytic' where the record says its sharding was worked out by formula."""
    base = row["provenance"] or record.PROVENANCE.get(row["mode"], DASH)
    return f"{base} + analytic" if analytic_note(row) else base


def gib(nbytes) -> float | None:
    return None if missing(nbytes) else float(nbytes) / GIB


SHORT_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "uint8": "uint8", "int8": "int8",
                "float8_e4m3fn": "fp8"}


def _dtype_list(values) -> str:
    vals = [SHORT_DTYPES.get(str(v), str(v)) for v in values or []]
    return "+".join(dict.fromkeys(vals)) or "none"


def dtypes_text(row) -> str:
    """'weights bf16 · grads fp32 · optimizer fp32' from the record's details.dtypes (the dtypes
    of the tensors it holds); a dash when the record does not say."""
    d = details(row).get("dtypes")
    if not isinstance(d, dict):
        states = details(row).get("optimizer_state_dtypes")
        return f"optimizer {_dtype_list(states)}" if isinstance(states, list) and states else DASH
    weights = _dtype_list(d.get("weights"))
    if d.get("quantized_weights"):
        weights += f" (quantized {_dtype_list(d['quantized_weights'])})"
    return f"weights {weights} · grads {_dtype_list(d.get('gradients'))} · optimizer {_dtype_list(d.get('optimizer_state'))}"
