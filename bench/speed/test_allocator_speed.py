"""What replaying a full-size step through the allocator model costs: one benchmark.

    pytest bench/speed/test_allocator_speed.py --benchmark-json out.json

The trace is a Qwen2.5-7B full fine-tune (batch 1, seq 1024, torch AdamW, warm-up step +
one step: the first allocates the optimizer state), recorded by sim's tracker; building it
takes a minute (a fake step), replaying it is what is timed: the default allocator and
``expandable_segments:True``, each replayed whole with its timeline (bench/estimate/replay.py),
and the steady-state replay a record reads (``steady``: ``replay.settled``, the trace with its last
step repeated until a repetition reserves nothing new, bench/estimate/steady.py, default allocator).
Target: <= 1 s a replay on the 2-core reference machine. The timings, event count and
modelled peaks go into ``benchmark.extra_info`` before the target is asserted. The test id
names no model or technique, so ``-k <cell>`` selections leave it out.
"""
import time

from bench.speed.study import STUDY
from bench.estimate import replay
from bench.cells import matrix
from bench.worker.sim import measure

TARGET_S = 1.0


def test_allocator_replay_speed(benchmark, tmp_path):
    path = tmp_path / "speed.yaml"
    path.write_text(f"models_dir: {matrix.DEFAULT_MATRIX.parent / 'models'}\n"
                    f"gpus_file: {matrix.DEFAULT_MATRIX.parent / 'gpus.yaml'}\n{STUDY}")
    spec = measure.single_process(matrix.load(path)["qwen2.5-7b__sim__baseline"])
    _, tracker, _ = measure.simulate_step(spec)
    trace = tracker.trace()

    def both():
        out = {}
        for name, conf in (("default", None), ("expandable", "expandable_segments:True"), ("steady", None)):
            t0 = time.perf_counter()
            res = replay.settled(trace, conf)[0] if name == "steady" else replay.replay(trace, conf)
            out[name] = (time.perf_counter() - t0, res)
        return out

    res = benchmark.pedantic(both, rounds=3, iterations=1)
    info = {f"{name}_s": round(dt, 3) for name, (dt, _) in res.items()}
    for name, (_, r) in res.items():
        info.update({f"{name}_reserved_peak_bytes": r["reserved_peak_bytes"],
                     f"{name}_allocated_peak_bytes": r["allocated_peak_bytes"],
                     f"{name}_segment_allocs": r["segment_allocs"]})
    info.update(events=len(trace["columns"]["kind"]), shape="qwen2.5-7b, batch 1, seq 1024, AdamW, 2 steps")
    benchmark.extra_info.update(info)
    assert max(info["default_s"], info["expandable_s"], info["steady_s"]) <= TARGET_S, info
