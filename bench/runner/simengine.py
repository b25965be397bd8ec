"""The workflow's warm sim engine: one SimPool shared by every sim cell job of a Snakemake run,
over a unix socket. Torch-free.

    # the Snakefile (onstart / onsuccess / onerror):
    engine = simengine.start(watch_pid=os.getpid(), jobs=workflow.cores)   # sets FT_MEMBENCH_SIM_ENGINE
    simengine.stop(engine)
    # a cell job (bench/conftest.py ``cell_runner``):
    rec = simengine.run_cell(spec, log_path, os.environ["FT_MEMBENCH_SIM_ENGINE"])   # None: run it fresh

Each sim cell job of the workflow still runs rule -> pytest (pytest-benchmark keeps collecting
the record), but pytest asks this engine for the record instead of starting a worker that
imports torch and the libraries again (~5 s a cell). The engine is ``python -m bench.runner.simengine``:
a bench/search/simpool.py pool of ``jobs`` warm servers, each cell in a fresh fork of one of them, so
its record is the record of the cell run alone in a fresh process (bench/records/identical.py;
tests/test_simengine.py holds this for the Snakefile's own cell command).

Contract:
- Keyed by code and libraries: the engine takes a request only when the client's ``key()`` (the
  engine digest and library versions, bench/records/reuse.py ``versions``) is its own; otherwise, or
  when the socket is absent or the engine gone, ``run_cell`` returns None and the caller runs
  the cell in its own fresh process (bench/runner/launch.py). A cluster job that cannot reach the
  socket does the same.
- Only sim cells: cpu and cuda cells never come here.
- Lifetime: it lives for the run that started it. It ends on ``stop`` (the run ended), when
  the process it watches (Snakemake) is gone, SIGKILL included (polled every ``POLL_S``), and
  on SIGTERM or SIGINT; then its servers and their cells are killed and its socket folder
  removed. Its servers die with it even if it is itself SIGKILLed (bench/runner/lifeline.py).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.records import reuse
from bench.runner import lifeline
from bench.cells import inputs

ENV = "FT_MEMBENCH_SIM_ENGINE"
POLL_S = 0.5


def key() -> str:
    """What a record depends on besides its spec: the engine's code and the library versions."""
    return inputs.digest(reuse.versions())


# -- client ---------------------------------------------------------------------------------------

def run_cell(spec: dict, log_path, sock: str | None, trace: bool = False) -> dict | None:
    """The record of sim ``spec`` from the engine at ``sock`` (worker log to ``log_path``; the
    trace kept beside it as bench/runner/launch.py keeps it, or with ``trace`` returned in ``_trace`` as
    SimPool.run_cell returns it), or None when there is no engine to take it."""
    if not sock or spec["mode"] != "sim" or not os.path.exists(sock):
        return None
    with tempfile.TemporaryDirectory(prefix="ftmb-engine-trace-") as tmp:
        trace_to = os.path.join(tmp, "trace.json.gz") if trace else None
        req = {"key": key(), "spec": spec, "log": str(Path(log_path).resolve()) if log_path else None,
               "trace_to": trace_to}
        try:
            reply = _ask(sock, req)
        except (OSError, ValueError) as exc:
            print(f"sim engine at {sock} not reachable ({exc}): the cell runs in a fresh process", file=sys.stderr)
            return None
        if trace_to and "record" in reply and os.path.isfile(trace_to):
            from bench.estimate import replay
            reply["record"]["_trace"] = replay.load(trace_to)
    if "record" not in reply:
        print(f"sim engine at {sock} refused the cell ({reply.get('refused', 'no reply')}): "
              "it runs in a fresh process", file=sys.stderr)
        return None
    return reply["record"]


def takes(sock: str | None) -> bool:
    """Whether an engine answers at ``sock`` with this code's and libraries' key."""
    if not sock or not os.path.exists(sock):
        return False
    try:
        return bool(_ask(sock, {"ping": key()}).get("ok"))
    except (OSError, ValueError):
        return False


class EnginePool:
    """bench/search/simpool.py's interface (``run_cell``, ``run_many``, a context manager) over the
    engine at ``sock``: what a search uses inside the workflow. Where no engine takes this code's
    cells, everything goes to ``fallback()`` (a SimPool of its own) instead."""

    def __init__(self, sock: str | None, jobs: int, fallback):
        self.sock, self.jobs = sock, max(1, jobs)
        self.own = None if takes(sock) else fallback()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.own is not None:
            self.own.close()

    def run_cell(self, spec: dict, log_path=None, keep_trace: bool = False) -> dict:
        if self.own is None:
            rec = run_cell(spec, log_path, self.sock, trace=not keep_trace)
            if rec is not None:
                return rec
        if self.own is None:  # the engine went away mid-search: a pool of its own from here on
            from bench.search.simpool import SimPool
            self.own = SimPool(1)
        return self.own.run_cell(spec, log_path, keep_trace)

    def run_many(self, jobs: list[tuple[dict, object]]) -> list[dict]:
        if self.own is not None:
            return self.own.run_many(jobs)
        with ThreadPoolExecutor(max_workers=self.jobs) as ex:
            return list(ex.map(lambda job: self.run_cell(*job), jobs))


