"""Shared test helpers: small matrix files written into tmp dirs, pointing at the repo's
model configs and GPU profiles, so tests run the real loader on real files."""
from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
MATRIX_DIR = REPO / "matrix"

# The smallest shape that still runs a real optimizer step with its state allocated.
# torchtune's Llama-3.2-3B table (study sim-torchtune-3b): the rows sim is not held to, and why, for the
# memory (tests/test_torchtune_fidelity.py) and for the speed factor, never fitted on them
# (tests/test_speed_calibration.py, tests/test_speedcv.py). One table: the same two rows for both.
TORCHTUNE_3B_NOT_HELD = {
    "bf16+adamw-fused+padding": {
        "memory": "the unpacked baseline trains on alpaca's real sample lengths (mostly short); our padded rows draw "
                  "a seeded synthetic length distribution (ours peaks in the optimizer step, on model states, so the "
                  "agreement says little about the lengths)",
        "speed": "the unpacked baseline trains on alpaca's real sample lengths (mostly short, so small kernels and "
                 "per-step overheads dominate); our padded rows are a seeded synthetic length distribution"},
    "qlora+bf16+packing+compile+chunked-ce+gc+act-offload": {
        "memory": "the table's command for this row steps torch AdamW where our qlora steps bitsandbytes' paged 8-bit "
                  "AdamW (0.2 GiB of adapter state apart), and torchtune quantizes with torchao's NF4 (bitsandbytes here)",
        "speed": "the table's command steps torch AdamW where our qlora steps bitsandbytes' paged 8-bit AdamW, and "
                 "torchtune quantizes with torchao's NF4 (bitsandbytes here); printed, not fitted on"},
}

TINY_SHAPE = {"batch_size": 1, "seq_len": 32, "steps": 1, "warmup_steps": 1, "timeout_s": 300}


def write_matrix(folder: Path, studies: dict, name: str = "matrix.yaml", **top) -> Path:
    """A matrix YAML in ``folder`` using the repo's models/ and gpus.yaml; returns its path."""
    doc = {"models_dir": str(MATRIX_DIR / "models"), "gpus_file": str(MATRIX_DIR / "gpus.yaml"),
           "deepspeed_dir": str(MATRIX_DIR / "deepspeed"),
           "defaults": dict(TINY_SHAPE), **top, "studies": studies}
    path = Path(folder) / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


_WARM = None


def warm_pool():
    """This test process's pool of warm cpu servers (tests/warm_cells.py), two (2 cores),
    started on first use from the calling thread and closed when the process ends."""
    global _WARM
    if _WARM is None:
        import atexit

        from tests.warm_cells import CpuPool
        _WARM = CpuPool(jobs=2)
        atexit.register(_WARM.close)
    return _WARM


def launch_all(specs, folder: Path) -> list[dict]:
    """The records of cell specs, in order, two at a time: a cpu cell in fresh forks of a warm
    server, which gives the launcher's record without a fresh interpreter's ~6 s of imports per
    process (tests/test_warm_cells.py holds the two alike); any other cell through the launcher."""
    from concurrent.futures import ThreadPoolExecutor

    from bench.runner import launch
    log = lambda s: Path(folder) / f"{s['cell']}.log"  # noqa: E731
    cpu = [s for s in specs if s["mode"] == "cpu"]
    other = [s for s in specs if s["mode"] != "cpu"]
    done = dict(zip((s["cell"] for s in cpu), warm_pool().run_many([(s, log(s)) for s in cpu]) if cpu else []))
    with ThreadPoolExecutor(2) as pool:
        done.update(zip((s["cell"] for s in other), pool.map(lambda s: launch.run_cell(s, log(s)), other)))
    return [done[s["cell"]] for s in specs]


def run_cells(specs, folder: Path) -> dict:
    """``launch_all``'s records by technique: {technique: record}."""
    return {"+".join(r["techniques"]): r for r in launch_all(specs, folder)}


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


def on_gpu(rec: dict, gpu: str, figure: str = "peak_bytes") -> int:
    """A sim record's allocated (``peak_bytes``) or modelled reserved peak as the GPU's allocator reports it:
    plus cuBLAS's workspaces on ``gpu`` (``details.blas_workspaces``: torch allocates them, no trace holds them)."""
    from bench.estimate.measures import blas_bytes
    return rec[figure] + blas_bytes(rec.get("details") or {}, gpu)


def sim_record(spec: dict) -> dict:
    """A sim cell's record as the engine makes it: the reference's (results/reference/cells), where
    it stands by the fit command's own rule (bench/fit/stored.py ``stored_record``: the record gate
    against this spec, made by this engine code with these library versions), else simulated in
    this process. A simulation is deterministic, so a standing record is the one a new run would
    write (tests/test_reproduce.py reruns one against the reference); an engine change stops the
    reuse, and the test simulates again."""
    from bench.fit.stored import stored_record
    from bench.records import record, reuse
    rec, _ = stored_record(spec, [REPO / "results" / "reference" / "cells" / f"{spec['cell']}.json"],
                           reuse.versions(), resimulate=True)
    if rec is not None:
        return rec
    import bitsandbytes  # noqa: F401  (module constants real, before the fake mode)
    import peft  # noqa: F401

    from bench.worker.sim import simulate
    rec = record.blank(spec)
    rec.update(simulate.run(spec))
    rec.pop("_trace", None)
    rec["status"], rec["reason"] = "ok", ""
    return rec
