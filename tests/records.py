"""Made-up records for the report's tests: invented numbers that exercise the table, the page,
the charts and the claims; they measure nothing. One home for them (an importable module of
the tests package), used by tests/test_report*.py."""
from __future__ import annotations

import json
from pathlib import Path

from bench.estimate import verdicts as verdict_rules
from bench.records import checks, record
from bench.cells import techniques
from report import GIB

ROOT = Path(__file__).resolve().parents[1]
EVIL = "<script>alert(1)</script>"
# GPU capacities of the made-up records (the first two as a matrix's gpus.yaml says; others invented).
CAPACITY = {"a100-80g": 80 * GIB, "h100-80g": 80 * GIB, "rtx-4090": 24 * GIB, "cpu-24g": 24 * GIB, "cpu": 24 * GIB,
            "h100-80gb": 85045477376, "l40s": 47576711168, "rtx-a6000": 51160023040, "t4": 15828320256, "my-46g": 46 * GIB}
SIM_GPUS = ("a100-80g", "rtx-4090")


def spec(model, gpu, techs, mode="cuda", verdict_gpus=SIM_GPUS, **kw):
    """A cell spec as bench.cells.matrix makes one: knobs from the catalogue, capacities per mode."""
    names = [t for t in techs if t != "baseline"]
    return {"cell": f"{model}__{gpu}__{'+'.join(techs)}", "model": model, "gpu": gpu,
            "techniques": list(techs), "knobs": techniques.knobs(names), "mode": mode, "world_size": 1,
            "batch_size": 4, "seq_len": 512, "steps": 3, "warmup_steps": 1,
            "gpu_memory_bytes": None if mode == "sim" else CAPACITY.get(gpu, 16 * GIB),
            "verdict_gpus": {g: {"memory_bytes": CAPACITY.get(g, 16 * GIB)} for g in verdict_gpus} if mode == "sim" else {}} | kw


SPEED_COST = {"flops_by_dtype": {"bfloat16": 10**15}, "bytes_moved": 10**11, "nf4_dequant_bytes": 0,
              "recompute_flops": 0, "comm_bytes_per_rank": 0, "tokens_per_step": 2048, "world_size": 1,
              "how": "made up"}
SPEED_ESTIMATE = {"step_s": 4.0, "tokens_per_s": 512.0, "provenance": "modelled", "how": "made up"}


def loss_details(sp) -> dict:
    """The loss an ok training record carries (record version 2): made up in cpu/cuda; in sim
    none, and what stands in."""
    if sp["mode"] == "sim":
        return {"final_loss": None, "losses": [None], "loss_check": "sim: fake tensors carry no values"}
    return {"final_loss": 10.4, "losses": [10.5, 10.4]}


def contract_details(sp, **given) -> dict:
    """The details keys the record contract asks of an ok record of ``sp`` (record.REPORT_DETAILS),
    with made-up values, then ``given``. Generation and engine plans prove no training facts."""
    if sp["knobs"].get("workload", "train") != "train":
        return dict(given)
    out = {"optimizer_state_dtypes": ["float32"], **loss_details(sp)}
    if sp["mode"] == "sim":
        out.update(verdict_rule="fits: need <= 90%", verdict_reserve_bytes=verdict_rules.RESERVE_BYTES, verdict_notes={}, peers=[],
                   step_cost=SPEED_COST, speed_model={"a100-80g": dict(SPEED_ESTIMATE)})
        if sp["knobs"]["dist"]:
            out["zero_partitioning"] = f"analytic: {sp['knobs']['dist']} at world size {sp['world_size']}"
    if sp["mode"] == "cuda":
        out["device_name"] = "NVIDIA Test GPU"
    if sp["mode"] != "sim":
        out["timing_load"] = {"contended": False, "other_cores": 0.0, "own_cores": 1.0}
    return out | given