def _ask(sock: str, req: dict) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(sock)
        conn.sendall(json.dumps(req).encode() + b"\n")
        conn.shutdown(socket.SHUT_WR)
        return json.loads(_read_all(conn) or b"{}")


def _read_all(conn: socket.socket) -> bytes:
    chunks = []
    while chunk := conn.recv(1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


# -- the run's side: start and stop ---------------------------------------------------------------

def start(watch_pid: int, jobs: int, env_var: str = ENV) -> str:
    """Start the engine for the run of ``watch_pid`` and set ``env_var`` to its socket (the jobs
    the run starts inherit it). Returns the socket path once it accepts connections; the warm
    servers start with the first cells."""
    folder = tempfile.mkdtemp(prefix="ftmb-sim-engine-")
    if len(os.fsencode(folder)) > 90:  # a unix socket's path has at most 107 bytes
        os.rmdir(folder)
        folder = tempfile.mkdtemp(prefix="ftmb-sim-engine-", dir="/tmp")
    sock = os.path.join(folder, "engine.sock")
    proc = subprocess.Popen([sys.executable, "-m", "bench.runner.simengine", "--socket", sock, "--watch", str(watch_pid),
                             "--jobs", str(max(1, int(jobs)))], stdin=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                                             os.environ.get("PYTHONPATH", "")])),
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            shutil.rmtree(folder, ignore_errors=True)
            raise RuntimeError(f"the warm sim engine (bench/runner/simengine.py) did not start (exit {proc.poll()})")
        time.sleep(0.05)
    os.environ[env_var] = sock
    return sock


def stop(sock: str | None, timeout: float = 30) -> None:
    """Ask the engine at ``sock`` to end, and wait until its socket folder is gone."""
    if not sock or not os.path.exists(sock):
        return
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(sock)
            conn.sendall(b'{"stop": true}\n')
            conn.shutdown(socket.SHUT_WR)
            _read_all(conn)
    except OSError:
        pass
    deadline = time.monotonic() + timeout
    while os.path.exists(os.path.dirname(sock)) and time.monotonic() < deadline:
        time.sleep(0.05)


# -- the engine -----------------------------------------------------------------------------------

def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is gone too
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def serve(sock: str, watch_pid: int, jobs: int) -> None:
    # the handlers come before anything that can take a signal: a SIGTERM (Snakemake gone, even
    # before the parent-death signal was armed) must end in the clean-up below, never in the
    # default action that leaves the socket folder behind
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    pool = listener = None
    try:
        from bench.search import simpool  # the pool imports replay: only the engine needs it
        lifeline.die_with_parent(signal.SIGTERM)  # Snakemake's main thread ended: clean up as below
        own = key()
        # one long-lived thread per server: a server dies with the thread that started it (lifeline)
        runners = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="ftmb-engine")
        pool = simpool.SimPool(jobs=jobs)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sock + ".tmp")
        listener.listen(64)
        os.rename(sock + ".tmp", sock)  # present only once it accepts
        listener.settimeout(POLL_S)
        _accept(listener, own, runners, pool, stopping, watch_pid)
    finally:
        if listener is not None:
            listener.close()
        shutil.rmtree(os.path.dirname(sock), ignore_errors=True)
        lifeline.kill_adopted()  # the servers' groups: their running cells go with them
        if pool is not None:
            pool.close()
        # a cell still in a runner thread must not hold the exit (nor restart a server): the
        # process ends here, and what its threads started dies with them (parent-death signal)
        os._exit(0)


def _accept(listener, own: str, runners, pool, stopping: threading.Event, watch_pid: int) -> None:
    """Serve requests until told to stop or until ``watch_pid`` is gone."""

    def handle(conn: socket.socket) -> None:
        with conn:
            try:
                req = json.loads(_read_all(conn) or b"{}")
                if req.get("stop"):
                    stopping.set()
                    reply = {"stopping": True}
                elif "ping" in req:
                    reply = {"ok": req["ping"] == own, "key": own}
                elif req.get("key") != own:
                    reply = {"refused": f"engine key {own}, the cell's {req.get('key')}: other code or libraries"}
                else:
                    # a cell's trace is kept beside its log (results/traces/) and never in its record;
                    # a search's sample trace goes to the file it names (``trace_to``), unread here
                    trace_to = req.get("trace_to")
                    rec = runners.submit(pool.run_cell, req["spec"], req["log"], not trace_to, trace_to).result()
                    rec.pop("_trace", None)
                    reply = {"record": rec}
                conn.sendall(json.dumps(reply).encode())
            except (OSError, ValueError, KeyError) as exc:
                try:
                    conn.sendall(json.dumps({"refused": f"bad request: {exc}"}).encode())
                except OSError:
                    pass

    while not stopping.is_set() and alive(watch_pid):
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            if stopping.is_set():
                break
            raise
        conn.settimeout(None)
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.runner.simengine", description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="unix socket path to serve on")
    ap.add_argument("--watch", type=int, required=True, help="end when this pid (Snakemake) is gone")
    ap.add_argument("--jobs", type=int, default=1, help="warm servers, one cell each at a time")
    args = ap.parse_args(argv)
    serve(args.socket, args.watch, max(1, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
