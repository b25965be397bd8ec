"""Shared test helpers: small matrix files written into tmp dirs, pointing at the repo's
model configs and GPU profiles, so tests run the real loader on real files."""
from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
MATRIX_DIR = REPO / "matrix"

# The smallest shape that still runs a real optimizer step with its state allocated.
TINY_SHAPE = {"batch_size": 1, "seq_len": 32, "steps": 1, "warmup_steps": 1, "timeout_s": 300}


def write_matrix(folder: Path, studies: dict, name: str = "matrix.yaml", **top) -> Path:
    """A matrix YAML in ``folder`` using the repo's models/ and gpus.yaml; returns its path."""
    doc = {"models_dir": str(MATRIX_DIR / "models"), "gpus_file": str(MATRIX_DIR / "gpus.yaml"),
           "deepspeed_dir": str(MATRIX_DIR / "deepspeed"),
           "defaults": dict(TINY_SHAPE), **top, "studies": studies}
    path = Path(folder) / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_cells(specs, folder: Path) -> dict:
    """Run cell specs through the launcher, two workers at a time (2 cores); {technique: record}."""
    from concurrent.futures import ThreadPoolExecutor

    from bench.runner import launch
    with ThreadPoolExecutor(2) as pool:
        out = list(pool.map(lambda s: launch.run_cell(s, Path(folder) / f"{s['cell']}.log"), specs))
    return {"+".join(r["techniques"]): r for r in out}


def ok(recs: dict, name: str) -> dict:
    """The ok record of technique ``name``, checked against the record contract."""
    from bench.records import checks
    rec = recs[name]
    assert rec["status"] == "ok", f"{name}: {rec['status']}: {rec['reason']}\n{rec['log_tail']}"
    assert checks.problems(rec) == []
    return rec


def d(recs: dict, name: str) -> dict:
    return ok(recs, name)["details"]


def gpu_runs_and_twins(root: Path, gpu: str) -> tuple[dict, dict]:
    """The real GPU runs stored under ``root`` (cells ``<model>__<gpu>__...``) and their sim twins
    (``<model>__sim__...``), {cell: record} each, every file read through the record gate."""
    from bench.records import results
    rs = results.read(root)
    assert rs.problems == [], rs.problems
    cuda = {c: r for c, r in rs.records.items() if f"__{gpu}__" in c}
    sim = {c: r for c, r in rs.records.items() if "__sim__" in c}
    return cuda, sim
