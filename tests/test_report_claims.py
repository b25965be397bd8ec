"""Claims checked and recommendations (report/claims.py, report/recommend.py) on made-up records.

    pytest tests/test_report_claims.py -q

The numbers are invented so that each claim lands on a known verdict; they measure nothing.
"""
from __future__ import annotations

import pytest

from report import GIB, claims, recommend, table
from tests.test_report import failed, made, spec

N = 10_000_000            # parameters of the made-up cpu model
M = "tiny-llama"
BIG = "llama-3.1-70b"
RULE = "fits: peak + reserve <= capacity; tight: peak <= capacity; else oom"


def cpu(techs, nbytes, **kw):
    return made(spec(M, "cpu", techs, mode="cpu", gpu_memory_bytes=24 * GIB), nbytes,
                **({"params_total": N, "params_trainable": N} | kw))


BASE = {"parameters": 4 * N, "gradients": 0, "optimizer": 8 * N, "activations": 20 * N, "temporaries": 10 * N}


def cpu_records():
    return [
        cpu(["baseline"], BASE, tokens_per_s=1000.0, details={"optimizer_state_dtypes": ["float32"]}),
        cpu(["bf16"], BASE | {"parameters": 2 * N, "optimizer": 4 * N}, tokens_per_s=1500.0,
            details={"optimizer_state_dtypes": ["bfloat16"]}),
        cpu(["amp-bf16"], BASE | {"activations": 15 * N}, tokens_per_s=1400.0),
        cpu(["gc"], BASE | {"activations": 5 * N}, tokens_per_s=800.0),            # step time +25%
        cpu(["adamw8bit"], BASE | {"optimizer": 2 * N}, tokens_per_s=990.0),       # 75% saved
        cpu(["lora"], BASE | {"optimizer": N // 100}, tokens_per_s=1200.0, params_trainable=N // 200),
        cpu(["ckpt-load"], BASE, load_host_peak_rss_bytes=GIB),
        cpu(["low-cpu-mem-usage"], BASE, load_host_peak_rss_bytes=int(0.99 * GIB)),  # 1%: does not hold
        cpu(["zero3"], BASE | {"gradients": 4 * N}, tokens_per_s=700.0),
        made(spec(M, "cpu", ["zero3", "w2"], mode="cpu", world_size=2), BASE | {
            "parameters": 2 * N, "gradients": 2 * N, "optimizer": 4 * N}, tokens_per_s=600.0,
            details={"ranks": [{"rank": 0, "peak_bytes": 36 * N}, {"rank": 1, "peak_bytes": 37 * N}]}),
        cpu(["padding"], BASE, step_peak_bytes=[30 * N, 35 * N, 33 * N, 41 * N, 41 * N]),
        cpu(["packing"], BASE, step_peak_bytes=[30 * N, 42 * N, 42 * N, 42 * N, 42 * N]),
    ]


def sim(techs, nbytes_gib, verdicts, flops, **kw):
    det = {"verdict_rule": RULE, "verdict_reserve_bytes": 2 * GIB} | kw.pop("details", {})
    return made(spec(BIG, "sim", techs, mode="sim", batch_size=1, seq_len=512, **kw.pop("shape", {})),
                {k: v * GIB for k, v in nbytes_gib.items()}, verdicts=verdicts, flops_per_step=flops,
                params_total=70_553_706_496, details=det, **kw)


ALL_OOM = {"h100-80gb": "oom", "l40s": "oom", "rtx-a6000": "oom", "t4": "oom"}


def sim_records():
    return [
        sim(["baseline"], {"parameters": 263, "optimizer": 526, "activations": 10}, ALL_OOM, 1.0e15),
        sim(["gc"], {"parameters": 263, "optimizer": 526, "activations": 2}, ALL_OOM, 1.33e15),
        sim(["qlora"], {"parameters": 37, "optimizer": 0.5, "activations": 3},
            {"h100-80gb": "fits", "l40s": "tight", "rtx-a6000": "fits", "t4": "oom"}, 0.7e15),
        sim(["gc", "bf16"], {"parameters": 131.5, "optimizer": 5, "activations": 1},
            {"h100-80gb": "fits", "l40s": "oom", "rtx-a6000": "oom", "t4": "oom"}, 1.2e15),
        sim(["zero3"], {"parameters": 263, "gradients": 263, "optimizer": 526, "activations": 10}, ALL_OOM, 1.0e15),
        sim(["zero3", "w8"], {"parameters": 33, "gradients": 33, "optimizer": 66, "activations": 10},
            {"h100-80gb": "fits", "l40s": "oom", "rtx-a6000": "oom", "t4": "oom"}, 1.0e15,
            shape={"world_size": 8}, details={"zero_partitioning": "analytic: model states / 8 ranks"}),
    ]


@pytest.fixture(scope="module")
def df():
    return table.to_frame(cpu_records() + sim_records())


def verdicts_of(frame) -> dict:
    return {(r["key"], r["mode"]): r for r in claims.evaluate(frame)}


def test_every_claim_gets_a_verdict_with_its_thresholds(df):
    rows = claims.evaluate(df)
    assert {r["key"] for r in rows} == {c.key for c in claims.CLAIMS}
    assert all(r["verdict"] in (claims.HOLDS, claims.PARTLY, claims.NOT, claims.UNMEASURED) for r in rows)
    assert all(r["thresholds"] and r["why"] for r in rows)
    got = {k: r["verdict"] for k, r in verdicts_of(df).items()}
    assert got == {
        ("mixed-precision", "cpu"): "partly",        # bf16 halves weights, amp keeps them fp32
        ("mixed-precision", "sim"): "partly",        # weights halve; no gradients live at the peak
        ("gc-time", "cpu"): "holds", ("gc-time", "sim"): "holds",
        ("adam-8bit", "cpu"): "holds",
        ("adam-2x", "cpu"): "partly",                # fp32 states 4x, bf16 states 2x
        ("adam-2x", "sim"): "does not hold",         # 526 GiB fp32 states for 70.6 B params
        ("low-cpu-mem-usage", "cpu"): "does not hold",
        ("qlora-70b", "sim"): "holds",
        ("zero3-linear", "cpu"): "partly",           # states halve, the peak does not
        ("zero3-linear", "sim"): "not measured here",  # analytic by construction
        ("padding-steps", "cpu"): "holds",
        ("lora-states", "cpu"): "holds",
        ("vllm-util", "—"): "not measured here",     # no vllm cells in these records
    }


def test_evidence_and_provenance(df):
    rows = verdicts_of(df)
    gc = rows[("gc-time", "cpu")]
    assert gc["evidence"] == ["tiny-llama: baseline → gc: step time +25.0%"] and gc["provenance"] == "cpu-measured"
    assert "FLOPs per step +33.0%" in rows[("gc-time", "sim")]["evidence"][0]
    assert rows[("gc-time", "sim")]["provenance"] == "simulated"
    z = rows[("zero3-linear", "sim")]
    assert "analytic" in z["why"] and "[analytic]" in z["evidence"][0] and "simulated + analytic" in z["provenance"]
    zc = rows[("zero3-linear", "cpu")]["evidence"][0]
    assert "0.345 GiB (×0.80" in zc and "model states ×0.50" in zc   # per-GPU peak: the larger rank's 37 N
    q = rows[("qlora-70b", "sim")]["evidence"][0]
    assert "l40s: tight" in q and "rtx-a6000: fits" in q and "h100" not in q
    pad = rows[("padding-steps", "cpu")]["evidence"][0]
    assert "running max rose 1×" in pad and "packing" in pad
    assert "4.00 × fp16 weights" in " ".join(rows[("adam-2x", "cpu")]["evidence"])
    assert rows[("low-cpu-mem-usage", "cpu")]["evidence"][0].endswith("GiB (1.0% lower)")
    assert "Autocast" in rows[("mixed-precision", "cpu")]["why"] and "Autocast" not in rows[("mixed-precision", "sim")]["why"]


def test_absent_claims_say_not_measured_and_what_would_measure_them():
    only = table.to_frame([cpu(["baseline"], BASE)])
    rows = claims.evaluate(only)
    byk = {r["key"]: r for r in rows}
    assert byk["adam-2x"]["verdict"] == "does not hold"     # a fp32 AdamW baseline is evidence enough
    rest = [r for r in rows if r["key"] != "adam-2x"]
    assert all(r["verdict"] == "not measured here" and "measured by:" in r["why"] for r in rest)
    assert "llama-3.1-70b__sim__qlora" in byk["qlora-70b"]["why"]
    assert len(claims.evaluate(table.to_frame([]))) == len(claims.CLAIMS)


@pytest.mark.parametrize("verdict, expected", [("fits", "holds"), ("tight", "partly"), ("oom", "does not hold")])
def test_qlora_verdict_follows_the_48gb_cards(verdict, expected):
    rec = sim(["qlora"], {"parameters": 40}, {"l40s": verdict, "rtx-a6000": verdict, "h100-80gb": "fits"}, 1e15)
    assert verdicts_of(table.to_frame([rec]))[("qlora-70b", "sim")]["verdict"] == expected


def test_mixed_precision_holds_when_both_halve():
    recs = [cpu(["baseline"], BASE | {"gradients": 4 * N}), cpu(["bf16"], BASE | {"parameters": 2 * N, "gradients": 2 * N})]
    assert verdicts_of(table.to_frame(recs))[("mixed-precision", "cpu")]["verdict"] == "holds"


def test_claims_never_pool_modes(df):
    cpu_only = df[df["mode"] == "cpu"]
    rows = verdicts_of(df)
    assert verdicts_of(cpu_only)[("gc-time", "cpu")] == rows[("gc-time", "cpu")]
    assert all(set(r["cells"]) <= set(df.loc[df["mode"] == r["mode"], "cell"]) for r in rows.values() if r["cells"])


# ---- recommendations ----

def test_sim_recommendations(df):
    recs = {r["gpu"]: r for r in recommend.recommend(df, "sim")}
    assert set(recs) == {"h100-80gb", "l40s", "rtx-a6000", "t4"}
    h100 = recs["h100-80gb"]
    assert h100["baseline"]["verdict"] == "oom"
    assert h100["fastest"]["technique"] == "qlora"           # fewest FLOPs among single-GPU fits
    assert h100["fix"]["technique"] == "qlora"                # one technique beats gc+bf16's two
    assert recs["rtx-a6000"]["fix"]["technique"] == "qlora"
    assert recs["l40s"]["fastest"] is None and recs["l40s"]["fix"] is None   # tight is not fits
    assert recs["t4"]["fix_note"] == "nothing in this run fits"
    section = recommend.section(df, "sim")
    row = next(r for r in section["rows"] if r["gpu"] == "h100-80gb")
    assert row["fix_overhead"] == "\N{MINUS SIGN}30.0% FLOPs/step" and row["provenance"] == "simulated"


def test_multi_gpu_ranks_after_single_gpu():
    recs = [sim(["baseline"], {"parameters": 263}, ALL_OOM, 1e15),
            sim(["zero3", "w8"], {"parameters": 33}, {"h100-80gb": "fits"}, 1e14, shape={"world_size": 8}),
            sim(["gc", "bf16"], {"parameters": 66}, {"h100-80gb": "fits"}, 1.3e15)]
    (h100,) = [r for r in recommend.recommend(table.to_frame(recs), "sim") if r["gpu"] == "h100-80gb"]
    assert h100["fastest"]["technique"] == "gc+bf16" and h100["fix"]["technique"] == "gc+bf16"


def test_measured_recommendations():
    g = "rtx-4090"
    recs = [failed(spec("m", g, ["baseline"]), "oom", "CUDA out of memory"),
            made(spec("m", g, ["lora"]), BASE, tokens_per_s=1100.0),
            made(spec("m", g, ["gc"]), BASE, tokens_per_s=800.0),
            made(spec("m", g, ["s8192"], seq_len=8192), BASE, tokens_per_s=5000.0),   # another workload
            failed(spec("m", g, ["fa2"]), "error", "no flash-attn")]
    frame = table.to_frame(recs + cpu_records()[:2])
    (r,) = recommend.recommend(frame, "cuda")
    assert r["baseline"]["verdict"] == "oom" and r["fastest"]["technique"] == "lora"
    assert r["fix"]["technique"] == "gc"                       # low difficulty before lora's medium
    (c,) = recommend.recommend(frame, "cpu")
    assert c["fix"] is None and c["fix_note"] == "not needed: the baseline fits" and c["fastest"]["technique"] == "bf16"
    assert recommend.section(table.to_frame([]), "cuda") is None
