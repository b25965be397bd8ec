"""The time targets for a model never seen, as pytest-benchmark benchmarks: opt-in (minutes each).

    FT_MEMBENCH_TARGETS=1 pytest bench/speed/test_new_model_targets.py --benchmark-json new-model.json

Each runs ``ft-membench fit`` on a config.json that is not in matrix/models (bench/speed/new_models/,
written from the published configs), as a new user would: an empty results folder and an empty
sample cache in a temporary directory, so nothing is reused. It asserts the target:

- ``test_a_new_7b_config_two_recipes``: Mistral-7B, ``--techniques qlora+gc,lora+gc+bf16 --gpu rtx-4090``,
  searches included, in at most 60 s;
- ``test_a_new_7b_config_default_answer``: the same model with every default technique (searches and best
  recipes), in at most 5 minutes;
- ``test_a_new_70b_config_two_recipes``: Qwen2.5-72B, the same two recipes on an h100-80gb, in at most 3 minutes.

Skipped without ``FT_MEMBENCH_TARGETS=1`` (as bench/speed/test_workflow_targets.py): measure on an otherwise idle
2-core machine. The names avoid technique words so that ``pytest bench -k <technique>`` never selects them.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ENV = "FT_MEMBENCH_TARGETS"
pytestmark = pytest.mark.skipif(os.environ.get(ENV) != "1",
                                reason=f"a time target for a model never seen (minutes): set {ENV}=1 to run it")


def fit(workdir: Path, config: str, gpu: str, techniques: str | None, limit_s: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bench.cli", "fit", str(HERE / "new_models" / config), "--gpu", gpu,
           "--results", str(workdir / "results")] + (["--techniques", techniques] if techniques else [])
    env = dict(os.environ, FT_MEMBENCH_CACHE=str(workdir / "cache"))   # no sample, config check or checkpoint reused
    # twice the target: a run that misses it still finishes and says by how much
    return subprocess.run(cmd, capture_output=True, text=True, cwd=HERE.parent.parent, env=env, timeout=2 * limit_s)


def run_target(benchmark, tmp_path, config: str, gpu: str, techniques: str | None, limit_s: float) -> None:
    run = benchmark.pedantic(fit, args=(tmp_path, config, gpu, techniques, limit_s), rounds=1, iterations=1)
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]   # 0 fits, 1 does not: both answers
    took = benchmark.stats.stats.max
    benchmark.extra_info.update(config=config, gpu=gpu, techniques=techniques or "(default)", target_s=limit_s,
                                took_s=round(took, 1))
    assert "largest seq at batch 1" in run.stdout
    assert took <= limit_s, f"{took:.0f} s, over the target of {limit_s:.0f} s"


def test_a_new_7b_config_two_recipes(benchmark, tmp_path):
    run_target(benchmark, tmp_path, "mistral-7b-v0.1.json", "rtx-4090", "qlora+gc,lora+gc+bf16", 60)


def test_a_new_7b_config_default_answer(benchmark, tmp_path):
    run_target(benchmark, tmp_path, "mistral-7b-v0.1.json", "rtx-4090", None, 5 * 60)


def test_a_new_70b_config_two_recipes(benchmark, tmp_path):
    run_target(benchmark, tmp_path, "qwen2.5-72b.json", "h100-80gb", "qlora+gc,lora+gc+bf16", 3 * 60)
