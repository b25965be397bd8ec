"""What "the same result" means when a cell is rerun: every field identical, with the few
exceptions below, each for a stated reason. Torch-free.

- Context, never compared (they describe the run, not the result): ``EXCLUDED``, matched by
  key name at any depth of the record (``details.ranks[].host_peak_rss_bytes`` too).
- Throughput (``THROUGHPUT``) on measured cells: within ``bench.records.noise.CPU_THROUGHPUT_BAND``
  of the reference (relative), the measured run-to-run noise. On sim cells these are null and
  must stay null.
- ``versions``: compared with local build labels dropped (``2.13.0+cpu`` = ``2.13.0+cu128``),
  which is exactly what the lock (bench/records/lock.py) admits; any other version change is a
  difference.
- Everything else, measured bytes, breakdowns, verdicts, FLOPs, details, status and reason,
  must be equal value for value: the JSON of a rerun sim record is byte-identical to the
  reference outside the excluded fields.

A key present on one side only (a record written by an older or newer harness) is a
difference, never a crash.
"""
from __future__ import annotations

from dataclasses import dataclass

from bench.records import noise

EXCLUDED = {
    "started_at": "when the cell ran",
    "wall_s": "the worker's whole life, imports and machine load included; not a result",
    "host_peak_rss_bytes": "host RSS of the worker process: the Python heap, libraries and page cache, "
                           "not the counted training memory; moves by MiBs between runs",
    "load_host_peak_rss_bytes": "host RSS after loading, for the same reason",
    "machine": "hostname, kernel, core count and memory of the machine that ran it: shown by report.versus",
    "log_tail": "a failing worker's last log lines carry pids, temp paths and timestamps; status and reason "
                "are compared",
    "trace_file": "where the allocation trace was written (the results folder of that run); the trace's "
                  "replay, allocator_model, is compared",
    "timing_load": "what else the machine was doing while the steps were timed: context of the throughput",
    "tracked_step_s": "the measured steps' own wall times, slowed by the tracker's Python on every op: context; the "
                      "throughput is timed on untracked steps (bench/worker/train.py)",
}
THROUGHPUT = ("tokens_per_s", "step_s_median", "timed_s")
MEASURED_MODES = ("cpu", "cuda")


@dataclass(frozen=True)
class Difference:
    cell: str
    field: str        # dotted path: peak_bytes, breakdown_bytes.activations, details.ranks[1].peak_bytes
    reference: object
    rerun: object
    note: str = ""

    def __str__(self) -> str:
        note = f"  ({self.note})" if self.note else ""
        return f"{self.cell}: {self.field}: reference {_show(self.reference)} -> rerun {_show(self.rerun)}{note}"


MISSING = type("Missing", (), {"__repr__": lambda self: "<absent>"})()


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def drop_local(version):
    """'2.13.0+cpu' -> '2.13.0'; anything else unchanged."""
    return version.split("+", 1)[0] if isinstance(version, str) else version


def compare(ref: dict, new: dict, band: float = noise.CPU_THROUGHPUT_BAND) -> list[Difference]:
    """Every difference between two records of one cell, by field path."""
    cell = ref.get("cell") or new.get("cell") or "?"
    measured = ref.get("mode") in MEASURED_MODES
    out: list[Difference] = []
    _walk(cell, "", ref, new, measured, band, out)
    return out


def _walk(cell, path, a, b, measured, band, out) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key in EXCLUDED:
                continue
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                side = "reference" if key in a else "rerun"
                out.append(Difference(cell, sub, a.get(key, MISSING), b.get(key, MISSING),
                                      f"present in the {side} only"))
            elif key == "versions" and not path:
                _versions(cell, a[key], b[key], out)
            elif key in THROUGHPUT and measured:
                _throughput(cell, sub, a[key], b[key], band, out)
            else:
                _walk(cell, sub, a[key], b[key], measured, band, out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(cell, f"{path}[{i}]", x, y, measured, band, out)
    elif type(a) is not type(b) or a != b:
        out.append(Difference(cell, path, a, b))


def _versions(cell, a, b, out) -> None:
    a = a if isinstance(a, dict) else {}
    b = b if isinstance(b, dict) else {}
    for name in sorted(set(a) | set(b)):
        if drop_local(a.get(name, MISSING)) != drop_local(b.get(name, MISSING)):
            out.append(Difference(cell, f"versions.{name}", a.get(name, MISSING), b.get(name, MISSING)))


def _throughput(cell, path, a, b, band, out) -> None:
    if a is None and b is None:
        return
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or a == 0:
        out.append(Difference(cell, path, a, b, "not comparable"))
        return
    rel = b / a - 1
    if abs(rel) > band:
        out.append(Difference(cell, path, a, b, f"{rel * 100:+.1f}%, outside the noise band of ±{band * 100:.0f}%"))
