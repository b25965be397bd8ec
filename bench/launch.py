"""Run one cell in a fresh worker process and return its record, whatever happens to it.

Torch-free: the parent only writes the spec, starts ``python -m bench.worker`` in a new
process group, and blocks on it (no polling loop, no sampler processes). A worker that
exits without a record, is killed, or outlives ``timeout_s`` still yields a record:
``timeout`` or ``error`` with the tail of its log.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import record

ROOT = Path(__file__).resolve().parent.parent
TAIL_LINES = 40


def run_cell(spec: dict, log_path: str | os.PathLike | None = None) -> dict:
    """The record of ``spec`` run in isolation; the worker's output goes to ``log_path``."""
    if spec["skip_reason"]:
        return record.failure(spec, "skipped", spec["skip_reason"])
    with tempfile.TemporaryDirectory(prefix=f"ftmb-{spec['cell'][:40]}-") as tmp:
        spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "record.json")
        spec_path.write_text(json.dumps(spec))
        log = Path(log_path) if log_path else Path(tmp, "worker.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        with open(log, "w") as fh:
            proc = subprocess.Popen(worker_command(spec, spec_path, out_path), stdout=fh,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                code = proc.wait(timeout=spec["timeout_s"])
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return record.failure(spec, "timeout", f"no record after the cell's limit of {spec['timeout_s']} s",
                                      tail(log))
        if out_path.is_file():
            return json.loads(out_path.read_text())
        return record.failure(spec, "error", exit_reason(code), tail(log))


def worker_command(spec: dict, spec_path: Path, out_path: Path) -> list[str]:
    return [sys.executable, "-m", "bench.worker", str(spec_path), str(out_path)]


def exit_reason(code: int) -> str:
    if code < 0:
        name = signal.Signals(-code).name
        hint = " (the kernel's out-of-memory killer sends SIGKILL)" if -code == signal.SIGKILL else ""
        return f"worker killed by {name} before writing a record{hint}"
    return f"worker exited with code {code} without writing a record"


def tail(log: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
