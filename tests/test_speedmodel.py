"""The speed model's terms (bench/estimate/speedmodel.py), on step costs written out here in the shape
bench/worker/sim/stepcost.py records, against the real GPU profiles of matrix/gpus.yaml."""
import pytest

from bench.estimate import speedmodel
from bench.cells import matrix

T = 8192  # tokens per step


@pytest.fixture(scope="module")
def gpus():
    import yaml

    from pathlib import Path
    return yaml.safe_load((Path(matrix.__file__).parents[2] / "matrix" / "gpus.yaml").read_text())


def cost(dtype="bfloat16", flops=1e14, nbytes=2e10, nf4=0, recompute=0.0, comm=0, world=1, **extra):
    """A step: one GEMM shape run 100 times, plus memory-bound ops."""
    per = int(flops / 100)
    ops = [["aten.mm", dtype, per, int(nbytes / 1000), 100, "step"]]
    flops_by = {dtype: per * 100}
    if recompute:
        rper = int(per * recompute)
        ops.append(["aten.mm", dtype, rper, int(nbytes / 1000), 100, "recompute"])
        flops_by[dtype] += rper * 100
    return {"flops_by_dtype": flops_by, "ops": ops, "memory_bytes": {"step": int(nbytes)},
            "bytes_moved": int(nbytes * 1.1), "nf4_dequant_bytes": int(nf4),
            "recompute_flops": int(per * recompute) * 100 if recompute else 0,
            "comm_bytes_per_rank": int(comm), "offload_pcie_bytes": 0, "pcie_bytes": 0,
            "tokens_per_step": T, "world_size": world, "how": "test", **extra}


def test_bf16_is_faster_than_fp32_at_the_same_flops(gpus):
    for name in ("a100-80gb", "h200", "rtx-4090"):
        bf16 = speedmodel.estimate(cost("bfloat16"), gpus[name])
        fp32 = speedmodel.estimate(cost("float32"), gpus[name])
        peak = gpus[name]["bf16_tflops"] / gpus[name]["fp32_tflops"]
        assert bf16["step_s"] < fp32["step_s"], name
        assert fp32["parts"]["compute"] == pytest.approx(bf16["parts"]["compute"] * peak), name
        assert bf16["tokens_per_s"] == pytest.approx(T / bf16["step_s"])


def test_nf4_dequantization_adds_time(gpus):
    plain = speedmodel.estimate(cost(), gpus["h200"])
    nf4 = speedmodel.estimate(cost(nf4=5e10), gpus["h200"])
    assert nf4["step_s"] > plain["step_s"]
    assert nf4["parts"]["nf4_dequant"] == pytest.approx(5e10 / 4800e9 / nf4["efficiency"])


def test_recomputation_adds_time(gpus):
    plain = speedmodel.estimate(cost(), gpus["a100-80gb"])
    gc = speedmodel.estimate(cost(recompute=0.3), gpus["a100-80gb"])
    assert gc["step_s"] > plain["step_s"] and gc["parts"]["recompute"] > 0 == plain["parts"]["recompute"]


def test_communication_grows_with_world_size_and_prefers_nvlink(gpus):
    per_rank = [speedmodel.estimate(cost(comm=2 * 16e9 * (n - 1) / n, world=n), gpus["a100-80gb"]) for n in (1, 2, 8)]
    steps = [e["step_s"] for e in per_rank]
    assert steps[0] < steps[1] < steps[2]
    assert per_rank[2]["link"] == "nvlink"
    pcie = speedmodel.estimate(cost(comm=16e9, world=4), gpus["l40s"])
    assert pcie["link"] == "pcie" and pcie["parts"]["communication"] == pytest.approx(16e9 / 32e9)


def test_parts_sum_to_the_step(gpus):
    est = speedmodel.estimate(cost(nf4=1e10, recompute=0.2, comm=1e9, world=2), gpus["h100-80gb"])
    assert sum(est["parts"].values()) == pytest.approx(est["step_s"])
    assert est["provenance"] == "modelled" and est["how"]


def test_a_missing_profile_field_gives_no_estimate_and_says_why(gpus):
    t4 = speedmodel.estimate(cost("bfloat16"), gpus["t4"])
    assert t4["step_s"] is None and "bf16_tflops" in t4["why"]
    no_bw = {k: v for k, v in gpus["a100-80gb"].items() if k != "memory_bandwidth_gbs"}
    assert "memory_bandwidth_gbs" in speedmodel.estimate(cost(), no_bw)["why"]
    no_link = {k: v for k, v in gpus["l40s"].items() if k != "pcie_gbs"}
    assert "pcie_gbs" in speedmodel.estimate(cost(comm=1e9, world=2), no_link)["why"]
    assert speedmodel.estimate(None, gpus["h200"])["step_s"] is None
    assert speedmodel.estimate(cost(), gpus["cpu"])["step_s"] is None


def test_uncalibrated_classes_take_the_a100_factor_and_say_so(gpus):
    a100 = speedmodel.estimate(cost(), gpus["a100-80gb"])
    h200 = speedmodel.estimate(cost(), gpus["h200"])
    assert a100["calibration"].startswith("calibrated: ampere-datacenter")
    assert h200["calibration"].startswith("uncalibrated: ampere-datacenter factor")
    assert h200["efficiency"] == a100["efficiency"] > 0


def test_the_fit_is_one_factor_whose_errors_balance():
    rows = [(0.8, 1.0), (0.9, 1.0), (1.0, 1.25)]
    eff = speedmodel.fit(rows)
    ratios = [p / (m / eff) for m, p in rows]
    assert min(ratios) < 1 < max(ratios)
    with pytest.raises(ValueError):
        speedmodel.fit([])


def test_every_cuda_profile_carries_the_speed_fields(gpus):
    for name, prof in gpus.items():
        if prof["kind"] != "cuda":
            continue
        for key in ("gpu_class", "fp32_tflops", "pcie_gbs", "memory_bandwidth_gbs"):
            assert prof.get(key), (name, key)
        assert "nvlink_gbs" in prof and "speed fields" in prof["source"], name


def test_a_bad_speed_field_is_a_clear_matrix_error(tmp_path):
    (tmp_path / "gpus.yaml").write_text("x1:\n  kind: cuda\n  memory_bytes: 100\n  nvlink_gbs: -3\n")
    (tmp_path / "m.yaml").write_text("studies:\n  s:\n    mode: cuda\n    models: [m]\n    gpus: [x1]\n"
                                     "    techniques: [baseline]\n")
    with pytest.raises(matrix.MatrixError, match="nvlink_gbs"):
        matrix.load(tmp_path / "m.yaml")
