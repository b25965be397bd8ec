"""A warm sim worker: imports once, runs each cell in a fresh fork of itself.

    python -m bench.worker.sim.server          # started by bench/search/simpool.py, never by hand

A fresh sim worker spends about 5 s importing torch, transformers, peft, bitsandbytes and
DeepSpeed before its first fake op. This process pays that once, then reads one request per
line on stdin, ``{"spec": SPEC.json, "out": RECORD.json, "log": LOG}``, and for each forks a
child that runs exactly what ``python -m bench.worker SPEC.json RECORD.json`` runs
(``bench.worker.main.main``), with stdout and stderr to LOG. The parent never runs a step, so
every child starts from the same state: the imports, nothing else (no model, no fake-tensor
cache entries, no tracker). A child's record is the record of that cell run alone in a fresh
process, to the byte outside the fields bench/records/identical.py excludes (tests/test_fits.py
``test_warm_worker_record_is_the_fresh_process_record``).

Replies, one JSON line each on stdout: ``{"ready": pid}`` once imported, then per request
``{"pid": child}`` when it starts and ``{"exit": code}`` when it ends (a negative code: killed
by that signal). Only sim cells come here: cpu and cuda cells keep their own fresh process
(bench/runner/launch.py). The server dies with its parent (bench/runner/lifeline.py) and its children with it.
"""
from __future__ import annotations

import json
import os
import sys


def _warm() -> None:
    """Import what a sim cell imports (bench/worker/main.py, simulate.py and what they load),
    fill the library caches every cell fills the same way, then freeze what exists so that no
    child's collection walks it.

    - DeepSpeed and accelerate's estimator: the peers (bench/worker/sim/peers.py), about half of
      a 7B cell's record-building tail when each child imports them itself.
    - transformers' checkpoint conversion table: peft's ``inject_adapter`` builds it on first use
      (~860 regular expressions compiled: 0.23 s of a 2-layer LoRA step under cProfile) and keeps
      it in a module global; it names no model, so every cell's table is the same.
    - ``gc.freeze()``: sim collects before its step (bench/worker/sim/fakestep.FakeRun); in a
      fork of this process that walked the ~450k objects of the imports each time (~0.25 s a
      step, three or four steps a cell). Frozen, they are never collected: import-time objects,
      none of them a tensor of any cell.

    None of this touches what a step allocates: a child's record stays the record of the cell
    run alone in a fresh process (tests/test_fits.py, bench.reproduce)."""
    import gc

    import accelerate.commands.estimate  # noqa: F401
    import bitsandbytes  # noqa: F401
    import deepspeed.runtime.zero.stage3  # noqa: F401
    import deepspeed.runtime.zero.stage_1_and_2  # noqa: F401
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import conversion_mapping

    from bench.worker import main  # noqa: F401
    from bench.worker.sim import simulate  # noqa: F401
    conversion_mapping.get_checkpoint_conversion_mapping("llama")
    gc.collect()
    gc.freeze()


def _child(req: dict) -> int:
    fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    sys.stderr = os.fdopen(2, "w", buffering=1)
    from bench.worker import main
    try:
        return main.main(req["spec"], req["out"])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve(inp) -> None:
    from bench.runner import lifeline
    lifeline.die_with_parent()
    out = os.fdopen(os.dup(1), "w")  # replies only: what libraries print goes to stderr
    os.dup2(2, 1)
    _warm()
    reply = out.write
    reply(json.dumps({"ready": os.getpid()}) + "\n")
    out.flush()
    for line in inp:
        if not line.strip():
            continue
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: one cell, then gone (os._exit: no parent's atexit, no flush of its buffers)
            code = 1
            try:
                code = _child(req)
            finally:
                os._exit(code)
        reply(json.dumps({"pid": pid}) + "\n")
        out.flush()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        reply(json.dumps({"exit": code}) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.stdin)
