"""Sim cells through one warm worker (bench/worker/sim/server.py). Torch-free parent side.

    with SimPool(jobs=2) as pool:
        rec = pool.run_cell(spec, log_path)     # the same record bench.runner.launch.run_cell gives
        recs = pool.run_many([(spec, log), ...])  # two at a time, one per warm server

The server imports torch and the libraries once; each cell then runs in its own fork of it
(a fresh process holding only the imports), so a record is the record of the cell run alone
(tests/test_fits.py ``test_warm_worker_record_is_the_fresh_process_record`` holds the two to the
byte, outside bench/records/identical.py's exclusions).
What it saves is the ~5 s of imports per cell: what the fits search (bench/search/fits.py), which
simulates one model x technique at several shapes, and the ``ft-membench`` command pay once.

Only sim cells: cpu and cuda measurements keep their own fresh process (bench/runner/launch.py).
The server runs with the launcher's environment (PYTHONHASHSEED=0: reruns reproduce to the
byte) and dies with this process (bench/runner/lifeline.py); a cell over its ``timeout_s`` is killed
and becomes a ``timeout`` record, a child that dies without a record an ``error`` record.
"""
from __future__ import annotations

import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.records import record
from bench.runner import launch, lifeline


class PoolError(RuntimeError):
    """The warm server itself failed (not a cell: a cell's failure is its record)."""


class SimPool:
    """``jobs`` warm servers (started when first needed); ``run_cell`` takes a free one,
    ``run_many`` keeps them all busy. One job per core: each cell's fork is single-threaded work."""

    def __init__(self, jobs: int = 1):
        self.jobs = max(1, jobs)
        self._free: queue.Queue = queue.Queue()
        self._all: list[_Server] = []
        self._lock = threading.Lock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _take(self) -> _Server:
        with self._lock:
            if self._free.empty() and len(self._all) < self.jobs:
                server = _Server()
                self._all.append(server)
                return server
        return self._free.get()

    def start(self) -> None:
        """Start one server now (the imports), so that the first cell does not pay for them."""
        server = self._take()
        try:
            server.start()
        finally:
            self._free.put(server)

    def run_cell(self, spec: dict, log_path=None, keep_trace: bool = False, trace_to=None) -> dict:
        """The cell's record (``keep_trace``, ``trace_to``: see ``_Server.run_cell``). A server that dies under it (killed, out of host memory) is
        replaced and the cell run once more in the new one; if that dies too, the cell is an
        ``error`` record saying so: the caller's other answers are never lost to it."""
        server = self._take()
        try:
            for attempt in (1, 2):
                try:
                    return server.run_cell(spec, log_path, keep_trace, trace_to)
                except (PoolError, OSError) as exc:
                    server.discard()
                    if attempt == 2:
                        return record.failure(spec, "error", record.one_line(
                            f"the warm sim server died twice while running this cell: {exc}"))
        finally:
            self._free.put(server)

    def run_many(self, jobs: list[tuple[dict, object]]) -> list[dict]:
        """Records of [(spec, log_path), ...], in order, ``self.jobs`` at a time."""
        if self.jobs == 1 or len(jobs) < 2:
            return [self.run_cell(spec, log) for spec, log in jobs]
        # servers start from this thread: a process's parent-death signal follows the thread that
        # started it (bench/runner/lifeline.py), and the pool's threads end when this call returns
        while len(self._all) < min(self.jobs, len(jobs)):
            server = _Server()
            self._all.append(server)
            server.start()
            self._free.put(server)
        with ThreadPoolExecutor(max_workers=self.jobs) as ex:
            return list(ex.map(lambda job: self.run_cell(*job), jobs))

    def close(self) -> None:
        for server in self._all:
            server.close()
        self._all = []
        self._free = queue.Queue()


class _Server:
    """One warm server process, one cell at a time."""

    def __init__(self):
        self.proc = None

    def start(self) -> None:
        if self.proc is not None:
            return
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONHASHSEED="0",
                   PYTHONPATH=os.pathsep.join([str(launch.ROOT), os.environ.get("PYTHONPATH", "")]))
        self._errlog = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.worker.sim.server"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._errlog, env=env, text=True,
                                     start_new_session=True, preexec_fn=lifeline.die_with_parent)
        lifeline.adopt(self.proc.pid)
        self._read(timeout=600)  # {"ready": pid}

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        lifeline.release(self.proc.pid)
        self.proc = None

    def discard(self) -> None:
        """Forget a server that died or broke its pipe: kill what is left of its group."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        lifeline.release(self.proc.pid)
        self.proc = None

    def _read(self, timeout: float | None) -> dict | None:
        """The server's next reply, or None when ``timeout`` passes first."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            self._errlog.seek(0)
            tail = self._errlog.read()[-2000:].decode(errors="replace")
            self.discard()
            raise PoolError(f"the warm sim server (bench/worker/sim/server.py) exited: {tail}")
        return json.loads(line)

    def run_cell(self, spec: dict, log_path: str | os.PathLike | None = None, keep_trace: bool = False,
                 trace_to: str | os.PathLike | None = None) -> dict:
        """The record of sim ``spec``, as bench.runner.launch.run_cell would give it, with the
        allocation trace read into ``_trace``; with ``keep_trace`` the trace file is also moved
        beside ``log_path``'s folder (``results/traces/``), as the launcher does; with
        ``trace_to`` it is moved there instead and not read (bench/runner/simengine.py's searches read
        it on their side)."""
        if spec["mode"] != "sim":
            raise ValueError(f"{spec['cell']}: the warm pool runs sim cells only, not {spec['mode']}")
        if spec["skip_reason"]:
            return record.failure(spec, "skipped", spec["skip_reason"])
        self.start()
        with tempfile.TemporaryDirectory(prefix=f"ftmb-{spec['cell'][:40]}-") as tmp:
            spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "record.json")
            spec_path.write_text(json.dumps(spec))
            log = Path(log_path) if log_path else Path(tmp, "worker.log")
            log.parent.mkdir(parents=True, exist_ok=True)
            self.proc.stdin.write(json.dumps({"spec": str(spec_path), "out": str(out_path), "log": str(log)}) + "\n")
            self.proc.stdin.flush()
            child = self._read(timeout=60)["pid"]
            done = self._read(timeout=spec["timeout_s"])
            if done is None:
                os.kill(child, signal.SIGKILL)
                self._read(timeout=60)
                return record.failure(spec, "timeout", f"no record after the cell's limit of {spec['timeout_s']} s",
                                      launch.tail(log))
            if not out_path.is_file():
                return record.failure(spec, "error", launch.exit_reason(done["exit"]), launch.tail(log))
            rec = json.loads(out_path.read_text())
            trace = Path(f"{out_path}.trace.json.gz")
            if trace_to is not None:
                if trace.is_file():
                    shutil.move(trace, trace_to)
                return rec
            if trace.is_file():
                from bench.estimate import replay
                rec["_trace"] = replay.load(trace)
            if keep_trace:
                launch.keep_traces(spec, out_path, rec, log_path)
            return rec
