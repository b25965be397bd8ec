"""A training config read with the accelerate config it is launched with (``fit --launch-config``), and FSDP's
sharding, offload and activation checkpointing read where transformers and accelerate read them
(bench/cells/trainconfig/launch.py, fsdpmode.py). TRL's published launch configs are in tests/data/configs
(SOURCES.md)."""
from __future__ import annotations

import json

import pytest

from bench.cells import trainconfig
from tests.test_fit_guard import CONFIGS, fit

SFT = {"model_name_or_path": "Qwen/Qwen2.5-7B", "use_peft": True, "dtype": "bfloat16", "gradient_checkpointing": True,
       "per_device_train_batch_size": 1, "max_length": 2048}


def sft(tmp_path, **extra):
    (tmp_path / "sft.json").write_text(json.dumps({**SFT, **extra}))
    return tmp_path / "sft.json"


def test_trls_zero3_launch_config_is_zero3_on_its_8_processes_under_its_fp16(tmp_path):
    r = trainconfig.read(sft(tmp_path), launch_path=CONFIGS / "accelerate-trl-deepspeed_zero3.yaml")
    # no bf16/fp16 in the training config: TrainingArguments keeps the launcher's ACCELERATE_MIXED_PRECISION
    # and fp16 under DeepSpeed is its fp16 mode: 16-bit weights and fp32 master partitions, the bytes of bf16
    assert r.techniques() == ["lora", "gc", "bf16", "zero3", "w8"]
    keys = {m["key"] for m in r.mapped}
    assert {"accelerate-trl-deepspeed_zero3.yaml: deepspeed_config", "accelerate-trl-deepspeed_zero3.yaml: num_processes",
            "accelerate-trl-deepspeed_zero3.yaml: mixed_precision"} <= keys
    ignored = {i["key"]: i["reason"] for i in r.ignored}
    assert "launcher setting" in ignored["accelerate-trl-deepspeed_zero3.yaml: rdzv_backend"]


def test_without_the_launch_config_the_same_run_is_one_process(tmp_path):
    assert trainconfig.read(sft(tmp_path)).techniques() == ["lora", "gc"]


def test_trls_fsdp2_launch_config_is_fsdp2_on_8(tmp_path):
    r = trainconfig.read(sft(tmp_path, bf16=True), launch_path=CONFIGS / "accelerate-trl-fsdp2.yaml")
    assert r.techniques() == ["lora", "gc", "bf16", "fsdp", "w8"]
    # the training config's bf16 is what the Trainer runs: the launcher's is listed, not read
    assert any(i["key"].endswith("mixed_precision") for i in r.ignored)


def test_trls_fsdp_qlora_launch_config_is_refused_fsdp1_offload_is_not_simulated(tmp_path):
    with pytest.raises(trainconfig.ConfigError, match=r"--launch-config .*fsdp_qlora.yaml: fsdp_config.offload_params: "
                                                      r".*FSDP1 with CPU offload .* not simulated"):
        trainconfig.read(sft(tmp_path, load_in_4bit=True, bf16=True),
                         launch_path=CONFIGS / "accelerate-trl-fsdp_qlora.yaml")


def test_a_context_parallel_launch_config_is_refused_naming_its_key(tmp_path):
    with pytest.raises(trainconfig.ConfigError, match=r"--launch-config .*parallelism_config_cp_size: 2"):
        trainconfig.read(sft(tmp_path), launch_path=CONFIGS / "accelerate-trl-context_parallel_2gpu.yaml")


@pytest.mark.parametrize("training, launch, message", [
    ({"deepspeed": {"zero_optimization": {"stage": 2}}}, {"distributed_type": "FSDP"}, "one run has one sharding engine"),
    ({"num_processes": 4}, {"distributed_type": "FSDP", "num_processes": 8}, "states 4 processes"),
    ({}, {"distributed_type": "MEGATRON_LM"}, "ft-membench answers NO, MULTI_GPU, FSDP, DEEPSPEED"),
    ({}, {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 7}}, "ZeRO's stage is 0, 1, 2 or 3"),
    ({}, {"mixed_precision": "fp8"}, "no, bf16 or fp16"),
])
def test_a_launch_config_that_cannot_be_this_run_is_refused(tmp_path, training, launch, message):
    (tmp_path / "accel.json").write_text(json.dumps(launch))
    with pytest.raises(trainconfig.ConfigError, match=f"--launch-config .*accel.json: .*{message}"):
        trainconfig.read(sft(tmp_path, **training), launch_path=tmp_path / "accel.json")


