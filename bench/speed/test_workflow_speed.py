"""How fast a matrix of a few hundred cells expands and dry-runs: pytest-benchmark benchmarks.

    pytest bench/speed/test_workflow_speed.py --benchmark-json speed.json

A generated matrix of 300 cuda cells (6 models x 5 GPU profiles x 10 technique combinations,
world sizes 1 to 8) is expanded by bench.cells.matrix.load, and `snakemake -n` plans its jobs
(the Snakefile loads the same matrix, then builds one job per cell with its resources).
Nothing runs: a dry run needs no GPU. The targets are generous ceilings ("seconds"), so a
regression that makes the loader or the Snakefile quadratic fails here.

The test names avoid technique and model words so that ``pytest bench -k <technique>``
never selects them.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.cells import matrix

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["tiny-llama", "tiny-qwen2", "qwen2.5-0.5b", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b"]
GPUS = ["h100-80gb", "a100-80gb", "a100-40gb", "l40s", "rtx-4090"]
COMBOS = ["baseline", "gc", "lora", "bf16", "amp-bf16", "adamw8bit", "lora+gc", "zero3+w2", "zero3+w4", "fsdp+w8"]
CELLS = len(MODELS) * len(GPUS) * len(COMBOS)
LOAD_CEILING_S = 2.0
DRY_RUN_CEILING_S = 30.0


@pytest.fixture(scope="module")
def big_matrix(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("big-matrix")
    doc = {"models_dir": str(ROOT / "matrix" / "models"), "gpus_file": str(ROOT / "matrix" / "gpus.yaml"),
           "deepspeed_dir": str(ROOT / "matrix" / "deepspeed"),
           "defaults": {"batch_size": 1, "seq_len": 512, "steps": 1, "warmup_steps": 1},
           "studies": {"big": {"mode": "cuda", "models": MODELS, "gpus": GPUS, "techniques": COMBOS}}}
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_expand_300_cell_yaml(benchmark, big_matrix):
    cells = benchmark.pedantic(matrix.load, args=(big_matrix,), rounds=5, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(cells=len(cells))
    assert len(cells) == CELLS
    assert benchmark.stats.stats.max < LOAD_CEILING_S


def dry_run(big_matrix: Path, workdir: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "-s", str(ROOT / "Snakefile"),
           "-d", str(workdir), "--config", f"matrix={big_matrix}", "--", "all"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, timeout=300)


def test_plan_300_cell_workflow(benchmark, big_matrix, tmp_path):
    run = benchmark.pedantic(dry_run, args=(big_matrix, tmp_path), rounds=1, iterations=1)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    planned = sum(1 for line in run.stdout.splitlines() if line.startswith("rule cell:"))
    benchmark.extra_info.update(cells=planned)
    assert planned == CELLS
    assert benchmark.stats.stats.max < DRY_RUN_CEILING_S
