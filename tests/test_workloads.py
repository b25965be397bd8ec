"""The workload axis at load time and vLLM's start-up plan (torch-free): impossible
combinations and bad settings are refused when the matrix loads, with the reason; the plan
follows vLLM's rules (bench/cells/workloads.py), each start-up failure with vLLM's own message."""
import pytest

from bench.cells import matrix, workloads
from bench.cells import techniques as tech
from tests.helpers import MATRIX_DIR

GiB = 2**30
SIM = {"mode": "sim", "models": ["qwen2.5-7b"], "gpus": ["l40s", "h100-80gb"]}


def test_the_issue_cell_ids_are_valid_and_carry_their_workload(matrix_file):
    cells = matrix.load(matrix_file({"s": {**SIM, "techniques": ["generate+b8+s2048", "vllm+util0.8"]}}))
    gen, vllm = cells["qwen2.5-7b__sim__generate+b8+s2048"], cells["qwen2.5-7b__sim__vllm+util0.8"]
    assert gen["knobs"]["workload"] == "generate" and (gen["batch_size"], gen["seq_len"]) == (8, 2048)
    assert vllm["knobs"]["workload"] == "vllm" and vllm["knobs"]["gpu_util"] == 0.8
    assert cells["qwen2.5-7b__sim__baseline"]["knobs"]["workload"] == "train"


@pytest.mark.parametrize("combo, reason", [
    ("generate+adamw8bit", "adamw8bit is a training technique"),
    ("generate+gc", "gc is a training technique"),
    ("vllm+zero3", "zero3 is a training technique"),
    ("generate+ga2", "ga2 is a training technique"),
    ("generate+amp-bf16", "no autocast recipe"),
    ("vllm+fp32", "fp32 is a training technique"),
    ("vllm+sdpa", "picks its own attention backend"),
    ("util0.8", "applies to the vllm workload only"),
    ("generate+util0.8", "applies to the vllm workload only"),
    ("vllm+new8", "applies to the generate workload only"),
    ("generate+vllm", "both set workload"),
    ("vllm+util1.5", "must be in (0, 1]"),
    ("vllm+util0", "must be in (0, 1]"),
    ("vllm+util0.0", "must be in (0, 1]"),
    ("vllm+len65536", "beyond the model's max_position_embeddings 32768"),
])
def test_bad_workload_settings_are_refused_at_load_with_the_reason(matrix_file, combo, reason):
    path = matrix_file({"s": {"mode": "sim", "models": ["qwen2.5-0.5b"], "gpus": ["l40s"], "techniques": [combo]}})
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    assert "studies.s.techniques" in str(err.value) and reason in str(err.value), str(err.value)


@pytest.mark.parametrize("combo", ["generate+bf16", "generate+qlora", "generate+lora+bf16", "generate+eager+new8",
                                   "vllm+util1", "vllm+util0.95+len8192+coresident12.5", "vllm+qlora", "vllm+eager",
                                   "vllm+batched4096", "train+gc"])
def test_workloads_compose_where_they_make_sense(combo):
    tech.knobs(combo.split("+"))


def test_vllm_in_cpu_mode_is_a_skipped_record_with_the_reason(matrix_file):
    cells = matrix.load(matrix_file({"s": {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"],
                                           "techniques": ["vllm", "generate"]}}))
    assert "vLLM's engine runs on a GPU" in cells["tiny-llama__cpu__vllm"]["skip_reason"]
    assert cells["tiny-llama__cpu__generate"]["skip_reason"] == ""


def test_the_default_matrix_has_the_pipeline_on_every_gpu_profile():
    cells = matrix.load()
    for model in ("qwen2.5-7b", "llama-3.1-8b"):
        for util in ("0.95", "0.9", "0.8"):
            spec = cells[f"{model}__sim__vllm+util{util}"]
            assert len(spec["verdict_gpus"]) == 9 and {"l40s", "rtx-a6000"} <= set(spec["verdict_gpus"])
        assert f"{model}__sim__generate+b8+s2048+bf16" in cells and f"{model}__sim__lora+gc+bf16" in cells


# -- vLLM's plan -------------------------------------------------------------------------
L40S = 47576711168
QWEN7B = workloads.kv_bytes_per_token(workloads.model_limits(MATRIX_DIR / "models" / "qwen2.5-7b.json"))


def plan(util, coresident=0, weights=15 * GiB, act=GiB, max_len=32768, total=L40S):
    return workloads.plan(total, util, weights, act, QWEN7B, max_len, coresident=coresident)


def test_kv_bytes_per_token_is_k_and_v_over_every_layer():
    assert QWEN7B == 2 * 28 * 4 * 128 * 2 == 57344  # Qwen2.5-7B: 28 layers, 4 KV heads of 128, bf16


def test_the_kv_space_is_what_the_utilization_leaves_in_whole_blocks():
    p = plan(0.9)
    assert p["starts"], p["error"]
    assert p["requested_bytes"] == int(0.9 * L40S)
    assert p["kv_available_bytes"] == int(0.9 * L40S - 15 * GiB - GiB - workloads.NON_TORCH_BYTES)
    assert p["kv_blocks"] == p["kv_available_bytes"] // (16 * QWEN7B)
    assert p["kv_tokens"] == 16 * p["kv_blocks"] and p["kv_cache_bytes"] <= p["kv_available_bytes"]
    assert p["max_concurrent_sequences"] == round(p["kv_tokens"] / 32768, 2)
    assert plan(0.8)["kv_blocks"] < p["kv_blocks"]


def test_another_process_on_the_card_gives_vllms_free_memory_error():
    p = plan(0.95, coresident=10 * GiB)
    assert not p["starts"]
    assert p["error"].startswith("Free memory on device (") and "desired GPU memory utilization (0.95, " in p["error"]
    assert plan(0.7, coresident=10 * GiB)["starts"]  # the same process leaves room for 0.7


def test_negative_kv_space_is_vllms_no_available_memory_error():
    p = plan(0.35)  # 15.5 GiB requested; weights, activations and non-torch memory take 16.06
    assert p["kv_available_bytes"] < 0 and p["kv_blocks"] == 0 and not p["starts"]
    assert p["error"].startswith("No available memory for the cache blocks")


def test_a_max_model_len_the_kv_space_cannot_hold_is_vllms_max_seq_len_error():
    p = plan(0.5, max_len=131072)
    assert not p["starts"] and "To serve at least one request with the models's max seq len (131072)" in p["error"]
    assert f"estimated maximum model length is {p['kv_tokens']}" in p["error"]
    assert plan(0.5, max_len=8192)["starts"]


def test_cuda_graphs_are_outside_the_requested_budget():
    p = workloads.plan(L40S, 0.99, 15 * GiB, GiB, QWEN7B, 8192, context=0)
    assert not p["starts"] and "capturing CUDA graphs" in p["error"]
    assert workloads.plan(L40S, 0.99, 15 * GiB, GiB, QWEN7B, 8192, context=0, cuda_graph=0)["starts"]


def test_vllms_batch_defaults_follow_the_card():
    assert workloads.batch_defaults("h100-80gb", {"memory_bytes": 85045477376}) == (16384, 1024)
    assert workloads.batch_defaults("a100-80gb", {"memory_bytes": 85100068864}) == (8192, 256)
    assert workloads.batch_defaults("l40s", {"memory_bytes": L40S}) == (8192, 256)