def test_a_launch_deepspeed_file_is_read_relative_to_the_launch_config(tmp_path):
    (tmp_path / "launch").mkdir()
    (tmp_path / "launch" / "ds.json").write_text(json.dumps({"zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}}))
    (tmp_path / "launch" / "accel.yaml").write_text("distributed_type: DEEPSPEED\nnum_processes: 2\n"
                                                    "deepspeed_config:\n  deepspeed_config_file: ds.json\n")
    r = trainconfig.read(sft(tmp_path), launch_path=tmp_path / "launch" / "accel.yaml")
    assert r.techniques()[-2:] == ["zero3-offload", "w2"]


@pytest.mark.parametrize("fsdp, config, answer", [
    ("full_shard auto_wrap", {}, "fsdp1"),
    (["full_shard", "auto_wrap"], {"fsdp_version": 2}, "fsdp"),
    ("full_shard offload auto_wrap", {"version": 2}, "fsdp-offload"),
    (True, {"fsdp_version": 2, "fsdp_offload_params": True}, "fsdp-offload"),
    (True, {"fsdp_sharding_strategy": 1}, "fsdp1"),
    (True, {"fsdp_version": 2, "fsdp_reshard_after_forward": True}, "fsdp"),
    ("no_shard", {}, None),
    ("shard_grad_op auto_wrap", {}, "SHARD_GRAD_OP keeps every unit's parameters gathered"),
    (True, {"fsdp_sharding_strategy": "SHARD_GRAD_OP"}, "SHARD_GRAD_OP keeps"),
    (True, {"fsdp_sharding_strategy": 2}, "SHARD_GRAD_OP keeps"),
    (True, {"sharding_strategy": "HYBRID_SHARD"}, "HYBRID_SHARD \\(HSDP\\)"),
    (True, {"fsdp_version": 2, "fsdp_reshard_after_forward": False}, "FSDP2 without resharding"),
    (True, {"fsdp_reshard_after_forward": False}, "SHARD_GRAD_OP keeps"),
    ("full_shard offload", {}, "FSDP1 with CPU offload"),
    (True, {"fsdp_sharding_strategy": "EVERYTHING"}, "not an FSDP sharding strategy"),
    (True, {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}, "fsdp1"),
    (True, {"auto_wrap_policy": "NO_WRAP"}, "NO_WRAP makes the whole model one FSDP unit"),
    (True, {"fsdp_auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 10 ** 8}, "SIZE_BASED_WRAP units"),
])
def test_fsdp_sharding_and_offload_are_read_or_refused(tmp_path, fsdp, config, answer):
    """transformers' fsdp options and fsdp_config (the fsdp_ prefix stripped), accelerate's strategy names and
    numbers: what holds more than full sharding is refused, never answered as full shard (the low side)."""
    path = sft(tmp_path, fsdp=fsdp, fsdp_config=config, num_processes=2)
    if answer is not None and " " in answer:
        with pytest.raises(trainconfig.ConfigError, match=answer):
            trainconfig.read(path)
        return
    techniques = trainconfig.read(path).techniques()
    dist = [t for t in techniques if t in ("fsdp", "fsdp1", "fsdp-offload")]
    assert dist == ([answer] if answer else [])


def test_a_launch_config_naming_no_wrap_policy_is_accelerates_no_wrap(tmp_path):
    (tmp_path / "accel.yaml").write_text("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n")
    with pytest.raises(trainconfig.ConfigError, match=r"--launch-config .*accel.yaml: fsdp_config.auto_wrap_policy: "
                                                      r"'NO_WRAP': NO_WRAP makes the whole model one FSDP unit"):
        trainconfig.read(sft(tmp_path), launch_path=tmp_path / "accel.yaml")


def test_an_fsdp_config_file_is_read_relative_to_the_training_config(tmp_path):
    """transformers' fsdp_config may be the path of a JSON file: its version and offload are the run's."""
    (tmp_path / "fsdp.json").write_text(json.dumps({"fsdp_version": 2, "fsdp_offload_params": True}))
    assert "fsdp-offload" in trainconfig.read(sft(tmp_path, fsdp="full_shard", fsdp_config="fsdp.json",
                                                  num_processes=2)).techniques()
    with pytest.raises(trainconfig.ConfigError, match="fsdp_config: 'missing.json': .*missing.json"):
        trainconfig.read(sft(tmp_path, fsdp="full_shard", fsdp_config="missing.json"))


def test_fsdp_no_shard_with_fsdps_checkpointing_is_data_parallel_with_gc(tmp_path):
    r = trainconfig.read(sft(tmp_path, gradient_checkpointing=False, fsdp="no_shard",
                             fsdp_config={"activation_checkpointing": True}, num_processes=2))
    assert r.techniques() == ["lora", "gc"] and any(i["key"] == "processes" for i in r.ignored)


def test_fsdps_activation_checkpointing_is_gc(tmp_path):
    path = sft(tmp_path, gradient_checkpointing=False, fsdp="full_shard auto_wrap",
               fsdp_config={"fsdp_version": 2, "activation_checkpointing": True}, num_processes=2)
    r = trainconfig.read(path)
    assert "gc" in r.techniques() and any(m["key"] == "fsdp_config.activation_checkpointing" for m in r.mapped)


def test_the_cli_reads_the_launch_config_and_asks_for_the_training_config(tmp_path):
    proc = fit(["--launch-config", str(CONFIGS / "accelerate-trl-fsdp2.yaml"), "qwen2.5-7b", "--gpu", "h100"], tmp_path)
    assert proc.returncode == 2 and "give the training config it launches with --config" in proc.stderr
    proc = fit(["--config", str(sft(tmp_path, load_in_4bit=True, bf16=True)), "--launch-config",
                str(CONFIGS / "accelerate-trl-fsdp_qlora.yaml"), "--gpu", "h100", "--no-search"], tmp_path)
    assert proc.returncode == 2 and "FSDP1 with CPU offload" in proc.stderr and proc.stdout == ""


def test_torchtunes_distributed_config_on_several_gpus_is_its_fsdp2_recipe(tmp_path):
    """torchtune's launch command, not its config, says how many GPUs (tune run --nproc_per_node 8
    lora_finetune_distributed): on --gpus 8 its config is FSDP2 at w8, on one GPU the single-device step."""
    from bench.fit.question import Usage, question
    config = str(CONFIGS / "torchtune-llama3_1-70B_lora.yaml")
    one = question(None, config, None, None, None, None)
    assert one.techniques == ["lora+gc+bf16+adamw-fused+chunked-ce"]
    eight = question(None, config, None, None, None, None, gpus=8)
    assert eight.techniques == ["lora+gc+bf16+adamw-fused+chunked-ce+fsdp+w8"] and eight.batch == 2
    assert any(m["key"] == "--gpus" and "fully_shard" in m["as"] for m in eight.recipe.mapped)
    text = (CONFIGS / "torchtune-llama3_1-70B_lora.yaml").read_text()
    (tmp_path / "offload.yaml").write_text(text + "fsdp_cpu_offload: True\n")
    assert question(None, str(tmp_path / "offload.yaml"), None, None, None, None, gpus=2).techniques[0] \
        .endswith("+fsdp-offload+w2")
    (tmp_path / "keep.yaml").write_text(text + "fsdp_reshard_after_forward: False\n")
    assert question(None, str(tmp_path / "keep.yaml"), None, None, None, None).techniques[0].endswith("chunked-ce")
    with pytest.raises(Usage, match="fsdp_reshard_after_forward: False keeps every unit's parameters gathered"):
        question(None, str(tmp_path / "keep.yaml"), None, None, None, None, gpus=2)
