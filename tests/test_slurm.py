"""Each cell's job asks for its GPUs: bench/runner/resources.py, and a dry run with the SLURM profile.

    pytest tests/test_slurm.py -q

The dry run (`snakemake -n --profile profiles/slurm`) needs no cluster but does need the
SLURM executor plugin (a dependency of the project): without it that test skips, saying so.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.runner import resources
from bench.cells import matrix

ROOT = Path(__file__).resolve().parent.parent
HAS_SLURM_PLUGIN = importlib.util.find_spec("snakemake_executor_plugin_slurm") is not None
STUDIES = {
    "gpu": {"mode": "cuda", "models": ["tiny-llama"], "gpus": ["h100-80gb", "a100-40gb"],
            "techniques": ["lora", "zero3+w2", "fsdp+w4"]},
    "cpu": {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["zero3+w2"]},
    "sim": {"mode": "sim", "models": ["llama-3.1-8b"], "gpus": ["h100-80gb"], "techniques": ["zero3+w8"]},
}
GPU_MODELS = {"h100-80gb": "h100"}


@pytest.fixture
def cells(matrix_file):
    path = matrix_file(STUDIES)
    return path, matrix.load(path)


def test_cuda_cells_ask_for_a_gpu_per_rank_of_their_profile(cells):
    _, specs = cells
    w4 = resources.resources_of(specs["tiny-llama__a100-40gb__fsdp+w4"], GPU_MODELS)
    assert w4["gpu"] == 4 and w4["gpu_model"] == "a100_40gb" and w4["cpus_per_task"] == 16
    w2 = resources.resources_of(specs["tiny-llama__h100-80gb__zero3+w2"], GPU_MODELS)
    assert w2["gpu"] == 2 and w2["gpu_model"] == "h100"  # the cluster's name, from config gpu_models
    assert resources.resources_of(specs["tiny-llama__h100-80gb__lora"])["gpu_model"] == "h100_80gb"


def test_cpu_and_sim_cells_ask_for_no_gpu(cells):
    _, specs = cells
    cpu = resources.resources_of(specs["tiny-llama__cpu__zero3+w2"])
    sim = resources.resources_of(specs["llama-3.1-8b__sim__zero3+w8"])
    assert cpu["gpu"] == sim["gpu"] == 0 and "gpu_model" not in cpu and "gpu_model" not in sim
    # two ranks, each up to the 24 GiB profile plus 2 GiB of libraries
    assert cpu["mem_mb"] == 2 * (24 * 1024 + 2048)
    assert cpu["runtime"] == specs["tiny-llama__cpu__zero3+w2"]["timeout_s"] // 60 + 10


def dry_run_resources(stdout: str) -> dict[str, dict[str, dict[str, str]]]:
    """{rule: {cell: {resource: value}}} from the job listing of `snakemake -n`."""
    out, rule, cell = {}, None, None
    for line in stdout.splitlines():
        m = re.match(r"(?:local)?rule (\w+):", line)
        if m:
            rule, cell = m.group(1), None
        m = re.match(r"\s+wildcards: cell=(\S+)", line)
        if m:
            cell = m.group(1)
        m = re.match(r"\s+resources: (.*)", line)
        if m and cell:
            out.setdefault(rule, {})[cell] = dict(item.split("=", 1) for item in m.group(1).split(", "))
            cell = None
    return out


def test_the_dry_run_parser_keeps_each_rules_jobs_apart():
    listing = ("rule cell:\n    wildcards: cell=a__sim__x\n    resources: gpu=0, mem_mb=8192\n\n"
               "rule fit:\n    wildcards: cell=a__sim__x\n    resources: gpu=0, mem_mb=16384\n")
    jobs = dry_run_resources(listing)
    assert jobs["cell"]["a__sim__x"]["mem_mb"] == "8192" and jobs["fit"]["a__sim__x"]["mem_mb"] == "16384"


def test_a_fits_search_asks_for_no_gpu_and_a_worker_per_job(cells):
    _, specs = cells
    spec = specs["llama-3.1-8b__sim__zero3+w8"]
    fit = resources.fit_resources(spec, 2)
    assert fit["gpu"] == 0 and fit["cpus_per_task"] == 2 and fit["mem_mb"] == 2 * resources.SIM_MB
    assert fit["runtime"] > resources.runtime(spec)
    with pytest.raises(ValueError, match="only sim cells"):
        resources.fit_resources(specs["tiny-llama__cpu__zero3+w2"], 2)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_SLURM_PLUGIN, reason="snakemake-executor-plugin-slurm is not installed "
                                                  "(pip install -e .)")
def test_dry_run_with_the_slurm_profile_requests_gpus_per_job(cells, tmp_path):
    path, specs = cells
    cmd = [sys.executable, "-m", "snakemake", "-n", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path),
           "--profile", str(ROOT / "profiles" / "slurm"),
           "--config", f"matrix={path}", "gpu_models={h100-80gb: h100}", "--", "all"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    listing = dry_run_resources(run.stdout)
    jobs = listing["cell"]
    assert set(jobs) == set(specs)
    sims = {c for c, s in specs.items() if s["mode"] == "sim"}
    assert set(listing["fit"]) == sims  # each sim cell's fits search is a job of its own
    for cell in sims:
        want = resources.fit_resources(specs[cell], resources.FIT_JOBS)  # the Snakefile's
        assert {k: listing["fit"][cell].get(k) for k in want} == {k: str(v) for k, v in want.items()}, cell
    for cell, spec in specs.items():
        want = resources.resources_of(spec, GPU_MODELS)
        got = jobs[cell]
        assert {k: got.get(k) for k in want} == {k: str(v) for k, v in want.items()}, cell
        if spec["mode"] == "cuda":
            assert int(got["gpu"]) == spec["world_size"] > 0 and got["gpu_model"], cell
        else:
            assert got["gpu"] == "0" and "gpu_model" not in got, cell


@pytest.mark.skipif(not HAS_SLURM_PLUGIN, reason="snakemake-executor-plugin-slurm is not installed")
def test_the_slurm_plugin_accepts_each_gpu_request(cells):
    """The plugin's own --gpus builder takes every model name we produce (it refuses '-')."""
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    class Resources(dict):  # the two ways the plugin reads a Snakemake job's resources
        __getattr__ = dict.__getitem__

    class Job:
        def __init__(self, res):
            self.resources = Resources(res)

    _, specs = cells
    for spec in specs.values():
        res = resources.resources_of(spec)
        flag = set_gres_string(Job(res))
        assert flag == (f" --gpus={res['gpu_model']}:{res['gpu']}" if spec["mode"] == "cuda" else "")
