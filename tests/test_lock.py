"""The reference results carry their exact package set (bench/records/lock.py)."""
import json
import subprocess
import sys
from pathlib import Path

from bench.records import lock

REPO = Path(__file__).resolve().parent.parent
CONSTRAINTS = REPO / "results" / "reference" / "constraints.txt"


def pins(path=CONSTRAINTS) -> dict:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return {ln.split("==")[0].lower(): ln.split("==")[1] for ln in lines}


def test_constraints_drop_the_project_comments_and_local_labels():
    frozen = ["# Editable Git install with no remote (ft-membench==0.1.0)", "-e /path/to/checkout",
              "torch==2.13.0+cpu", "Jinja2==3.1.6", "foo @ file:///tmp/foo.whl", "accelerate==1.15.0"]
    assert lock.constraints(frozen) == ["accelerate==1.15.0", "Jinja2==3.1.6", "torch==2.13.0"]


def test_every_library_version_the_reference_records_name_is_pinned():
    """A regenerated reference without a regenerated lock fails here."""
    have = pins()
    for path in sorted((REPO / "results" / "reference" / "cells").glob("*.json")):
        rec = json.loads(path.read_text())["benchmarks"][0]["extra_info"]
        for name, version in rec["versions"].items():
            if name == "python":
                assert f"Python {version}" in CONSTRAINTS.read_text(), path.name
                continue
            if name == "ft_membench_engine":  # the project's own code digest, not a library to pin
                continue
            assert have.get(name.lower()) == version.split("+")[0], (path.name, name, version)


def test_lock_of_this_environment_names_torch_without_label_and_not_the_project(tmp_path):
    out = tmp_path / "c.txt"
    subprocess.run([sys.executable, "-m", "bench.records.lock", str(out)], check=True, cwd=REPO, capture_output=True)
    got = pins(out)
    assert "ft-membench" not in got and "+" not in got["torch"]
    assert 'pip install -e ".[harness,peers]" -c results/reference/constraints.txt' in out.read_text()
