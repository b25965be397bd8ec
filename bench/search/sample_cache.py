"""The fits search's sample simulations, kept across ``ft-membench fit`` questions.

A search (bench/search/fits.py) simulates a few shapes of one model x technique and reads from each
only its allocation trace and modelled reserved peak, neither of which depends on the GPU
asked about: the GPUs enter afterwards, when the trace's peaks are set against each card's
capacity (the search itself replays interpolated traces with no GPU at all). So a question
about a second GPU needs no new simulation: ``SampleCache`` answers a shape it has seen from
disk and passes the rest to the simulator.

Key: the shape's spec without its GPU profiles (``verdict_gpus``, the ``gpus`` input digest),
its batch and length included, with the library versions and the engine's code digest
(``versions``: bench/records/reuse.versions): other code or other libraries simulate afresh. Stored:
``<folder>/<key>.json`` holding the status, the modelled reserved peak and the trace (written
through bench/records/atomic.py); an unreadable or foreign file is simulated again, never trusted.
Where: ``$FT_MEMBENCH_CACHE/fit-samples`` (default ``results/cache/fit-samples``, the config
check's folder). Torch-free.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from bench.records import atomic
from bench.cells import inputs

ROOT = Path(__file__).resolve().parents[2]
FORMAT = 2  # 2: a sharded cell's load placement kept beside its peak (the per-rank search judges both)


def default_folder() -> Path:
    return Path(os.environ.get("FT_MEMBENCH_CACHE", ROOT / "results" / "cache")) / "fit-samples"


def key(spec: dict, versions: dict) -> str:
    """The digest of what a shape's trace depends on: everything but the GPUs judged against."""
    plain = {k: v for k, v in spec.items() if k not in ("verdict_gpus", "cell", "study", "baseline_cell")}
    plain["inputs_sha256"] = {k: v for k, v in (spec.get("inputs_sha256") or {}).items() if k != "gpus"}
    return inputs.digest({"format": FORMAT, "spec": plain, "versions": versions})


class SampleCache:
    """``run_cell`` / ``run_many`` as bench.search.simpool.SimPool's, answering seen shapes from disk.
    ``hits`` and ``misses`` count the shapes answered each way."""

    def __init__(self, pool, versions: dict, folder: Path | None = None, say=None):
        self.pool, self.versions = pool, versions
        self.folder = Path(folder) if folder else default_folder()
        self.say = say or (lambda msg: None)
        self.hits = self.misses = 0
        self._unwritable = False

    def _path(self, spec: dict) -> Path:
        return self.folder / f"{key(spec, self.versions)}.json"

    def _load(self, spec: dict) -> dict | None:
        try:
            doc = json.loads(self._path(spec).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("key") != key(spec, self.versions) or doc.get("status") != "ok" \
                or not isinstance(doc.get("_trace"), dict) or not isinstance(doc.get("modelled_reserved_peak_bytes"), int):
            return None
        return {"status": "ok", "_trace": doc["_trace"], "modelled_reserved_peak_bytes": doc["modelled_reserved_peak_bytes"],
                "details": {"load_phase": doc.get("load_phase") or {}}, "cached": str(self._path(spec))}

    def _store(self, spec: dict, rec: dict) -> None:
        if rec.get("status") != "ok" or "_trace" not in rec or self._unwritable:
            return
        doc = {"key": key(spec, self.versions), "status": "ok", "shape": [spec["batch_size"], spec["seq_len"]],
               "modelled_reserved_peak_bytes": rec["modelled_reserved_peak_bytes"], "_trace": rec["_trace"]}
        load = (rec.get("details") or {}).get("load_phase") or {}
        chosen = (load.get("placements") or {}).get(load.get("placement"))
        if chosen:  # a ZeRO/FSDP cell: what one GPU holds while loading (bench/search/fits.py judges it too)
            doc["load_phase"] = {"placement": load["placement"],
                                 "placements": {load["placement"]: {"gpu_bytes": chosen.get("gpu_bytes")}}}
        try:
            atomic.write_json(self._path(spec), doc)
        except OSError as exc:   # a cache that cannot be written costs speed, never the answer
            self._unwritable = True
            self.say(f"ft-membench: warning: cannot keep sample simulations in {self.folder}: {exc}")

    def run_cell(self, spec: dict, log_path=None) -> dict:
        return self.run_many([(spec, log_path)])[0]

    def run_many(self, jobs: list[tuple[dict, object]]) -> list[dict]:
        out: list[dict | None] = [self._load(spec) for spec, _ in jobs]
        todo = [i for i, rec in enumerate(out) if rec is None]
        self.hits += len(jobs) - len(todo)
        self.misses += len(todo)
        if todo:
            done = self.pool.run_many([jobs[i] for i in todo])
            for i, rec in zip(todo, done):
                self._store(jobs[i][0], rec)
                out[i] = rec
        return out
