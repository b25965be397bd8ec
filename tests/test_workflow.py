"""The Snakemake workflow end to end on a two-cell matrix in a temporary directory: it
builds the table and report, a rerun does nothing, a deleted cell reruns alone, and a bad
matrix stops it before anything runs."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import MATRIX_DIR, REPO

pytestmark = pytest.mark.slow
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--cores", "1"]
STUDY = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["gc"]}


def snakemake(workdir: Path, matrix: Path, *args):
    cmd = [*SNAKEMAKE, *args, "--directory", str(workdir), "--config", f"matrix={matrix}"]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)


def jobs(dry_run_output: str) -> dict:
    """{rule: count} from the job table of a `snakemake -n` run."""
    counts, in_table = {}, False
    for line in dry_run_output.splitlines():
        parts = line.split()
        if parts[:2] == ["job", "count"]:
            in_table = True
        elif in_table and len(parts) == 2 and parts[1].isdigit():
            if parts[0] == "total":
                break
            counts[parts[0]] = int(parts[1])
    return counts


def test_workflow_end_to_end(tmp_path, matrix_file):
    matrix = matrix_file({"s": STUDY})
    work = tmp_path / "work"
    work.mkdir()
    run = snakemake(work, matrix, "all")
    assert run.returncode == 0, run.stderr[-3000:]
    cells = sorted(p.name for p in (work / "results" / "cells").iterdir())
    assert cells == ["tiny-llama__cpu__baseline.json", "tiny-llama__cpu__gc.json"]
    assert (work / "results" / "logs" / "tiny-llama__cpu__gc.log").is_file()
    frame = pd.read_csv(work / "results" / "table.csv")
    assert sorted(frame["cell"]) == ["tiny-llama__cpu__baseline", "tiny-llama__cpu__gc"]
    assert set(frame["status"]) == {"ok"}
    page = (work / "results" / "report.html").read_text()
    assert "data:image/png;base64," in page and "tiny-llama" in page

    again = snakemake(work, matrix, "all", "-n")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr

    kept = work / "results" / "cells" / "tiny-llama__cpu__baseline.json"
    before = kept.stat().st_mtime_ns
    (work / "results" / "cells" / "tiny-llama__cpu__gc.json").unlink()
    plan = snakemake(work, matrix, "all", "-n")
    assert jobs(plan.stdout) == {"all": 1, "cell": 1, "report": 1, "table": 1}, plan.stdout
    rerun = snakemake(work, matrix, "all")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert kept.stat().st_mtime_ns == before, "an unchanged cell was rerun"
    assert (work / "results" / "cells" / "tiny-llama__cpu__gc.json").is_file()


def test_bad_matrix_stops_the_workflow_before_any_run(tmp_path, matrix_file):
    matrix = matrix_file({"s": dict(STUDY, techniques=["bf16+amp-bf16"])})
    run = snakemake(tmp_path, matrix, "all")
    assert run.returncode != 0
    assert f"{matrix}: studies.s.techniques[0]" in run.stdout + run.stderr
    assert "both set precision" in run.stdout + run.stderr
    assert not (tmp_path / "results").exists()


def test_an_edited_model_config_reruns_exactly_its_cells(tmp_path, matrix_file):
    """The rule's params is the cell spec, which carries digests of its inputs' content."""
    models = tmp_path / "models"
    models.mkdir()
    config = json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text())
    config.update(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, vocab_size=256)
    for name in ("a", "b"):
        (models / f"{name}.json").write_text(json.dumps(config))
    matrix = matrix_file({"s": dict(STUDY, models=["a", "b"], techniques=["baseline"])}, models_dir=str(models))
    work = tmp_path / "work"
    work.mkdir()
    targets = ["results/cells/a__cpu__baseline.json", "results/cells/b__cpu__baseline.json"]
    run = snakemake(work, matrix, *targets)
    assert run.returncode == 0, run.stderr[-3000:]
    again = snakemake(work, matrix, *targets, "-n")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr

    (models / "a.json").write_text(json.dumps({**config, "num_hidden_layers": 8}))
    (models / "b.json").write_text(json.dumps(config, indent=4))  # reformatted, the same content
    plan = snakemake(work, matrix, *targets, "-n")
    assert jobs(plan.stdout) == {"cell": 1}, plan.stdout
    assert "cell=a__cpu__baseline" in plan.stdout and "cell=b__cpu__baseline" not in plan.stdout
    kept = work / targets[1]
    before = kept.stat().st_mtime_ns
    rerun = snakemake(work, matrix, *targets)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert kept.stat().st_mtime_ns == before, "a cell whose inputs did not change was rerun"
    a, b = (json.loads((work / t).read_text())["benchmarks"][0]["extra_info"] for t in targets)
    assert a["status"] == b["status"] == "ok"
    assert a["params_total"] > b["params_total"], "the rerun trained the edited 8-layer model"
