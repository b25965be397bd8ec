"""cpu cells, one rank or several, each in fresh forks of a warm server that imported torch once.

    with CpuPool(jobs=2) as pool:
        recs = pool.run_many([(spec, log), ...])   # the records bench.runner.launch.run_cell gives
        rec = pool.run_cell(spec, log)

A cpu cell run by the launcher starts a fresh interpreter (torchrun and one per rank when its world
size is above 1), and each spends about 6 s of CPU importing torch, transformers, peft, bitsandbytes
and DeepSpeed before its first op: most of a tiny cell's cost. This server (``python -m
tests.warm_cells``, started by the pool, never by hand) pays once for the imports a cpu worker
makes before its tracker starts (torch, transformers and the worker's own modules: ``_warm``), then
runs each cell in fresh forks of itself, one per rank, each running exactly ``python -m bench.worker
SPEC RECORD`` (``bench.worker.main.main``). The parent never runs a step, so every fork holds the
imports and nothing else. It imports nothing the worker imports later: a library imported while
the tracker counts (peft, bitsandbytes, DeepSpeed) makes its module-level tensors then, and on the
cpu those are the cell's bytes (bitsandbytes' NF4 tables: 144 B), as in a fresh process. A fork
stands for the process the launcher would start:

- its environment is the launcher's: ``TMPDIR`` is the cell's own folder, removed afterwards, and
  the compile cache is shared (bench/runner/launch.py); the server runs with PYTHONHASHSEED=0;
- a rank of a several-rank cell gets the variables torchrun gives it (``RANK``, ``LOCAL_RANK``,
  ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and one intra-op thread,
  as torchrun sets ``OMP_NUM_THREADS=1`` for several processes per node; when one rank fails,
  the others are killed, as torchrun stops them, and the cell's record is ``ranks.merge``'s;
- the cell's limit, a kill and a crash end as the launcher's do (``timeout`` and ``error``
  records); each fork leads its own process group, so a kill takes what it started with it.

Test tooling, not the product: the suite (tests/helpers.py ``launch_all``) runs its tiny cpu cells
here, where a module runs tens of them. The records are the launcher's outside bench/records/
identical.py's exclusions (tests/test_warm_cells.py holds a one-rank LoRA and an FSDP2 world-size-2 cell
to that), and the launcher's own path (torchrun, kills, limits) keeps its tests
(tests/test_dist.py, tests/test_failures.py). The workflow, ``pytest bench`` and ``ft-membench``
keep a fresh process per cell: a reference record's host RSS is that of a process that imported
only what its cell needs. cuda cells never come here. It lives here, not in bench/, because it is
worker-side code (torch) started by a parent-side pool, and bench/worker/ is the engine the
records' digest covers: a test-speed tool must not make them stale.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.records import record
from bench.runner import launch, lifeline, net, ranks
from bench.search.simpool import PoolError, _Server

DIST_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class CpuPool:
    """``jobs`` warm servers; a cell takes a free one for all of its ranks."""

    def __init__(self, jobs: int = 2):
        self.jobs = max(1, jobs)
        self._servers: list[_CpuServer] = []
        self._free: list[_CpuServer] = []
        self._cond = threading.Condition()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ensure(self, n: int) -> None:
        """Start servers up to ``n`` from the calling thread: a process's parent-death signal
        follows the thread that started it (bench/runner/lifeline.py)."""
        while len(self._servers) < min(self.jobs, n):
            server = _CpuServer()
            server.start()
            with self._cond:
                self._servers.append(server)
                self._free.append(server)
                self._cond.notify()

    def run_cell(self, spec: dict, log_path=None) -> dict:
        """The cell's record. A server that dies under it is replaced and the cell run once more;
        if that dies too, the cell is an ``error`` record saying so."""
        if spec["mode"] != "cpu":
            raise ValueError(f"{spec['cell']}: the warm cpu pool runs cpu cells only, not {spec['mode']}")
        if spec["skip_reason"]:
            return record.failure(spec, "skipped", spec["skip_reason"])
        self._ensure(1)
        with self._cond:
            self._cond.wait_for(lambda: self._free)
            server = self._free.pop()
        try:
            for attempt in (1, 2):
                try:
                    return server.run_cell(spec, log_path)
                except (PoolError, OSError) as exc:
                    server.discard()
                    if attempt == 2:
                        return record.failure(spec, "error", record.one_line(
                            f"the warm cpu server died twice while running this cell: {exc}"))
        finally:
            with self._cond:
                self._free.append(server)
                self._cond.notify()

    def run_many(self, jobs: list[tuple[dict, object]]) -> list[dict]:
        """Records of [(spec, log_path), ...], in order, ``self.jobs`` at a time."""
        self._ensure(len(jobs))
        with ThreadPoolExecutor(max_workers=self.jobs) as ex:
            return list(ex.map(lambda job: self.run_cell(*job), jobs))

    def close(self) -> None:
        for server in self._servers:
            server.close()
        self._servers, self._free = [], []


class _CpuServer(_Server):
    """One warm server process (this module's ``serve``), one cell at a time."""

    def start(self) -> None:
        if self.proc is not None:
            return
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONHASHSEED="0",
                   PYTHONPATH=os.pathsep.join([str(launch.ROOT), os.environ.get("PYTHONPATH", "")]))
        self._errlog = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.warm_cells"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._errlog, env=env, text=True,
                                     start_new_session=True, preexec_fn=lifeline.die_with_parent)
        lifeline.adopt(self.proc.pid)
        if self._read(timeout=600) is None:
            self.discard()
            raise PoolError("the warm cpu server did not finish its imports in 600 s")

    def run_cell(self, spec: dict, log_path=None, keep_trace: bool = False, trace_to=None) -> dict:
        """The record of cpu ``spec``, as bench.runner.launch.run_cell gives it."""
        self.start()
        n = spec["world_size"] if ranks.multirank(spec) else 1
        with tempfile.TemporaryDirectory(prefix=f"ftmb-{spec['cell'][:40]}-") as tmp:
            spec_path, out_path = Path(tmp, "spec.json"), Path(tmp, "record.json")
            spec_path.write_text(json.dumps(spec))
            log = Path(log_path) if log_path else Path(tmp, "worker.log")
            log.parent.mkdir(parents=True, exist_ok=True)
            env = {"TMPDIR": tmp, "TORCHINDUCTOR_CACHE_DIR": os.environ.get(
                "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir(), f"torchinductor_{launch._user()}")))}
            req = {"spec": str(spec_path), "out": str(out_path), "log": str(log), "env": env, "ranks": n,
                   "master_port": net.free_loopback_port() if n > 1 else None}
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            pids = self._read(timeout=60)["pids"]
            done = self._read(timeout=spec["timeout_s"])
            if done is None:
                for pid in pids:
                    _kill_group(pid)
                self._read(timeout=60)
                _gather_logs(log, n)
                rec = record.failure(spec, "timeout", f"no record after the cell's limit of {spec['timeout_s']} s",
                                     launch.tail(log))
                if n > 1:
                    rec["details"]["ranks"] = [ranks.summary(k, r) for k, r in enumerate(ranks.collect(out_path, n))]
                return rec
            _gather_logs(log, n)
            if n > 1:
                rec = ranks.merge(spec, ranks.collect(out_path, n), launch.exit_reason(done["exit"]), launch.tail(log))
            elif out_path.is_file():
                rec = json.loads(out_path.read_text())
            else:
                return record.failure(spec, "error", launch.exit_reason(done["exit"]), launch.tail(log))
            launch.keep_traces(spec, out_path, rec, log_path)
            return rec


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _rank_log(log, k: int) -> str:
    return str(log) if k == 0 else f"{log}.rank{k}"


def _gather_logs(log: Path, n: int) -> None:
    """Ranks 1.. logged to files of their own (each fork truncates its log): appended to the
    cell's log, where torchrun's ranks would have written."""
    for k in range(1, n):
        part = Path(_rank_log(log, k))
        if part.is_file():
            with open(log, "a") as fh:
                fh.write(part.read_text(errors="replace"))
            part.unlink()


# -- the server process ------------------------------------------------------------------------

def _fork_rank(req: dict, k: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the fork: one rank of one cell, then gone (os._exit: no parent's atexit)
        os.setpgid(0, 0)
        lifeline.die_with_parent()
        os.environ.update(req["env"])
        tempfile.tempdir = None  # TMPDIR is the cell's folder
        n = req["ranks"]
        if n > 1:
            import torch
            os.environ.update(RANK=str(k), LOCAL_RANK=str(k), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                              MASTER_ADDR="127.0.0.1", MASTER_PORT=str(req["master_port"]), OMP_NUM_THREADS="1")
            torch.set_num_threads(1)
        from bench.worker.sim import server
        code = server._child({**req, "log": _rank_log(req["log"], k)})
    finally:
        os._exit(code)


def _wait(pids: list[int]) -> int:
    """Every fork's end; the first failing one's exit code (0 when all succeed). When a rank fails
    the others are killed: they would wait in a collective for it."""
    left, first = set(pids), 0
    while left:
        pid, status = os.wait()
        if pid not in left:
            continue
        left.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        if code and not first:
            first = code
            for other in left:
                _kill_group(other)
    return first


def _warm() -> None:
    """What ``python -m bench.worker`` imports for a cpu cell before its tracker starts, and no more
    (bench/worker/main.py ``run``): none of it makes a tensor."""
    import torch  # noqa: F401
    import transformers  # noqa: F401

    from bench.worker import cpu_gemm, main, memtrack, train  # noqa: F401


def serve(inp) -> None:
    lifeline.die_with_parent()
    out = os.fdopen(os.dup(1), "w")  # replies only: what libraries print goes to stderr
    os.dup2(2, 1)
    _warm()
    out.write(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    for line in inp:
        if not line.strip():
            continue
        req = json.loads(line)
        pids = [_fork_rank(req, k) for k in range(req["ranks"])]
        out.write(json.dumps({"pids": pids}) + "\n")
        out.flush()
        out.write(json.dumps({"exit": _wait(pids)}) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.stdin)
