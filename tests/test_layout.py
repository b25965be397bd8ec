"""The process boundary, kept: every module on the parent side (bench/*.py, report/*.py)
imports without torch, transformers or anything from bench.worker; only bench/worker/ may."""
import subprocess
import sys

from tests.helpers import REPO

HEAVY = ("torch", "transformers", "peft", "deepspeed", "bitsandbytes", "bench.worker")


def parent_modules() -> list[str]:
    out = []
    for package in ("bench", "report"):
        for path in sorted((REPO / package).glob("*.py")):
            if path.stem.startswith("test_") or path.stem == "conftest":
                continue  # benchmark files: pytest collects them, nothing imports them
            out.append(package if path.stem == "__init__" else f"{package}.{path.stem}")
    return out


def test_parent_side_is_found():
    mods = parent_modules()
    assert {"bench.matrix", "bench.launch", "bench.record", "bench.lifeline", "report.build"} <= set(mods)
    assert not any(m.startswith("bench.worker") for m in mods)


def test_every_parent_module_stays_torch_free():
    code = ("import importlib, sys\n"
            f"for m in {parent_modules()!r}:\n"
            "    importlib.import_module(m)\n"
            f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith('bench.worker'))\n"
            "sys.exit(f'imported {bad}' if bad else 0)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout


def test_the_check_would_see_a_torch_import():
    code = "import sys, bench.worker.memtrack; sys.exit(0 if 'torch' in sys.modules else 1)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=120).returncode == 0
