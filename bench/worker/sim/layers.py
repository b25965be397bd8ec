"""A decoder of L identical layers, simulated with 2, 3 and 4 layers and extended to L, exactly.

    layers.extended(spec, cuda_model) -> measure.Measured for L layers, or None (run the full step)

A sim step's cost grows with the layer count (a 28-layer 7B step: ~0.3 s a layer, ~9 s in all)
while what the layers add is the same each time: their parameters, their activations, their
ops. So the step is simulated three times in fresh forks of this process (the state a full
run starts from), with the model config's ``num_hidden_layers`` set to k = 2, k + 1 and k + 2,
and the L-layer step is built from the first two and checked against the third
(bench/worker/sim/extension.py: the trace with each layer's block of events repeated, every
other figure linear in the layer count). The three run at once, in forks sharing the cores.

Verified, or not used: the extension must give the k + 2 simulation's trace event for event
and the tracker's peaks at k, k + 1, k + 2 and L (a peak that moves to another place as
layers are added is caught here, not extrapolated). Where k = 2 does not verify, k = 4 is
tried once (a peak still moving between 2 and 4 layers has mostly settled by 4). Any
difference, and any cell outside what this covers (ZeRO, partitioned by formula or per rank, compile, a
model whose layers are not all alike: ``eligible``), runs the full step instead; the worker log says which and why.
A cell sim runs as one rank runs it (FSDP2, bench/worker/sim/rankgroup.py) extends the same way, as do
the single-process step beside it: each decoder layer is one FSDP unit, so its all-gathers,
reduce-scatters and prefetches repeat with the layers, and the same verification holds them.
The record is the same either way (tests/test_sim_layers.py holds extended and full records equal, field for field).
"""
from __future__ import annotations

import json
import os
import pickle
import tempfile
import traceback
from pathlib import Path

from bench.runner import lifeline
from bench.cells import techniques
from bench.worker import train
from bench.worker.progress import say
from bench.worker.sim import measure
from bench.worker.sim.extension import NotExact, extend

BASE = 2            # layers of the smallest simulation: (k, k + 1) extend, k + 2 checks
RETRY_BASE = 4      # where 2, 3, 4 do not verify: 4, 5, 6 (peaks settle with a few more layers)
MIN_LAYERS = 10     # below this the three small steps cost about what the full one does
MODEL_TYPES = ("llama", "qwen2")  # decoders whose layers are all alike (checked on the config too)


def eligible(spec: dict, min_layers: int | None = None) -> str:
    """'' when the cell's step may be extended from fewer layers, else why not."""
    min_layers = MIN_LAYERS if min_layers is None else min_layers
    knobs = spec["knobs"]
    if knobs["dist"] and not techniques.traced_per_rank(spec):
        return f"{knobs['dist']}: sharded steps are partitioned from the full step"
    if str(knobs["dist"]).startswith("zero"):
        # DeepSpeed's rank holds its share of one flat buffer, whose boundaries fall elsewhere in the
        # parameters as layers are added (the optimizer's per-piece norms differ), and ZeRO-3's prefetch of
        # the next parameters runs ahead by a byte budget, not by layers: the three small steps never verify
        return f"{knobs['dist']}: a rank's ZeRO partition does not repeat layer by layer"
    if knobs["compile"]:
        return "compile: compiled layers"
    if knobs.get("workload", "train") != "train":
        return "not a training step"
    raw = json.loads(Path(spec["model_config"]).read_text())
    layers = raw.get("num_hidden_layers")
    if raw.get("model_type") not in MODEL_TYPES:
        return f"model type {raw.get('model_type')} (layers may differ)"
    if not isinstance(layers, int) or layers < min_layers:
        return f"{layers} layers (fewer than {min_layers})"
    if raw.get("use_sliding_window"):
        return "sliding-window layers"
    per_layer = [k for k, v in raw.items() if isinstance(v, list) and len(v) == layers]
    if per_layer:
        return f"per-layer settings {per_layer}"
    return ""


def _config(spec: dict, layers: int, folder: str) -> str:
    raw = json.loads(Path(spec["model_config"]).read_text())
    path = Path(folder, f"layers{layers}.json")
    path.write_text(json.dumps(dict(raw, num_hidden_layers=layers)))
    return str(path)


def _layer_types(path: str) -> set:
    from bench.worker import models
    config = models.load_config(path, "sdpa")
    return set(getattr(config, "layer_types", None) or ["(none)"])


