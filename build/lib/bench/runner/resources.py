"""What each cell's Snakemake job asks its executor for. Torch-free.

The Snakefile's per-cell rule takes its resources from ``CellResources`` (one method per
resource, each a Snakemake resource function of the job's wildcards). The names are
Snakemake's standard resources, so the local executor and executor plugins alike read them
(the SLURM plugin turns ``gpu``/``gpu_model`` into ``--gpus=<model>:<count>``):

- ``gpu``: a cuda cell asks for its world size (torchrun starts one rank per GPU inside
  the job); cpu and sim cells ask for 0.
- ``gpu_model``: a cuda cell's GPU profile, as the cluster names it: ``gpu_models`` maps
  profile names to the cluster's GRES types (Snakemake config ``gpu_models``); unmapped,
  the profile name with ``-`` made ``_`` (SLURM GPU types take ``[A-Za-z0-9_.]``).
  cpu and sim cells name no model (``None`` drops the resource).
- ``cpus_per_task``: cpu cells one core per rank, at least 2 (the measured step uses the
  cores it gets); cuda cells 4 per GPU; sim cells 1.
- ``mem_mb`` (host memory): cpu cells emulate their profile's device in host memory, per
  rank, so each rank may hold up to the profile's capacity plus ~2 GiB of interpreter and
  libraries; cuda cells 32 GiB per GPU (offload cells of big models may need more:
  ``--set-resources cell:mem_mb=...``); sim cells 8 GiB (fake tensors allocate nothing).
- ``runtime`` (minutes): the cell's time limit (already world size x the study's) plus
  10 minutes for start-up and the pytest wrapper.

A sim cell's fits search (the Snakefile's ``fit`` rule, bench/search/fits.py) is a CPU job too: no
GPU, one core and one warm sim worker (``SIM_MB``) per simulation it runs at once, and up to
``FIT_SIMULATIONS`` simulations of the cell's time limit, shared among those workers.
"""
from __future__ import annotations

import math
import re

RANK_OVERHEAD_MB = 2048
HOST_MB_PER_GPU = 32768
SIM_MB = 8192
STARTUP_MIN = 10
# simulations at once per fits search job: one, so that searches run side by side (--cores 2 runs
# two) and keep both cores busy while a search replays its traces on one core between simulations
# (docs/workflow-speed.md: the default run 1212 s with two at a time, 940 s with one and the line fit)
FIT_JOBS = 1
FIT_SIMULATIONS = 12  # 3 lengths x 2 batches, a check per axis, and the replays' slack
SLURM_SAFE = re.compile(r"[^A-Za-z0-9_.]")


def gpu(spec: dict) -> int:
    return spec["world_size"] if spec["mode"] == "cuda" else 0


def gpu_model(spec: dict, gpu_models: dict | None = None) -> str | None:
    if spec["mode"] != "cuda":
        return None
    return (gpu_models or {}).get(spec["gpu"]) or SLURM_SAFE.sub("_", spec["gpu"])


def cpus_per_task(spec: dict) -> int:
    return {"cpu": max(2, spec["world_size"]), "cuda": 4 * spec["world_size"]}.get(spec["mode"], 1)


def mem_mb(spec: dict) -> int:
    if spec["mode"] == "cpu":
        return spec["world_size"] * (math.ceil(spec["gpu_memory_bytes"] / 2**20) + RANK_OVERHEAD_MB)
    return spec["world_size"] * HOST_MB_PER_GPU if spec["mode"] == "cuda" else SIM_MB


def runtime(spec: dict) -> int:
    return math.ceil(spec["timeout_s"] / 60) + STARTUP_MIN


def fit_resources(spec: dict, jobs: int) -> dict:
    """The resources of ``spec``'s fits search, running ``jobs`` simulations at once."""
    if spec["mode"] != "sim":
        raise ValueError(f"{spec['cell']}: only sim cells are searched (mode {spec['mode']})")
    jobs = max(1, jobs)
    return {"gpu": 0, "cpus_per_task": jobs, "mem_mb": jobs * SIM_MB,
            "runtime": math.ceil(FIT_SIMULATIONS * spec["timeout_s"] / 60 / jobs) + STARTUP_MIN}


def resources_of(spec: dict, gpu_models: dict | None = None) -> dict:
    """Every resource of ``spec``'s job, the ones not requested left out."""
    out = {"gpu": gpu(spec), "gpu_model": gpu_model(spec, gpu_models), "cpus_per_task": cpus_per_task(spec),
           "mem_mb": mem_mb(spec), "runtime": runtime(spec)}
    return {k: v for k, v in out.items() if v is not None}


class CellResources:
    """Snakemake resource functions over the matrix's cells: ``resources: gpu=RES.gpu``."""

    def __init__(self, cells: dict, gpu_models: dict | None = None):
        self.cells, self.gpu_models = cells, dict(gpu_models or {})

    def gpu(self, wildcards) -> int:
        return gpu(self.cells[wildcards.cell])

    def gpu_model(self, wildcards) -> str | None:
        return gpu_model(self.cells[wildcards.cell], self.gpu_models)

    def cpus_per_task(self, wildcards) -> int:
        return cpus_per_task(self.cells[wildcards.cell])

    def mem_mb(self, wildcards) -> int:
        return mem_mb(self.cells[wildcards.cell])

    def runtime(self, wildcards) -> int:
        return runtime(self.cells[wildcards.cell])

    def fit(self, name: str, jobs: int):
        """A resource function of the ``fit`` rule: ``resources: mem_mb=RES.fit("mem_mb", 2)``."""
        return lambda wildcards: fit_resources(self.cells[wildcards.cell], jobs)[name]
