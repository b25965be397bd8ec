"""FSDP + QLoRA and QLoRA + ZeRO-3: bf16 quant storage, torch AdamW, FSDP's CPU
offload, per-rank verdicts, the load phase, and the per-rank fits search.

    pytest tests/test_fsdp_qlora.py -q       # real cpu runs at world size 2 are marked slow
"""
from __future__ import annotations

import pytest

from bench.estimate import verdicts
from bench.records import checks
from bench.runner import launch
from bench.search import fits
from bench.cells import matrix
from tests.helpers import write_matrix

MiB = 2**20
BLAS = verdicts.blas_workspace_bytes({"kind": "cuda"})  # a made-up card's cuBLAS workspaces (non-sm90)


def cells(tmp_path, mode, techniques, gpus=("cpu",)):
    return matrix.load(write_matrix(tmp_path, {"s": {"mode": mode, "models": ["tiny-llama"], "gpus": list(gpus),
                                                     "techniques": list(techniques)}}))


# -- the per-rank fits search: judged by the per-rank figure and the load ------------------------------
def per_rank_spec(tmp_path):
    # partitioned by formula (FSDP2 with offload): its single-process trace interpolated and the record's
    # rule applied (tests/test_fits.py holds that against full simulations); where the traces are not one
    # polynomial family, by full simulations within the budget, as here
    spec = cells(tmp_path, "sim", ["qlora+fsdp-offload+gc+w2"],
                 gpus=("rtx-4090",))["tiny-llama__sim__qlora+fsdp-offload+gc+w2"]
    spec["verdict_gpus"] = {f"g{m}": {"kind": "cuda", "memory_bytes": verdicts.RESERVE_BYTES + BLAS + m * MiB}
                            for m in (100, 300, 3000)}
    return spec


def test_a_formula_cell_whose_traces_are_no_family_is_searched_by_simulations_and_its_load(tmp_path):
    spec = per_rank_spec(tmp_path)
    calls = []

    def simulate(s, _log=None):  # the per-rank figure grows with tokens; the load holds 120 MiB per GPU
        b, n = s["batch_size"], s["seq_len"]
        calls.append((b, n))
        events = n // 256  # a chunk count that changes with the length: no polynomial family
        trace = {"columns": {"kind": [1] * events, "serial": list(range(events)), "bytes": [b * 256 * 100_000] * events,
                             "step": [0] * events, "phase": [0] * events, "op": [0] * events,
                             "category": [0] * events},
                 "ops": ["(direct)"], "reset_at": 0, "dropped_events": 0, "categories": ["other"], "phases": ["other"]}
        return {"status": "ok", "_trace": trace, "modelled_reserved_peak_bytes": b * n * 100_000,
                "details": {"load_phase": {"placement": "fsdp-meta", "placements": {"fsdp-meta": {"gpu_bytes": 120 * MiB}}}}}
    assert fits.not_searched(spec) is None  # the matrix searches it
    doc = fits.search(spec, simulate)
    assert "seq" in doc["not_exact"]
    rows = {r["gpu"]: r for r in doc["rows"]}
    assert rows["g100"]["seq_answer"] == "none"            # the load alone (120 MiB) does not fit 100 MiB
    for gpu, m in (("g300", 300), ("g3000", 3000)):
        want = max(k * 256 for k in range(1, 9) if k * 256 * 100_000 <= m * MiB)
        assert rows[gpu]["max_seq_at_batch1"] == want, (gpu, rows[gpu])
    assert all(len(p) == 2 for p in calls) and len(calls) == len(set(calls))  # every shape simulated once


