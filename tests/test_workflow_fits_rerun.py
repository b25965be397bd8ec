"""A search file the fits rule set aside as corrupt (renamed to ``.corrupt``, "rerun to search
again") is searched again by the next ``snakemake all``: the ``all`` rule names every
``results/fits/<cell>.json``, as it names every cell record."""
import re
import subprocess
import sys

import pytest

from bench.cells.matrix import load
from tests.helpers import REPO, write_matrix
from tests.test_workflow import jobs

STUDY = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["t4"], "techniques": ["gc"]}


def test_the_all_rule_names_every_search_file():
    text = (REPO / "Snakefile").read_text()
    block = re.search(r"^rule all:\n(.*?)(?=^rule |\Z)", text, re.S | re.M).group(1)
    assert 'expand("results/fits/{cell}.json", cell=SIM_CELLS)' in block


@pytest.mark.skipif(subprocess.run([sys.executable, "-m", "snakemake", "--version"], capture_output=True).returncode,
                    reason="snakemake not installed")
def test_a_missing_search_file_is_searched_again_by_all(tmp_path):
    matrix = write_matrix(tmp_path, {"p": STUDY})
    cells = sorted(load(matrix))
    files = [f"results/cells/{c}.json" for c in cells] + [f"results/fits/{c}.json" for c in cells] + \
        ["results/fits.csv", "results/table.csv", "results/table.meta.json", "results/report.html"]
    for name in files:   # a finished run's files; --touch below records them as up to date
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--cores", "1",
           "--directory", str(tmp_path), "--config", f"matrix={matrix}"]

    def run(*args):
        done = subprocess.run([*cmd, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return jobs(done.stdout)
    run("--touch", "all")
    assert run("-n", "all") == {}   # nothing to be done
    gone = tmp_path / f"results/fits/{cells[0]}.json"
    gone.rename(gone.with_name(gone.name + ".corrupt"))   # as bench.search.fits.set_aside leaves it
    plan = run("-n", "all")
    assert plan.get("fit") == 1 and "cell" not in plan, plan
