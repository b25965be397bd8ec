"""No cell outlives what started it. Torch-free; Linux's parent-death signal where it exists.

Three processes stand between a user and a measurement: Snakemake (or the user's shell),
pytest (the collector, which runs the launcher in-process) and the worker (or torchrun and its
ranks). Killing any of them, SIGKILL included, must not leave a worker running beside later
cells, where it would skew their timing and memory:

- ``die_with_parent()``: this process gets SIGKILL when its parent dies
  (``prctl(PR_SET_PDEATHSIG)``); the launcher sets it in each worker (and torchrun) before
  exec, and every worker and rank sets it again for itself. If the parent is already gone
  when it is set, the process ends at once.
- ``watch_parent()``: a daemon thread in a per-cell pytest job that polls its parent every
  ``POLL_S``; when the parent is gone (Snakemake was killed) it SIGKILLs the worker process
  groups it started (``adopt``) and exits. Polling because the parent-death signal follows
  the parent *thread*, and Snakemake starts jobs from a thread pool.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import threading

PR_SET_PDEATHSIG = 1
POLL_S = 0.5
_adopted: set[int] = set()


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel for ``sig`` when the parent dies; True if that is in force (Linux)."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        ok = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if ok and os.getppid() != parent:  # the parent died before the signal was armed
        os.kill(os.getpid(), sig)
    return ok


def adopt(pgid: int) -> None:
    """A worker process group to kill if this process's parent dies."""
    _adopted.add(pgid)


def release(pgid: int) -> None:
    _adopted.discard(pgid)


def kill_adopted() -> None:
    for pgid in list(_adopted):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def watch_parent(poll_s: float = POLL_S) -> threading.Thread:
    """Start the watchdog thread (see the module docstring)."""
    parent = os.getppid()

    def watch():
        stop = threading.Event()
        while not stop.wait(poll_s):
            if os.getppid() != parent:
                kill_adopted()
                os._exit(128 + signal.SIGKILL)

    thread = threading.Thread(target=watch, name="ftmb-lifeline", daemon=True)
    thread.start()
    return thread
