"""The process boundary, kept: every module on the parent side (bench/ outside bench/worker/, report/)
imports without torch, transformers or anything from bench.worker; only bench/worker/ may."""
import subprocess
import sys

from tests.helpers import REPO

HEAVY = ("torch", "transformers", "peft", "deepspeed", "bitsandbytes", "bench.worker")


def parent_modules() -> list[str]:
    """Every module of bench/ and report/, subpackages included, except bench/worker/."""
    out = []
    for package in ("bench", "report"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            if rel.parts[:2] == ("bench", "worker"):
                continue  # the worker side: it may import torch
            if path.stem.startswith("test_") or path.stem == "conftest":
                continue  # benchmark files: pytest collects them, nothing imports them
            parts = rel.parts[:-1] if path.stem == "__init__" else rel.parts
            out.append(".".join(parts))
    return out


def test_parent_side_is_found():
    mods = parent_modules()
    assert {"bench.cells.matrix", "bench.runner.launch", "bench.records.record", "bench.runner.lifeline",
            "bench.search.fits", "bench.corpus.scoreboard", "report.build"} <= set(mods)
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
