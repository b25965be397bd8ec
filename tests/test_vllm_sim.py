"""The vllm workload in sim (bench/worker/sim/vllm_plan.py): weights and the profiling run's
activation peak come from a fake forward at vLLM's batched-token budget; the plan per GPU
follows vLLM's rules; a card the plan does not fit gets vLLM's own message; cuda cells
without the [vllm] extra are skipped records."""
import importlib.util

import pytest

from bench.cells import matrix, workloads
from bench.worker import inference

SHAPE = {"batch_size": 1, "seq_len": 64, "steps": 1, "warmup_steps": 1, "timeout_s": 300}


def spec_of(matrix_file, combo, gpus=("h100-80gb", "l40s", "t4"), model="qwen2.5-0.5b"):
    cells = matrix.load(matrix_file({"s": {"mode": "sim", "models": [model], "gpus": list(gpus),
                                           "techniques": [combo], **SHAPE}}))
    return cells[f"{model}__sim__{combo}"]


def test_the_vllm_plan_profiles_a_forward_and_plans_every_gpu(matrix_file):
    out = inference.run(spec_of(matrix_file, "vllm+util0.8+len8192"))
    v = out["details"]["vllm"]
    assert set(v["plans"]) == set(out["verdicts"]) == {"h100-80gb", "l40s", "t4"}
    # the bigger card profiles at vLLM's bigger default budget, and its activations show it
    assert v["plans"]["h100-80gb"]["max_num_batched_tokens"] == 16384 and v["plans"]["l40s"]["max_num_batched_tokens"] == 8192
    assert v["activation_peak_bytes"]["16384x1024"] > 1.5 * v["activation_peak_bytes"]["8192x256"] > 0
    assert v["weights_bytes"] == out["breakdown_bytes"]["parameters"] > 0.9e9  # bf16, as vLLM loads it
    for gpu, p in v["plans"].items():
        assert p["starts"] and out["verdicts"][gpu] == "fits"
        non_kv = p["weights_bytes"] + p["activation_peak_bytes"] + p["non_torch_bytes"]
        assert abs(p["kv_available_bytes"] - (0.8 * p["total_bytes"] - non_kv)) <= 1
        assert p["kv_bytes_per_token"] == 2 * 24 * 2 * 64 * 2 and p["max_model_len"] == 8192
    assert out["peak_bytes"] == v["weights_bytes"] + v["activation_peak_bytes"]["16384x1024"]
    assert list(out["details"]["verdict_notes"]) == ["t4"]  # no bf16: vLLM refuses the dtype there


def test_a_card_another_process_fills_is_an_oom_verdict_with_vllms_message(matrix_file):
    out = inference.run(spec_of(matrix_file, "vllm+util0.9+len4096+coresident4", gpus=("t4", "h100-80gb")))
    t4 = out["details"]["vllm"]["plans"]["t4"]
    assert out["verdicts"] == {"t4": "oom", "h100-80gb": "fits"}
    assert t4["coresident_bytes"] == 4 * 2**30 and t4["error"].startswith("Free memory on device")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_a_cuda_vllm_cell_without_the_extra_is_a_skipped_record(matrix_file):
    from bench.runner import launch
    cells = matrix.load(matrix_file({"s": {"mode": "cuda", "models": ["tiny-llama"], "gpus": ["l40s"],
                                           "techniques": ["vllm"], **SHAPE}}))
    rec = launch.run_cell(cells["tiny-llama__l40s__vllm"])
    assert rec["status"] == "skipped" and 'pip install -e ".[vllm]"' in rec["reason"]


@pytest.mark.cuda
def test_vllm_starts_for_real_on_a_cuda_gpu(matrix_file):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip('needs the [vllm] extra: pip install -e ".[vllm]"')
    from bench.runner import launch
    cells = matrix.load(matrix_file({"s": {"mode": "cuda", "models": ["qwen2.5-0.5b"], "gpus": ["h100-80gb"],
                                           "techniques": ["vllm+util0.5+len4096"], **SHAPE}}))
    rec = launch.run_cell(cells["qwen2.5-0.5b__h100-80gb__vllm+util0.5+len4096"])
    assert rec["status"] == "ok", rec["reason"]
    assert rec["details"]["vllm"]["measured"]["num_gpu_blocks"] > 0


def test_the_plan_module_cites_the_vllm_source_it_follows():
    assert "vllm-project/vllm@35d5cda123ec" in workloads.VLLM_SOURCE and "gpu_worker.py" in workloads.VLLM_SOURCE
