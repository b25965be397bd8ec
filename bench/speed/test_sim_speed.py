"""What sim's memory counting costs on a full-size step: one benchmark, three ways.

    pytest bench/speed/test_sim_speed.py --benchmark-json out.json

A Qwen2.5-7B-sized full fine-tune step (batch 1, seq 1024, torch AdamW with foreach, the
first step, which allocates the optimizer state) under fake tensors, timed:

- untracked: the fake step alone (the floor),
- ours: the same step under sim's tracker (bench/worker/sim/fakestep.sim_tracker),
- torch: the same step under torch's MemTracker (torch.distributed._tools.mem_tracker).

Targets: ours within 1.5x of untracked, at least 5x faster than torch's, and both trackers
give the same peak bytes (counted exactly: the CUDA rounding and kernel workspaces that only
ours models are off here). The timings, ratios and peaks go into ``benchmark.extra_info``;
they are data, asserted after they are saved. The test id names no model or technique, so
``-k <cell>`` selections (``-k zero3``, ``-k qwen2.5-7b``) leave it out.
"""
import contextlib
import time

import torch

from bench.worker.sim import fakestep, measure, simulate
from bench.cells import matrix
from bench.speed.study import STUDY
from bench.worker import train



class Untracked:
    """The tracker interface bench.worker.train.Session and sim's FakeRun call, counting nothing."""
    peak = total = 0

    def __init__(self):
        self.op_hooks = []  # FakeRun adds its FLOP hook here; nothing calls it

    def mark(self, *args):
        pass

    def track(self, tensor):
        return 0

    def in_phase(self, phase):
        return contextlib.nullcontext()


def one_step(spec, how: str) -> tuple[float, int | None]:
    """(seconds, peak bytes) of the first training step, counted ``how``."""
    tracker = fakestep.sim_tracker(cuda_model=False) if how == "ours" else Untracked()
    with fakestep.FakeRun(spec, tracker, cuda_model=False) as fake, \
            (tracker if how == "ours" else contextlib.nullcontext()):
        session = train.Session(spec, "cpu", tracker)
        batch = next(fake.batches(session, train.data.batches(
            "fixed", spec["batch_size"], spec["seq_len"], session.model.config.vocab_size, 1, 0, "cpu")))
        if how == "torch":
            from torch.distributed._tools.mem_tracker import MemTracker
            mt = MemTracker()
            mt.track_external(session.model, session.optimizer,  # and the batch, which ours counts too
                              *[v for v in batch.values() if isinstance(v, torch.Tensor)])
            t0 = time.perf_counter()
            with mt:
                session.step(batch)
            dt = time.perf_counter() - t0
            peak = sum(snap["Total"] for snap in mt.get_tracker_snapshot("peak").values())
            mt.reset_mod_stats()
            return dt, peak
        t0 = time.perf_counter()
        session.step(batch)
        return time.perf_counter() - t0, (tracker.peak if how == "ours" else None)


def test_sim_tracker_overhead(benchmark, tmp_path):
    path = tmp_path / "speed.yaml"
    path.write_text(f"models_dir: {matrix.DEFAULT_MATRIX.parent / 'models'}\n"
                    f"gpus_file: {matrix.DEFAULT_MATRIX.parent / 'gpus.yaml'}\n{STUDY}")
    spec = measure.single_process(matrix.load(path)["qwen2.5-7b__sim__baseline"])
    one_step(spec, "untracked")  # imports and first-call caches out of the timings

    def three_ways():
        return {how: one_step(spec, how) for how in ("untracked", "ours", "torch")}

    res = benchmark.pedantic(three_ways, rounds=1, iterations=1)
    info = {f"{how}_s": round(dt, 3) for how, (dt, _) in res.items()}
    info.update(ours_peak_bytes=res["ours"][1], torch_peak_bytes=res["torch"][1],
                ours_over_untracked=round(res["ours"][0] / res["untracked"][0], 3),
                torch_over_ours=round(res["torch"][0] / res["ours"][0], 2),
                shape="qwen2.5-7b, batch 1, seq 1024, AdamW foreach, first step")
    benchmark.extra_info.update(info)
    assert info["ours_peak_bytes"] == info["torch_peak_bytes"]
    assert info["ours_over_untracked"] <= 1.5, info
    assert info["torch_over_ours"] >= 5, info


LAYERS_CELL = "qwen2.5-7b__sim__lora+gc+bf16"


def _forked(fn, *args):
    """(seconds, result, what it printed) of ``fn(*args)`` in a fork of this process (imports
    warm, nothing else run in it: what the warm sim server's child does), timed in the child."""
    import io
    import os
    import pickle
    import tempfile
    from contextlib import redirect_stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.pickle")
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                printed = io.StringIO()
                with redirect_stdout(printed):
                    t0 = time.perf_counter()
                    out = fn(*args)
                    dt = time.perf_counter() - t0
                out.pop("_trace", None)
                with open(path, "wb") as fh:
                    pickle.dump((dt, out, printed.getvalue()), fh)
                code = 0
            finally:
                os._exit(code)
        os.waitpid(pid, 0)
        with open(path, "rb") as fh:
            return pickle.load(fh)


def test_sim_layer_extension(benchmark):
    """One warm 7B evaluation (Qwen2.5-7B lora+gc+bf16, batch 1 x 2048: bench/speed/test_fits_speed.py's
    cell) two ways in the same conditions: the full 28-layer step, and the step simulated with
    2, 3 and 4 layers and extended (bench/worker/sim/layers.py). Asserted on the saved data:
    the two records are identical, the extension was used, and it is at least 1.5x faster.
    The target, <= 2 s a warm evaluation, is recorded (``meets_target``), not asserted."""
    import json

    from bench.records import identical
    from bench.worker.sim import layers, server

    server._warm()  # this process as the warm server is when it forks a cell: imports, caches, frozen

    spec = matrix.load()[LAYERS_CELL]

    def both():
        return _forked(lambda: simulate.finish(spec, measure.measure(spec))), _forked(simulate.run, spec)

    (full_s, full, _), (ext_s, ext, log) = benchmark.pedantic(both, rounds=1, iterations=1)
    differences = [str(d) for d in identical.compare(json.loads(json.dumps(full)), json.loads(json.dumps(ext)))]
    info = {"full_step_s": round(full_s, 2), "extended_s": round(ext_s, 2),
            "speedup": round(full_s / ext_s, 2), "extended": layers.eligible(spec) == "" and "extended from" in log,
            "differences": differences, "target_s": 2.0, "meets_target": ext_s <= 2.0,
            "shape": f"{LAYERS_CELL}, batch 1 x 2048, warm (a fork of an imported process)"}
    benchmark.extra_info.update(info)
    assert info["differences"] == [], info
    assert info["extended"], info
    assert info["speedup"] >= 1.5, info