def ok(sp, gib: dict, tokens_per_s=None, flops=None, with_study=True, verdicts=None):
    """An ok record whose breakdown (in GiB, categories left out are 0) sums to its peak."""
    rec = record.blank(sp)
    bd = {c: int(gib.get(c, 0) * GIB) for c in record.CATEGORIES}
    peak = sum(bd.values())
    rec.update(status="ok", breakdown_bytes=bd, peak_bytes=peak,
               phase_peak_bytes={"forward": peak // 2, "backward": peak, "optimizer": peak - 1},
               step_peak_bytes=[peak, peak, peak], versions={"torch": "2.13.0", "python": "3.12"},
               machine={"host": "ci-box", "cpu_count": 2}, params_total=10**9, params_trainable=10**9,
               details=contract_details(sp))
    if sp["mode"] != "sim":
        rec.update(tokens_per_s=tokens_per_s, step_s_median=2048 / tokens_per_s, host_peak_rss_bytes=GIB)
    else:
        rec.update(flops_per_step=flops, verdicts=verdicts or {"a100-80g": "fits", "rtx-4090": "oom"})
        if flops:   # a made-up estimate that follows the FLOPs, so cells differ in modelled step time
            step_s = SPEED_ESTIMATE["step_s"] * flops / 1e15
            rec["details"]["speed_model"]["a100-80g"].update(step_s=step_s, tokens_per_s=2048 / step_s)
    if with_study:
        rec.update(study="demo", baseline_cell=f"{sp['model']}__{sp['gpu']}__baseline")
    replayed(rec)
    assert checks.problems(rec) == [], checks.problems(rec)
    return rec


def replayed(rec: dict) -> dict:
    """Give a made-up ok sim record the allocator replay its verdicts follow from, as the sim
    worker's records carry one (bench/records/agreement.py re-derives the verdicts from it): the
    reserved peak is the record's ``modelled_reserved_peak_bytes`` where given, else the peak if
    the verdicts allow it, else the least one they allow; "oom" GPUs get a failed allocation.
    Made-up verdicts that no reserved peak explains fail the record gate, as they should."""
    if rec["mode"] != "sim" or rec["status"] != "ok" or rec["knobs"].get("workload") == "vllm" \
            or rec.get("allocator_model"):
        return rec
    rec["details"]["verdict_reserve_bytes"] = verdict_rules.RESERVE_BYTES
    # made-up GPUs of no named arch: cuBLAS's workspaces at torch's non-sm90 default
    profiles = {g: {"kind": "cuda", "memory_bytes": b} for g, b in rec["verdict_gpu_memory_bytes"].items()}
    rec["details"]["blas_workspaces"] = verdict_rules.blas_details(profiles)
    caps = {g: verdict_rules.capacity(p) for g, p in profiles.items()}
    said = rec["verdicts"] or {}
    above = max((caps[g] + 1 for g, v in said.items() if v != "fits"), default=0)  # the least reserved peak
    peak, frag = rec["peak_bytes"], 0
    if rec["knobs"]["dist"]:  # reserved = the partitioned peak + fragmentation; "tight": the peak alone fits
        frag = max(0, max((caps[g] + 1 for g, v in said.items() if v == "tight"), default=0) - peak)
        reserved = peak + frag
    else:
        reserved = rec["modelled_reserved_peak_bytes"] or max(peak, above)
    rec["modelled_reserved_peak_bytes"] = reserved
    rec["allocator_model"] = {
        "reserved_peak_bytes": reserved, "fragmentation_at_peak_bytes": frag, "unified_peak_bytes": 0,
        "capacity_bytes_by_gpu": caps,
        "first_oom": {g: {"step": 0, "bytes": GIB} if said.get(g) == "oom" and reserved > caps[g] else None
                      for g in caps}}
    return rec


def made(sp, nbytes: dict, **fields):
    """An ok record with the breakdown ``nbytes`` (bytes; categories left out are 0) summing to
    its peak, and any other record fields given; checked against the record contract."""
    rec = record.blank(sp)
    bd = {c: int(nbytes.get(c, 0)) for c in record.CATEGORIES}
    peak = sum(bd.values())
    rec.update(status="ok", breakdown_bytes=bd, peak_bytes=peak, step_peak_bytes=[peak, peak],
               phase_peak_bytes=dict.fromkeys(record.PHASES, peak) if sp["knobs"].get("workload", "train") == "train"
               else None, params_total=10**6, params_trainable=10**6,
               versions={"torch": "2.13.0"}, machine={"host": "ci-box"},
               details=contract_details(sp, **fields.pop("details", {})))
    if sp["mode"] != "sim":
        rec.update(tokens_per_s=1000.0, step_s_median=2.0, host_peak_rss_bytes=GIB)
    rec.update(fields)
    replayed(rec)
    assert checks.problems(rec) == [], checks.problems(rec)
    return rec


def failed(sp, status, reason):
    rec = record.failure(sp, status, reason)
    rec.update(study="demo", baseline_cell=f"{sp['model']}__{sp['gpu']}__baseline")
    return rec


BASE = {"parameters": 4, "gradients": 4, "optimizer": 8, "activations": 6, "temporaries": 1, "other": 0.5}


def demo_records() -> list[dict]:
    m, g = "llama-3.2-1b", "a100-80g"
    recs = [
        ok(spec(m, g, ["baseline"]), BASE, tokens_per_s=1000),
        ok(spec(m, g, ["lora"]), BASE | {"gradients": 0.05, "optimizer": 0.1, "activations": 5}, tokens_per_s=1100),
        ok(spec(m, g, ["gc"]), BASE | {"activations": 1}, tokens_per_s=750),
        ok(spec(m, g, ["lora", "gc", "bf16"]), {"parameters": 2, "gradients": 0.02, "optimizer": 0.05,
                                                "activations": 0.5, "temporaries": 0.3, "other": 0.2}, tokens_per_s=900),
        failed(spec(m, g, ["s8192"], seq_len=8192), "oom", "CUDA out of memory. Tried to allocate 2.00 GiB"),
        ok(spec(m, "h100-80g", ["baseline"]), BASE, tokens_per_s=2000),
    ]
    t, c = "tiny-llama", "cpu-24g"
    recs += [
        ok(spec(t, c, ["baseline"], mode="cpu"), {"parameters": 0.07, "gradients": 0.07, "optimizer": 0.15,
                                                   "activations": 0.2, "other": 0.01}, tokens_per_s=1800),
        ok(spec(t, c, ["adamw8bit"], mode="cpu"), {"parameters": 0.07, "gradients": 0.07, "optimizer": 0.04,
                                                    "activations": 0.2, "other": 0.01}, tokens_per_s=1700),
        failed(spec(t, c, ["fa2"], mode="cpu"), "skipped",
               "fa2 does not run in cpu mode: flash-attn kernels exist only for CUDA"),
        ok(spec(EVIL, c, ["baseline"], mode="cpu"), {"parameters": 0.01, "activations": 0.01}, tokens_per_s=10),
    ]
    s = "qwen2.5-7b"
    recs += [
        ok(spec(s, "sim", ["baseline"], mode="sim"), {"parameters": 28.4, "gradients": 28.4, "optimizer": 85.1,
                                                       "activations": 1.2}, flops=9.0e13,
           verdicts={"a100-80g": "oom", "rtx-4090": "oom"}),  # 143 GiB: on no card
        ok(spec(s, "sim", ["lora"], mode="sim"), {"parameters": 28.4, "gradients": 0.1, "optimizer": 0.3,
                                                   "activations": 1.0}, flops=6.1e13),
        ok(spec(s, "sim", ["bf16"], mode="sim"), {"parameters": 14.2, "gradients": 14.2, "optimizer": 42.6,
                                                   "activations": 0.6}),  # no flops: "not measured"
        failed(spec(s, "sim", ["zero3", "w2"], mode="sim", world_size=2), "error", "RuntimeError: fake tensor mismatch"),
    ]
    return recs


def bench_json(path: Path, rec: dict, mean: float = 1.5) -> Path:
    """What pytest-benchmark's --benchmark-json writes, reduced to what report.table reads."""
    doc = {"machine_info": {"node": "x"}, "benchmarks": [
        {"name": f"test_cell[{rec['cell']}]", "extra_info": rec, "stats": {"mean": mean, "rounds": 1}}]}
    path.write_text(json.dumps(doc))
    return path


def write_cells(folder: Path, recs) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [bench_json(folder / f"cell{i:02d}.json", r, mean=1.0 + i) for i, r in enumerate(recs)]



N = 10_000_000            # parameters of the made-up cpu model
M = "tiny-llama"
BIG = "llama-3.1-70b"
RULE = "fits: peak + reserve <= capacity; tight: peak <= capacity; else oom"


def cpu(techs, nbytes, **kw):
    return made(spec(M, "cpu", techs, mode="cpu", gpu_memory_bytes=24 * GIB), nbytes,
                **({"params_total": N, "params_trainable": N} | kw))


CLAIM_BASE = {"parameters": 4 * N, "gradients": 0, "optimizer": 8 * N, "activations": 20 * N, "temporaries": 10 * N}


def cpu_records():
    return [
        cpu(["baseline"], CLAIM_BASE, tokens_per_s=1000.0, details={"optimizer_state_dtypes": ["float32"]}),
        cpu(["bf16"], CLAIM_BASE | {"parameters": 2 * N, "optimizer": 4 * N}, tokens_per_s=1500.0,
            details={"optimizer_state_dtypes": ["bfloat16"]}),
        cpu(["amp-bf16"], CLAIM_BASE | {"activations": 15 * N}, tokens_per_s=1400.0),
        cpu(["gc"], CLAIM_BASE | {"activations": 5 * N}, tokens_per_s=800.0),            # step time +25%
        cpu(["adamw8bit"], CLAIM_BASE | {"optimizer": 2 * N}, tokens_per_s=990.0),       # 75% saved
        cpu(["lora"], CLAIM_BASE | {"optimizer": N // 100}, tokens_per_s=1200.0, params_trainable=N // 200),
        cpu(["ckpt-load"], CLAIM_BASE, load_host_peak_rss_bytes=GIB),
        cpu(["low-cpu-mem-usage"], CLAIM_BASE, load_host_peak_rss_bytes=int(0.99 * GIB)),  # 1%: does not hold
        cpu(["zero3"], CLAIM_BASE | {"gradients": 4 * N}, tokens_per_s=700.0),
        made(spec(M, "cpu", ["zero3", "w2"], mode="cpu", world_size=2), CLAIM_BASE | {
            "parameters": 2 * N, "gradients": 2 * N, "optimizer": 4 * N}, tokens_per_s=600.0,
            details={"ranks": [{"rank": 0, "peak_bytes": 36 * N}, {"rank": 1, "peak_bytes": 37 * N}]}),
        cpu(["padding"], CLAIM_BASE, step_peak_bytes=[30 * N, 35 * N, 33 * N, 41 * N, 41 * N]),
        cpu(["packing"], CLAIM_BASE, step_peak_bytes=[30 * N, 42 * N, 42 * N, 42 * N, 42 * N]),
    ]


def sim(techs, nbytes_gib, verdicts, flops, step_s=None, **kw):
    """A made-up 70B sim record; ``step_s``: a made-up speed-model step time on every GPU it is judged on."""
    det = {"verdict_rule": RULE, "verdict_reserve_bytes": verdict_rules.RESERVE_BYTES} | kw.pop("details", {})
    if step_s is not None:
        det["speed_model"] = {g: speed(step_s, tokens=512) for g in verdicts}
    return made(spec(BIG, "sim", techs, mode="sim", batch_size=1, seq_len=512, verdict_gpus=tuple(verdicts),
                     **kw.pop("shape", {})),
                {k: v * GIB for k, v in nbytes_gib.items()}, verdicts=verdicts, flops_per_step=flops,
                **({"params_total": 70_553_706_496} | kw), details=det)


ALL_OOM = {"h100-80gb": "oom", "l40s": "oom", "rtx-a6000": "oom", "t4": "oom"}


def sim_records():
    return [
        # made-up step times: qlora has the fewest FLOPs but dequantizes, so gc+bf16 is the faster step
        sim(["baseline"], {"parameters": 263, "optimizer": 526, "activations": 10}, ALL_OOM, 1.0e15, step_s=10.0),
        sim(["gc"], {"parameters": 131.5, "optimizer": 526, "activations": 2}, ALL_OOM, 1.33e15, step_s=13.3),
        sim(["qlora"], {"parameters": 37, "optimizer": 0.5, "activations": 3},
            {"h100-80gb": "fits", "l40s": "tight", "rtx-a6000": "fits", "t4": "oom"}, 0.7e15, step_s=7.0),
        sim(["gc", "bf16"], {"parameters": 65.75, "optimizer": 5, "activations": 1},
            {"h100-80gb": "fits", "l40s": "oom", "rtx-a6000": "oom", "t4": "oom"}, 1.2e15, step_s=4.0),
        sim(["zero3"], {"parameters": 263, "gradients": 263, "optimizer": 526, "activations": 10}, ALL_OOM, 1.0e15,
            step_s=10.5),
        sim(["zero3", "w8"], {"parameters": 16.5, "gradients": 16.5, "optimizer": 33, "activations": 10},
            {"h100-80gb": "fits", "l40s": "oom", "rtx-a6000": "oom", "t4": "oom"}, 1.0e15, step_s=12.0,
            shape={"world_size": 8}, details={"zero_partitioning": "analytic: model states / 8 ranks"}),
    ]




# ---- the lookup's made-up cells: a 7B model judged against a 24 GiB card, an 80 GiB card and a
# T4, with made-up speed-model estimates (details.speed_model, interface A) for the first two only.
# Invented numbers, shaped like the reference's: they measure nothing.
Q7 = "qwen2.5-7b"
ANSWER_GPUS = ("rtx-4090", "h100-80gb", "t4")


def speed(step_s: float, tokens: int = 2048) -> dict:
    return {"step_s": step_s, "tokens_per_s": tokens / step_s, "parts": {"compute_s": step_s * 0.8, "memory_s": step_s * 0.2},
            "efficiency": 0.5, "calibration": "made up for the tests", "how": "made-up estimate", "provenance": "modelled"}


def answer(techs, gib: dict, verdicts: dict, speeds: dict, phases=None, reserved_gib=None, dtypes=None):
    sp = spec(Q7, "sim", techs, mode="sim", batch_size=1, seq_len=2048, verdict_gpus=ANSWER_GPUS)
    nbytes = {k: v * GIB for k, v in gib.items()}
    peak = sum(int(v) for v in nbytes.values())
    fields = {"verdicts": verdicts, "flops_per_step": 1e14, "params_total": 7_615_616_512,
              "modelled_reserved_peak_bytes": int((reserved_gib or peak / GIB * 1.05) * GIB),
              "details": {"verdict_reserve_bytes": verdict_rules.RESERVE_BYTES, "verdict_rule": RULE,
                          "speed_model": {g: speed(s) for g, s in speeds.items()},
                          "dtypes": dtypes or {"weights": ["float32"], "gradients": ["float32"],
                                               "optimizer_state": ["float32"]}}}
    if phases:
        fields["phase_peak_bytes"] = {p: int(v * GIB) if v is not None else peak for p, v in phases.items()}
    return made(sp, nbytes, **fields)


BF16_LORA = {"weights": ["bfloat16", "float32"], "gradients": ["float32"], "optimizer_state": ["float32"]}


def answer_records():
    oom = dict.fromkeys(ANSWER_GPUS, "oom")
    return [
        answer(["baseline"], {"parameters": 28, "gradients": 28, "optimizer": 56, "activations": 5}, oom, {},
               phases={"forward": 40, "backward": 70, "optimizer": None}),
        # gc shrinks the forward and backward peaks; the peak (optimizer step) does not move
        answer(["gc"], {"parameters": 28, "gradients": 28, "optimizer": 56, "activations": 5}, oom, {},
               phases={"forward": 30, "backward": 60, "optimizer": None}),
        answer(["lora"], {"parameters": 28, "activations": 20}, oom | {"h100-80gb": "fits"}, {"h100-80gb": 1.1}),
        answer(["lora", "gc"], {"parameters": 28, "activations": 5}, oom | {"h100-80gb": "fits"}, {"h100-80gb": 1.4}),
        answer(["lora", "gc", "bf16"], {"parameters": 14.2, "optimizer": 0.04, "activations": 1.6, "temporaries": 2.3},
               {"rtx-4090": "fits", "h100-80gb": "fits", "t4": "oom"}, {"rtx-4090": 2.9, "h100-80gb": 0.8},
               reserved_gib=19.15, dtypes=BF16_LORA),
        answer(["qlora", "gc"], {"parameters": 5.5, "optimizer": 0.04, "activations": 1.5, "temporaries": 2},
               {"rtx-4090": "fits", "h100-80gb": "fits", "t4": "fits"}, {"rtx-4090": 3.6, "h100-80gb": 1.0},
               dtypes=BF16_LORA | {"quantized_weights": ["nf4 in uint8"]}),
        answer(["adamw8bit", "gc", "bf16"], {"parameters": 14.2, "gradients": 14.2, "optimizer": 14.2, "activations": 1},
               {"rtx-4090": "oom", "h100-80gb": "fits", "t4": "oom"}, {"h100-80gb": 0.7},
               dtypes={"weights": ["bfloat16"], "gradients": ["bfloat16"], "optimizer_state": ["bfloat16", "uint8"]}),
    ]


FITS_CSV = ROOT / "tests" / "data" / "fits.csv"   # the fits search's made-up answers for answer_records()