# -- sim: tiny-llama through the real step ------------------------------------------------------------
@pytest.mark.slow
def test_fsdp_qlora_in_sim_is_per_rank_with_its_load_and_offload(tmp_path):
    from bench.search.simpool import SimPool
    names = ["qlora+gc", "qlora+fsdp+gc+w2", "qlora+fsdp-offload+gc+w2", "qlora+zero3+w4", "lora+zero3+gc+bf16+w8",
             "qlora-fp32+fsdp+w2"]
    specs = cells(tmp_path, "sim", names, gpus=("rtx-4090",))
    with SimPool(jobs=2) as pool:
        recs = dict(zip(names, pool.run_many([(specs[f"tiny-llama__sim__{n}"], None) for n in names])))
    for name, rec in recs.items():
        assert rec["status"] == "ok" and checks.problems(rec) == [], (name, rec.get("reason"))
    one, fsdp, off = recs["qlora+gc"], recs["qlora+fsdp+gc+w2"], recs["qlora+fsdp-offload+gc+w2"]
    assert fsdp["knobs"]["optimizer"] == "adamw" and fsdp["knobs"]["quant_storage"] == "bf16"
    assert fsdp["details"]["dtypes"]["quantized_weights"] == ["nf4 in bfloat16"]
    assert one["details"]["dtypes"]["quantized_weights"] == ["nf4 in uint8"]
    # peft's kbit preparation upcasts the other weights to fp32, never the bf16-stored 4-bit ones
    assert recs["qlora-fp32+fsdp+w2"]["details"]["dtypes"]["quantized_weights"] == ["nf4 in bfloat16"]
    assert fsdp["details"]["load_phase"]["placement"] == "fsdp-meta"
    assert fsdp["details"]["zero_partitioning"].startswith("per rank") and fsdp["details"]["rank_program"]["world_size"] == 2
    # at the optimizer step, no unit gathered, a rank holds its shards (at the peak it can hold more
    # than one process does: tiny-llama's root unit, embedding and head, gathered beside the shards)
    assert fsdp["details"]["phase_breakdown_bytes"]["optimizer"]["parameters"] < one["breakdown_bytes"]["parameters"]
    # offload: the shards live on the host; only the gathered units stay on the GPU (both by formula:
    # fsdp's own record is its rank's traced step, the formula beside it)
    assert off["breakdown_bytes"]["parameters"] < fsdp["details"]["formula_cross_check"]["breakdown_bytes"]["parameters"]
    assert off["breakdown_bytes"]["optimizer"] == 0 and off["details"]["offloaded_bytes"]["parameters"] > 0
    load, off_load = fsdp["details"]["load_phase"], off["details"]["load_phase"]
    assert off_load["placement"] == "fsdp-meta-offload"   # one unit on the GPU while loading, shards on the host
    # one unit, and bitsandbytes' quantization state, which FSDP2 leaves whole on every rank (read off the
    # Linear4bit modules: its sharded parameters carry none)
    assert load["replicated_bytes"] == off_load["replicated_bytes"] > 0
    assert off_load["placements"]["fsdp-meta-offload"]["gpu_bytes"] == load["unit_bytes"] + load["replicated_bytes"]
    assert off_load["placements"]["fsdp-meta-offload"]["gpu_bytes"] < load["placements"]["fsdp-meta"]["gpu_bytes"]
    speed = off["details"]["speed_model"]["rtx-4090"]["parts"]
    assert speed["offload_pcie"] > 0 and fsdp["details"]["speed_model"]["rtx-4090"]["parts"]["offload_pcie"] == 0
    assert recs["lora+zero3+gc+bf16+w8"]["details"]["load_phase"]["placement"] == "zero-init"


# -- cpu: the real libraries at world size 2 (gloo) ---------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ["qlora+fsdp+w2", "qlora+fsdp-offload+gc+w2"])
def test_fsdp_qlora_runs_on_cpu_at_world_size_2(tmp_path, name):
    spec = cells(tmp_path, "cpu", [name])[f"tiny-llama__cpu__{name}"]
    rec = launch.run_cell(spec, tmp_path / "w.log")
    assert rec["status"] == "ok", f"{rec['reason']}\n{rec['log_tail']}"
    assert checks.problems(rec) == [] and len(rec["details"]["ranks"]) == 2
    q = rec["details"]["quantized_weights"]
    assert q["storage_dtype"] == "bfloat16" and q["sharded"] and q["quant_type"] == "nf4"
    assert rec["details"]["optimizer_class"] == "AdamW" and rec["details"]["fsdp_sharded_params"] > 0


def test_what_to_change_offers_fsdp_offload_and_no_8bit_optimizer_fsdp_cannot_step():
    from bench.fit import tofit
    got = dict(tofit.changes(["qlora", "fsdp", "gc", "w2"]))
    assert got["FSDP CPU offload (fsdp-offload)"] == ["qlora", "fsdp-offload", "gc", "w2"]
    assert not any(w.startswith("8-bit") for w in got)   # qlora+fsdp's optimizer is torch AdamW; bnb ones refused
    assert any(w.startswith("8-bit") for w in dict(tofit.changes(["qlora", "adamw", "gc"])))