def extended(spec: dict, cuda_model: bool = True, min_layers: int | None = None, meanwhile=None,
             per_rank: bool = True):
    """The L-layer step's ``measure.Measured``, built from three small simulations and
    verified; None when the cell is not eligible or the extension does not verify. From 2
    layers first; where that does not verify (a peak that is still moving between 2 and 4
    layers, most often), once more from ``RETRY_BASE``. ``meanwhile``, if given, is called
    once in this process while the first three small simulations run (their forks already
    started: nothing it does reaches them). ``per_rank``: as ``measure.measure``'s (a cell sim runs as
    one rank runs it: False for the single-process step beside it)."""
    why = eligible(spec, min_layers)
    if why:
        say(f"layers: full step ({why})")
        return None
    layers = json.loads(Path(spec["model_config"]).read_text())["num_hidden_layers"]
    # a rank's step from 4 layers at once: at 2 its last unit's buffers are nearer the step's start than its end,
    # and the extension does not verify (bench/worker/sim/extension.py ``encode``: a refill's nearest serial)
    for base in (RETRY_BASE,) if per_rank and techniques.traced_per_rank(spec) else (BASE, RETRY_BASE):
        if base + 2 >= layers:
            break
        m, why = _from(spec, base, layers, cuda_model, meanwhile, per_rank)
        meanwhile = None
        if m is not None:
            say(f"layers: {layers} layers extended from {base}, {base + 1} (verified exact at {base + 2})")
            return m
        say(f"layers: not from {base} layers ({why})")
        if why.startswith(("layer types", "a small")):
            break
    say("layers: full step")
    return None


def _from(spec: dict, base: int, layers: int, cuda_model: bool, meanwhile=None, per_rank: bool = True):
    """(Measured, '') of the L-layer step from ``base``, ``base`` + 1 and ``base`` + 2 layers, or
    (None, why not)."""
    counts = (base, base + 1, base + 2)
    with tempfile.TemporaryDirectory(prefix="ftmb-layers-") as tmp:
        paths = {n: _config(spec, n, tmp) for n in counts}
        kinds = [_layer_types(p) for p in (spec["model_config"], *paths.values())]
        if any(len(k) != 1 or k != kinds[0] for k in kinds):
            return None, f"layer types {kinds}"
        say(f"layers: simulating {', '.join(map(str, counts))} of {layers} layers")
        parts = _in_forks([(dict(spec, model_config=paths[n]), Path(tmp, f"part{n}.pickle")) for n in counts],
                          cuda_model, meanwhile, per_rank)
        if any(p is None for p in parts):
            return None, "a small simulation failed"
    try:
        return extend(spec, parts, layers - base, cuda_model), ""
    except NotExact as exc:
        return None, f"extension not exact: {exc}"


def _in_forks(jobs: list, cuda_model: bool, meanwhile=None, per_rank: bool = True) -> list:
    """``measured_part`` of each (spec, path) in ``jobs``, each simulated in its own fork of
    this process (the state a fresh run of the cell starts from), all at once (three steps of
    2, 3 and 4 layers share two cores sooner than two then one: the longest no longer waits for
    a core), then ``meanwhile()`` here; None for any that failed (the log has why)."""
    import sys
    running, parts = {}, [None] * len(jobs)
    try:
        for index, (spec, path) in enumerate(jobs):
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    lifeline.die_with_parent()  # a cell killed at its limit takes these with it
                    part = measured_part(spec, cuda_model, per_rank)
                    with open(path, "wb") as fh:
                        pickle.dump(part, fh)
                    code = 0
                except BaseException:  # noqa: BLE001 - any failure: the parent runs the full step
                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            running[pid] = (index, path)
        if meanwhile is not None:
            meanwhile()
    finally:
        while running:
            _reap(running, parts)
    return parts


def _reap(running: dict, parts: list) -> None:
    """Wait for the oldest fork still running (by pid: other children of this process are
    not ours to reap)."""
    pid = next(iter(running))
    _, status = os.waitpid(pid, 0)
    index, path = running.pop(pid)
    if os.waitstatus_to_exitcode(status) == 0 and path.is_file():
        with open(path, "rb") as fh:
            parts[index] = pickle.load(fh)


def measured_part(spec: dict, cuda_model: bool, per_rank: bool = True) -> dict:
    """What the extension reads from one small simulation (plain data: it crosses a fork)."""
    import gc

    # FakeRun's own order (collect, then no cyclic collector in the step), and the collector
    # left off after it: this fork only pickles what it measured and exits, and the
    # collection that re-enabling starts walks every object the step made (~4% of a part)
    gc.collect()
    gc.disable()
    m = measure.measure(spec, cuda_model, per_rank)
    t = m.tracker
    return {"out": m.out, "phases": m.phases, "flops": m.flops, "paged": m.paged, "cost": cost_state(m.cost),
            "trace": t.trace(spec["knobs"]["alloc_conf"]), "raw_events": len(t.events) + t.dropped_events,
            "reset_allocs": sum(1 for ev in t.events[:t.trace_reset_at] if ev[0]),
            "rss": train.host_peak_rss(), "facts": m.facts,
            "per_rank": per_rank and techniques.traced_per_rank(spec)}


COST_FIELDS = ("flops_by_dtype", "ops", "memory", "bytes_moved", "nf4", "recompute_flops", "pcie", "tokens")


def cost_state(cost) -> dict:
    return {k: getattr(cost, k) for k in COST_FIELDS}


