"""Multi-rank cells: where each rank writes its record, and how the launcher merges them.

Torch-free (the launcher imports it). A cpu or cuda cell whose ``world_size`` N is above 1
runs N ranks under torchrun (bench/runner/launch.py). Each rank measures itself (its own tracker,
its own micro-batches: the spec's batch size is per rank) and writes ``RECORD.json.rank<k>``;
``merge`` turns those into the cell's one record:

- ``details["ranks"]``: one entry per rank, ``{rank, status, reason, peak_bytes,
  breakdown_bytes, host_peak_rss_bytes, step_s_median, timed_tokens, timed_s}`` (``status``
  ``None`` for a rank that left no record: killed, or stopped by torchrun after another rank
  failed);
- the cell's ``peak_bytes``, ``breakdown_bytes``, phase and step peaks are those of the rank
  with the largest peak (``details["peak_rank"]``): the rank that decides whether it fits;
- ``tokens_per_s`` = tokens of the timed steps summed over ranks / the slowest rank's timed
  time (the ranks step in lockstep); ``step_s_median`` the slowest rank's median; host RSS
  the largest rank's.

A failed rank makes the cell fail: ``oom`` if any rank ran out of memory, else the first
failing rank's status; a missing rank record gives ``error`` with the launcher's reason.
sim cells are one process whatever their world size (the simulator partitions analytically).
"""
from __future__ import annotations

import json
from pathlib import Path

from bench.records import record

SUMMARY_KEYS = ("peak_bytes", "breakdown_bytes", "host_peak_rss_bytes", "step_s_median")
MAX_KEYS = ("host_peak_rss_bytes", "load_host_peak_rss_bytes", "wall_s")


def multirank(spec: dict) -> bool:
    """Whether ``spec`` runs as several processes (torchrun) rather than one: sim, and a cell that
    runs its rank 0 alone (``one_rank``: bench/worker/onerank.py), are one process."""
    return spec["world_size"] > 1 and spec["mode"] != "sim" and not spec.get("one_rank")


def rank_path(out_path, rank: int) -> Path:
    return Path(f"{out_path}.rank{rank}")


def pid_path(out_path, rank: int) -> Path:
    """Where rank ``rank`` writes its process id (torchrun starts ranks in their own
    sessions, so killing torchrun's process group does not reach them)."""
    return Path(f"{out_path}.rank{rank}.pid")


def collect(out_path, world_size: int) -> list[dict | None]:
    """Each rank's record, or None where a rank left none (or half of one)."""
    out = []
    for k in range(world_size):
        try:
            out.append(json.loads(rank_path(out_path, k).read_text()))
        except (OSError, ValueError):
            out.append(None)
    return out


def summary(rank: int, rec: dict | None) -> dict:
    if rec is None:
        return {"rank": rank, "status": None, "reason": "left no record (killed, or stopped after another rank failed)",
                **dict.fromkeys(SUMMARY_KEYS), "timed_tokens": None, "timed_s": None}
    details = rec.get("details") or {}
    return {"rank": rank, "status": rec["status"], "reason": rec["reason"],
            **{k: rec.get(k) for k in SUMMARY_KEYS},
            "timed_tokens": details.get("timed_tokens"), "timed_s": details.get("timed_s")}


def merge(spec: dict, recs: list[dict | None], launcher_reason: str = "", log_tail: str = "") -> dict:
    """The cell's record from its ranks' records (see the module docstring)."""
    ranks = [summary(k, r) for k, r in enumerate(recs)]
    present = [r for r in recs if r is not None]
    failed = [r for r in present if r["status"] != "ok"]
    if failed:
        worst = next((r for r in failed if r["status"] == "oom"), failed[0])
        rec = dict(worst, details=dict(worst.get("details") or {}))
        rec["reason"] = record.one_line(f"rank {rec['details'].get('rank', '?')}: {worst['reason']}")
    elif len(present) < len(recs) or not present:
        missing = [k for k, r in enumerate(recs) if r is None]
        rec = record.failure(spec, "error", f"rank(s) {missing} left no record: {launcher_reason}", log_tail)
    else:
        rec = _merge_ok(present)
    rec["world_size"] = spec["world_size"]
    rec["details"]["ranks"] = ranks
    return rec


def _merge_ok(recs: list[dict]) -> dict:
    top = max(recs, key=lambda r: r["peak_bytes"])
    rec = dict(top, details=dict(top["details"]))
    rec["details"]["peak_rank"] = rec["details"].pop("rank", recs.index(top))
    for key in MAX_KEYS:
        values = [r[key] for r in recs if r.get(key) is not None]
        rec[key] = max(values) if values else None
    rec["step_s_median"] = max(r["step_s_median"] for r in recs)
    tokens = [r["details"].get("timed_tokens") for r in recs]
    seconds = [r["details"].get("timed_s") for r in recs]
    if None in tokens or None in seconds:
        rec["tokens_per_s"] = None  # a rank did not say what it timed: not measured, not guessed
    else:
        rec["tokens_per_s"] = sum(tokens) / max(seconds)
        rec["details"]["timed_tokens"], rec["details"]["timed_s"] = sum(tokens), max(seconds)
    rec["details"]["timing_load"] = timing_load([r["details"].get("timing_load") for r in recs])
    return rec


def timing_load(loads: list[dict | None]) -> dict | None:
    """The cell's load beside its timed steps: each rank saw its sibling ranks as other load,
    so they are taken back out (bench/worker/cpuload.py); the least any rank saw is kept."""
    if not loads or any(not x or x.get("other_cores") is None or x.get("own_cores") is None for x in loads):
        return None
    own = [x["own_cores"] for x in loads]
    outside = [max(0.0, x["other_cores"] - (sum(own) - x["own_cores"])) for x in loads]
    out = dict(loads[0], own_cores=round(sum(own), 3), other_cores=round(min(outside), 3),
               per_rank_other_cores=[x["other_cores"] for x in loads])
    out["contended"] = out["other_cores"] > out["contended_above_cores"]
    return out
