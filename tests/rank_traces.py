"""A real rank's allocation trace, read as a GPU rank would hold it: shared by the tests that
compare sim's ranks with real multi-process CPU runs (FSDP2: tests/test_sim_ranks.py; DeepSpeed
ZeRO: tests/test_sim_deepspeed.py).

gloo's copy of a reduce-scatter's input: under gloo, ``reduce_scatter_tensor`` copies its whole
input inside the collective (the tracker sees the storage born under ``aten.split``, the first op
to touch it) and frees it from gloo's worker thread, so whether it is still alive at the next
allocation is a race (DeepSpeed ZeRO-3 offload at world size 4, tiny-llama: rank 3 held it through
the next 16 MB cast in 1 run of 5, 74.43 MB against 66.27 MB). NCCL reduces in place and the fake
process group makes none, so the comparisons take it out of the real trace first.

A scalar's free can race the same way: DeepSpeed ZeRO-2's gradient-norm check under QLoRA at world size 2
(tiny-llama) freed its 4-byte ``aten.pow`` result before the next ``isinf`` in 10 runs of 11 and after the
``lift_fresh`` that follows in the 11th, so the optimizer phase's peak read 4 bytes higher once (CI, stop 58).
Phase peaks are compared within ``SCALAR_RACE`` of the named differences.
"""
from __future__ import annotations

GLOO_COPY_OP = "aten.split.Tensor"
SMALL = 4096
SCALAR_RACE = 16  # bytes: a few 4-byte scalars whose frees race the collective's thread
# bitsandbytes' backward dequantizes each 4-bit weight to fp32 and casts it in sim, to the compute dtype at once on
# the CPU backend (transient, as single-process QLoRA shows)
BNB_BACKWARD_OPS = {"bitsandbytes.dequantize_4bit.default", "aten._to_copy.default"}


def events(trace: dict, drop_op: str | None = None) -> list[tuple]:
    """(kind, serial, bytes, step, phase, op name, category) of every event, without the
    allocations of ``drop_op`` and their frees."""
    col, ops, phases, cats = trace["columns"], trace["ops"], trace["phases"], trace["categories"]
    out, dropped = [], set()
    for i in range(len(col["kind"])):
        op = ops[col["op"][i]]
        if col["kind"][i] and op == drop_op:
            dropped.add(col["serial"][i])
        elif col["serial"][i] not in dropped:
            out.append((col["kind"][i], col["serial"][i], col["bytes"][i], col["step"][i], phases[col["phase"][i]],
                        op, cats[col["category"][i]]))
    return out


def peaks(trace: dict, drop_op: str | None = None) -> tuple[int, dict, dict]:
    """(peak, {phase: peak}, {category: bytes at the peak}) of the step, from the trace."""
    live, total, peak, by_phase, at_peak = {}, 0, 0, {}, {}
    for kind, serial, nbytes, _step, phase, _op, cat in events(trace, drop_op):
        if kind:
            live[serial] = (nbytes, cat)
            total += nbytes
            if phase != "other" and total > by_phase.get(phase, 0):
                by_phase[phase] = total
            if phase != "other" and total > peak:
                peak = total
                at_peak = {}
                for nb, c in live.values():
                    at_peak[c] = at_peak.get(c, 0) + nb
        else:
            total -= live.pop(serial, (0, None))[0]
    return peak, by_phase, at_peak


def step_allocations(trace: dict, drop_op: str | None = None, qlora: bool = False) -> dict:
    """{(step, phase): [(bytes, op), ...]}: each step's allocations of at least ``SMALL`` bytes
    (with ``qlora``, without bitsandbytes' backward dequantization and its cast)."""
    out: dict = {}
    for kind, _serial, nbytes, step, phase, op, _cat in events(trace, drop_op):
        if qlora and phase == "backward" and op in BNB_BACKWARD_OPS:
            continue
        if kind and step >= 0 and nbytes >= SMALL:
            out.setdefault((step, phase), []).append((nbytes, op))
    return out


def rank_and_real_allocations(real: dict, sim: dict, qlora: bool = False) -> tuple[dict, dict]:
    """(sim's rank, the real peak rank) ``step_allocations``, gloo's copies out of the real trace; every real
    rank must have run."""
    from bench.estimate import replay
    assert real["status"] == "ok", real["reason"]
    assert [r["status"] for r in real["details"]["ranks"]] == ["ok"] * real["world_size"]
    real_trace = replay.load(real["details"]["trace_file"])  # the peak rank's
    return step_allocations(sim["_trace"], qlora=qlora), step_allocations(real_trace, GLOO_COPY_OP, qlora=qlora)


def rank_and_real_peaks(real: dict, sim: dict) -> tuple[tuple, tuple]:
    """(sim's rank, the real peak rank) ``peaks``, gloo's copies out of the real trace; sim's peak read off its
    trace is its record's."""
    from bench.estimate import replay
    real_peaks = peaks(replay.load(real["details"]["trace_file"]), GLOO_COPY_OP)
    sim_peaks = peaks(sim["_trace"])
    assert sim_peaks[0] == sim["peak_bytes"]
    return sim_peaks, real_peaks


def live_at_forward_end(trace: dict, step: int, drop_op: str | None = None) -> dict:
    """{category: bytes} alive at the last event of ``step``'s forward phase."""
    evs = events(trace, drop_op)
    last = max(i for i, e in enumerate(evs) if e[3] == step and e[4] == "forward")
    live = {}
    for kind, serial, nbytes, _step, _phase, _op, cat in evs[:last + 1]:
        if kind:
            live[serial] = (nbytes, cat)
        else:
            live.pop(serial, None)
    out: dict = {}
    for nbytes, cat in live.values():
        out[cat] = out.get(cat, 0) + nbytes
    return out
