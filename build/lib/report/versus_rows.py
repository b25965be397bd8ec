"""The facts of a comparison of two results folders: per-cell rows, the environment
difference, and every reason the comparison is incomplete. Never imports torch.

Tolerances (one place each): bytes and FLOPs exact (a simulated or counted byte is
deterministic; bench.reproduce checks that reruns agree to the byte); throughput within
``bench.records.noise.CPU_THROUGHPUT_BAND`` of OLD on measured cells. Change is pytest-benchmark's
``new / old * 100 - 100`` percent. A cell whose status or any verdict changed has moved,
whatever its numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench.records import identical, noise, record
from bench.records.results import ResultSet

METRICS = ("peak_bytes", *(f"{c}_bytes" for c in record.CATEGORIES), "tokens_per_s", "flops_per_step")
EXACT = tuple(m for m in METRICS if m != "tokens_per_s")
# The facts that make two records the same experiment; absent ones are not checked.
INPUT_FIELDS = ("model", "gpu", "mode", "techniques", "world_size", "batch_size", "seq_len", "steps",
                "warmup_steps", "gpu_memory_bytes", "knobs", "inputs_sha256", "verdict_gpu_memory_bytes")
# From the cell spec beside the record; never its file paths (model_config, ds_config), which
# name the checkout that ran it, not what it ran (inputs_sha256 covers the files' contents).
SPEC_INPUTS = ("knobs", "options", "seed")
GROUP_KEYS = {"group": "study", "study": "study", "model": "model", "gpu": "gpu", "mode": "mode",
              "technique": "technique", "cell": "cell"}


@dataclass
class Row:
    cell: str
    presence: str                     # both | added (NEW only) | removed (OLD only)
    group: str
    old: dict | None
    new: dict | None
    values: dict = field(default_factory=dict)      # metric -> (old, new, change_pct)
    verdict_changes: list = field(default_factory=list)   # (gpu, old, new)
    moved: list = field(default_factory=list)       # why the cell moved beyond tolerance
    inputs_differ: list = field(default_factory=list)


def value(rec: dict | None, metric: str):
    if rec is None:
        return None
    if metric.endswith("_bytes") and metric != "peak_bytes":
        return (rec.get("breakdown_bytes") or {}).get(metric[: -len("_bytes")])
    return rec.get(metric)


def change_pct(old, new):
    """pytest-benchmark's percent change, ``new / old * 100 - 100``; inf from 0; None if unmeasured."""
    if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
        return None
    if old == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return new / old * 100 - 100


def group_of(rec: dict, group_by: str) -> str:
    parts = []
    for key in group_by.split(","):
        name = GROUP_KEYS.get(key.strip())
        if name is None:
            raise ValueError(f"unsupported grouping {key!r}: one of {', '.join(GROUP_KEYS)}")
        parts.append(str("+".join(rec.get("techniques") or []) if name == "technique" else rec.get(name) or ""))
    return " ".join(p for p in parts if p) or "(none)"


def build_row(cell: str, old: dict | None, new: dict | None, group_by: str, band: float) -> Row:
    presence = "both" if old and new else "removed" if old else "added"
    row = Row(cell, presence, group_of(new or old, group_by), old, new)
    for m in METRICS:
        a, b = value(old, m), value(new, m)
        row.values[m] = (a, b, change_pct(a, b))
    if presence != "both":
        return row
    va, vb = old.get("verdicts") or {}, new.get("verdicts") or {}
    row.verdict_changes = [(g, va.get(g, "-"), vb.get(g, "-")) for g in sorted(set(va) | set(vb))
                           if va.get(g) != vb.get(g)]
    if old["status"] != new["status"]:   # its numbers and verdicts are gone or new: the status says it
        why = f": {new['reason']}" if new.get("reason") else ""
        row.moved.append(f"status {old['status']} -> {new['status']}{why}")
        return row
    row.moved += [f"verdict {g}: {a} -> {b}" for g, a, b in row.verdict_changes]
    for m in EXACT:
        a, b, pct = row.values[m]
        if a != b:
            row.moved.append(f"{m} {moved_by(m, a, b, pct)}")
    a, b, pct = row.values["tokens_per_s"]
    if old.get("mode") in identical.MEASURED_MODES and (a is None) != (b is None):
        row.moved.append(f"tokens_per_s {a!r} -> {b!r}")
    elif pct is not None and abs(pct) > band * 100:
        row.moved.append(f"tokens_per_s {_pct(pct)} (band ±{band * 100:.0f}%)")
    return row


