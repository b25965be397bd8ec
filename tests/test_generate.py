"""Generation (bench/worker/generate.py): real on cpu through transformers' generate, and the
same steps under fake tensors in sim. The KV cache is its own category, its bytes per token
are K and V over every layer, prefill and decode have their own peaks, and sim's own decode
loop counts what model.generate counts."""
import pytest

from bench.cells import matrix
from bench.worker import inference
from bench.worker.generate import InferenceTracker, generate

SHAPE = {"batch_size": 2, "seq_len": 16, "steps": 1, "warmup_steps": 1, "timeout_s": 300}


def spec_of(matrix_file, combo, mode="cpu", model="tiny-llama", gpus=("cpu",)):
    cells = matrix.load(matrix_file({"s": {"mode": mode, "models": [model], "gpus": list(gpus), "techniques": [combo],
                                           **SHAPE}}))
    return cells[f"{model}__{'sim' if mode == 'sim' else gpus[0]}__{combo}"]


def test_generate_on_cpu_measures_weights_kv_cache_and_both_phases(matrix_file):
    spec = spec_of(matrix_file, "generate+new4")
    out = generate(spec, "cpu", InferenceTracker())
    bd, d = out["breakdown_bytes"], out["details"]
    assert sum(bd.values()) == out["peak_bytes"]
    assert bd["parameters"] > 0 and bd["kv_cache"] > 0 and bd["gradients"] == bd["optimizer"] == 0
    # tiny-llama: 4 layers, 4 KV heads of 32, fp32 -> 2 * 4 * 4 * 32 * 4 bytes per token
    assert d["kv_bytes_per_token"] == d["kv_bytes_per_token_formula"] == 4096
    assert d["kv_cached_tokens"] == 2 * (16 + 4 - 1) and d["forwards"] == 4
    assert set(out["phase_peak_bytes"]) == {"prefill", "decode"} and all(out["phase_peak_bytes"].values())
    assert out["tokens_per_s"] > 0 and out["step_s_median"] > 0
    assert d["method"].startswith("transformers model.generate")


def test_bf16_weights_halve_the_kv_cache_per_token(matrix_file):
    out = generate(spec_of(matrix_file, "generate+new2+bf16"), "cpu", InferenceTracker())
    assert out["details"]["kv_bytes_per_token"] == 2048 and out["details"]["weights_dtype"] == "bfloat16"


def test_the_decode_loop_sim_runs_counts_what_model_generate_counts(matrix_file):
    """sim cannot run model.generate (it reads token values to stop): its own greedy loop must
    hold the same KV cache and reach the same peaks, on real tensors."""
    spec = spec_of(matrix_file, "generate+new4")
    real = generate(spec, "cpu", InferenceTracker())
    loop = generate(spec, "cpu", InferenceTracker(), own_loop=True)
    assert loop["breakdown_bytes"]["kv_cache"] == real["breakdown_bytes"]["kv_cache"]
    assert loop["breakdown_bytes"]["parameters"] == real["breakdown_bytes"]["parameters"]
    for phase in ("prefill", "decode"):
        assert loop["phase_peak_bytes"][phase] == pytest.approx(real["phase_peak_bytes"][phase], rel=0.02)


def test_generate_in_sim_counts_a_full_size_model_without_allocating_it(matrix_file):
    spec = spec_of(matrix_file, "generate+new2+bf16", mode="sim", model="qwen2.5-0.5b", gpus=("t4", "rtx-4090"))
    out = inference.run(spec)
    d = out["details"]
    assert d["method"] == "decode_loop (greedy, DynamicCache) on fake tensors"
    assert d["kv_bytes_per_token"] == d["kv_bytes_per_token_formula"] == 2 * 24 * 2 * 64 * 2
    assert out["breakdown_bytes"]["parameters"] > 0.9e9 and out["tokens_per_s"] is None
    assert out["host_peak_rss_bytes"] < out["peak_bytes"] + 2**31  # nothing of the model's size was allocated
    assert set(out["verdicts"]) == {"t4", "rtx-4090"}
