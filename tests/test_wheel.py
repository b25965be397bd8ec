"""The package as a wheel: built from pyproject.toml, installed in a fresh virtual
environment (no editable install, no checkout on its path) and run from outside the checkout.

The fresh environment takes its dependencies (torch, transformers, ...) from this one's
site-packages by a path line (a ``.pth`` line adds the folder only: this environment's own
editable install of ft-membench is not carried over), so the test needs no network.
"""
import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bench import home

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    # built from a copy of what the wheel is made of: setuptools writes build/ and *.egg-info beside the
    # sources, and the checkout stays as it was
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("bench", "report"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp),
                    str(src)], check=True, capture_output=True, text=True)
    wheel = next(tmp.glob("ft_membench-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "deps-from-the-test-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True, text=True)
    outside = tmp / "elsewhere"
    outside.mkdir()
    return wheel, venv, outside


def test_the_wheel_holds_every_package_and_its_data(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {p.parent.relative_to(REPO).as_posix() for p in REPO.glob("bench/**/__init__.py")} | {"report"}
    assert {f"{p}/__init__.py" for p in packages} <= names     # bench/fit and bench/cells/trainconfig among them
    assert {"bench/fit/answer.py", "bench/cells/matrix.schema.json", "report/template.html.j2"} <= names
    assert not any(n.startswith(("matrix/", "results/", "tests/")) for n in names)


def test_the_installed_command_answers_from_a_checkout_named_by_its_home(installed):
    _, venv, outside = installed
    exe = venv / "bin" / "ft-membench"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", home.ENV)}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import bench; print(bench.__file__)"],
                           cwd=outside, env=env, check=True, capture_output=True, text=True).stdout
    assert str(venv) in where and str(REPO) not in where   # the wheel's code, not the checkout's
    got = subprocess.run([str(exe), "fit", "qwen2.5-7b", "--gpu", "rtx-4090", "--json"], cwd=outside,
                         env=dict(env, **{home.ENV: str(REPO)}), capture_output=True, text=True, timeout=300)
    assert got.returncode in (0, 1), got.stderr
    answer = json.loads(got.stdout)
    assert answer["gpu"]["name"] == "rtx-4090" and answer["recipes"]
    assert all(r["record_source"] and "results/reference" in r["record_source"] for r in answer["recipes"]
               if r["verdict"] in ("fits", "tight", "oom"))
    # without a checkout to read: one line that says what to do, exit 2, before anything runs
    bare = subprocess.run([str(exe), "fit", "qwen2.5-7b", "--gpu", "rtx-4090"], cwd=outside, env=env,
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode == 2 and bare.stdout == ""
    line, = bare.stderr.strip().splitlines()
    assert line.startswith("ft-membench: no matrix/default.yaml") and home.ENV in line


HARNESS = {"snakemake", "seaborn", "pandas", "matplotlib", "jinja2", "pytest", "pytest-benchmark", "pytest-xdist"}


def test_the_cli_installs_light_and_the_harness_is_an_extra(installed):
    """`pip install ft-membench` is the CLI: the workflow, report and test packages are the `harness` extra,
    and `ft-membench fit` imports none of them."""
    wheel, venv, outside = installed
    meta = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    def name(req):
        return req.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
    core = {name(r) for r in requires if "extra ==" not in r}
    harness = {name(r) for r in requires if "extra == \"harness\"" in r or "extra == 'harness'" in r}
    assert not core & HARNESS, core & HARNESS
    assert HARNESS <= harness, HARNESS - harness
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", home.ENV)}
    probe = ("import sys, contextlib, io\nfrom bench import cli\nout = io.StringIO()\n"
             "with contextlib.redirect_stdout(out):\n"
             "    try:\n        cli.main(['fit', 'qwen2.5-7b', '--gpu', 'rtx-4090', '--no-hints'])\n"
             "    except SystemExit:\n        pass\n"
             "print(sorted(m for m in " + repr(sorted(m.replace('-', '_') for m in HARNESS)) + " if m in sys.modules))\n")
    got = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=outside, env=dict(env, **{home.ENV: str(REPO)}),
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip().splitlines()[-1] == "[]", got.stdout[-500:]