def moved_by(metric: str, a, b, pct) -> str:
    """'-512 B (-3.2e-07%)': the exact delta first, so a one-block move never reads as 0%."""
    if pct is None:
        return f"{a!r} -> {b!r}"
    unit = " B" if metric.endswith("_bytes") else ""
    rel = f"{pct:+.2g}%" if math.isfinite(pct) else _pct(pct)
    return f"{b - a:+,}{unit} ({rel})"


def _pct(pct: float) -> str:
    return f"{pct:+.1f}%" if math.isfinite(pct) else f"{'+' if pct > 0 else '-'}inf%"


def inputs_differ(old: dict, new: dict, old_spec: dict | None = None, new_spec: dict | None = None) -> list[str]:
    """Input facts recorded on both sides that disagree (one-sided facts cannot be checked)."""
    out = [f"{k}: {old[k]!r} -> {new[k]!r}" for k in INPUT_FIELDS if k in old and k in new and old[k] != new[k]]
    if old_spec and new_spec:
        out += [f"spec {k}: {old_spec[k]!r} -> {new_spec[k]!r}" for k in SPEC_INPUTS
                if k in old_spec and k in new_spec and old_spec[k] != new_spec[k]]
    return out


def compare(old: ResultSet, new: ResultSet, group_by: str = "group",
            band: float = noise.CPU_THROUGHPUT_BAND) -> tuple[list[Row], list[str]]:
    """Rows for every cell of either side (moved first, then by group and cell) and the list
    of problems that make the comparison incomplete (empty when it is complete)."""
    problems = [f"OLD {p}" for p in old.problems] + [f"NEW {p}" for p in new.problems]
    cells = sorted(set(old.records) | set(new.records))
    rows = [build_row(c, old.records.get(c), new.records.get(c), group_by, band) for c in cells]
    for row in rows:
        if row.presence == "both":
            row.inputs_differ = inputs_differ(row.old, row.new, old.specs.get(row.cell), new.specs.get(row.cell))
            if row.inputs_differ:
                problems.append(f"{row.cell}: not the same experiment on both sides ({'; '.join(row.inputs_differ)})")
    only_old = [r.cell for r in rows if r.presence == "removed"]
    only_new = [r.cell for r in rows if r.presence == "added"]
    if only_old or only_new:
        problems.append(f"the folders hold different cell sets (different matrix versions or a partial run): "
                        f"{len(only_old)} cells only in OLD, {len(only_new)} only in NEW; listed, not compared "
                        f"(--only selects a part both hold)")
    rows.sort(key=lambda r: (not r.moved, r.presence != "both", r.group, r.cell))
    return rows, problems


def environment(rs: ResultSet) -> dict:
    """Versions, machine and commit as found in the set's records and files (every value seen)."""
    def seen(pairs):
        out: dict[str, list] = {}
        for key, val in pairs:
            text = val if isinstance(val, str) else repr(val)
            if text not in out.setdefault(key, []):
                out[key].append(text)
        return {k: ", ".join(v) for k, v in sorted(out.items())}
    recs = rs.records.values()
    commits = [(d.get("commit_info") or {}) for d in rs.docs.values()]
    return {
        "versions": seen((k, v) for r in recs for k, v in (r.get("versions") or {}).items()),
        "machine": seen((k, v) for r in recs for k, v in (r.get("machine") or {}).items()),
        "commit": seen(("commit", f"{c.get('id') or '?'}{' (dirty)' if c.get('dirty') else ''}") for c in commits),
    }


def env_diff(old: ResultSet, new: ResultSet) -> list[tuple[str, str, str, str, bool]]:
    """(section, key, OLD, NEW, changed) for versions, machine and commit; changed first."""
    eo, en = environment(old), environment(new)
    rows = []
    for section in ("versions", "machine", "commit"):
        for key in sorted(set(eo[section]) | set(en[section])):
            a, b = eo[section].get(key, "-"), en[section].get(key, "-")
            rows.append((section, key, a, b, a != b))
    return sorted(rows, key=lambda r: not r[4])
