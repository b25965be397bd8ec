"""Run one cell in a fresh worker process and return its record, whatever happens to it.

Torch-free: the parent only writes the spec, starts ``python -m bench.worker`` in a new
process group, and blocks on it (no polling loop, no sampler processes). A worker that
exits without a record, is killed, or outlives ``timeout_s`` still yields a record:
``timeout`` or ``error`` with the tail of its log. The worker writes its progress (phase and
step) unbuffered, so the tail says where it was. It dies with this process (bench/runner/lifeline.py):
no worker outlives the launcher, SIGKILL included.

A skipped cell (``spec["skip_reason"]``, decided once when the matrix loaded) starts nothing.

A cpu/cuda cell with world size N > 1 runs ``python -m torch.distributed.run --nproc_per_node
N`` (rendezvous on 127.0.0.1 and a free port) around the same worker; each rank writes its
own record and bench/runner/ranks.py merges them here, so a rank that dies or hangs still leaves
the cell a record. sim cells are one process whatever their world size.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.records import record
from bench.runner import lifeline, net, ranks

ROOT = Path(__file__).resolve().parents[2]
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
        # PYTHONHASHSEED: set iteration order, and so the order in which a step frees storages,
        # is the same in every run; the allocation trace and its replay reproduce to the byte
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONHASHSEED="0",
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        # the worker's temp files (its pinned inputs) go in this cell's folder, removed below however the
        # worker ends (killed, timed out); the compile cache stays where it was, shared by every cell
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir(), f"torchinductor_{_user()}")))
        env["TMPDIR"] = tmp
        with open(log, "w") as fh:
            proc = subprocess.Popen(worker_command(spec, spec_path, out_path), stdout=fh,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                    preexec_fn=lifeline.die_with_parent)
            lifeline.adopt(proc.pid)
            try:
                code = proc.wait(timeout=spec["timeout_s"])
            except subprocess.TimeoutExpired:
                kill_all(proc, spec, out_path)
                rec = record.failure(spec, "timeout", f"no record after the cell's limit of {spec['timeout_s']} s",
                                     tail(log))
                if ranks.multirank(spec):
                    rec["details"]["ranks"] = [ranks.summary(k, r) for k, r in
                                               enumerate(ranks.collect(out_path, spec["world_size"]))]
                return rec
            except BaseException:  # Ctrl-C, or the collector failing: the worker goes with us
                kill_all(proc, spec, out_path)
                raise
            finally:
                lifeline.release(proc.pid)
        if ranks.multirank(spec):
            kill_ranks(spec, out_path)  # torchrun has exited; no rank may outlive it
            rec = ranks.merge(spec, ranks.collect(out_path, spec["world_size"]), exit_reason(code), tail(log))
        elif out_path.is_file():
            rec = json.loads(out_path.read_text())
        else:
            return record.failure(spec, "error", exit_reason(code), tail(log))
        keep_traces(spec, out_path, rec, log_path)
        return rec


def _user() -> str:
    import getpass
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def keep_traces(spec: dict, out_path: Path, rec: dict, log_path) -> None:
    """Move the worker's allocation trace (and a cuda snapshot) out of the temp dir into
    ``results/traces/`` beside ``results/logs/`` (the peak rank's, for several ranks); the
    record says where (``details.trace_file``, ``details.snapshot_file``)."""
    if not log_path:
        return
    src = out_path
    if ranks.multirank(spec):
        src = ranks.rank_path(out_path, rec["details"].get("peak_rank", 0))
    folder = Path(log_path).parent.parent / "traces"
    for suffix, name, key in ((".trace.json.gz", ".json.gz", "trace_file"),
                              (".snapshot.pickle", ".snapshot.pickle", "snapshot_file")):
        made = Path(f"{src}{suffix}")
        if made.is_file():
            dest = folder / f"{spec['cell']}{name}"
            try:
                folder.mkdir(parents=True, exist_ok=True)
                shutil.move(made, dest)   # another file system: a copy, cut short by a full disk
            except OSError as exc:   # no partial file; the record is kept without it, and says nothing false
                dest.unlink(missing_ok=True)
                _say(f"bench.runner: cannot keep {dest}: {exc.strerror or exc}; the record is kept without it")
                continue
            rec["details"][key] = str(dest)


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:   # stderr is the rule log, on the same full disk
        pass


def worker_command(spec: dict, spec_path: Path, out_path: Path) -> list[str]:
    """The worker for one process, or torchrun starting ``world_size`` of them on this host."""
    worker = ["-m", "bench.worker", str(spec_path), str(out_path)]
    if not ranks.multirank(spec):
        return [sys.executable, *worker]
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
            "--nproc_per_node", str(spec["world_size"]), "--max_restarts", "0",
            "--master_addr", "127.0.0.1", "--master_port", str(net.free_loopback_port()), *worker]


def kill_all(proc: subprocess.Popen, spec: dict, out_path: Path) -> None:
    """SIGKILL the worker's process group (torchrun or the worker) and any rank left."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill_ranks(spec, out_path)
    proc.wait()


def kill_ranks(spec: dict, out_path: Path) -> None:
    """SIGKILL each rank still running, by the pid it wrote (torchrun starts ranks with
    start_new_session, out of reach of its own process group)."""
    if not ranks.multirank(spec):
        return
    for k in range(spec["world_size"]):
        try:
            pid = int(ranks.pid_path(out_path, k).read_text())
        except (OSError, ValueError):
            continue
        if not is_rank_of(pid, out_path):
            continue
        for kill in (os.killpg, os.kill):  # a rank that is not a group leader: the process alone
            try:
                kill(pid, signal.SIGKILL)
                break
            except (ProcessLookupError, PermissionError):
                pass


def is_rank_of(pid: int, out_path: Path) -> bool:
    """Whether ``pid`` is still a worker of this cell (never signal a reused pid)."""
    try:
        return str(out_path).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


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
