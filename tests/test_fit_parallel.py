"""A config that asks for tensor, context, sequence or pipeline parallelism, or for replicated FSDP shards
(HSDP), gets no answer (bench/cells/trainconfig/parallel.py): ft-membench simulates data parallelism only.
Before this refusal such keys were listed as ignored and the config answered as another run: accelerate's
HSDP ``parallelism_config`` (2 replicas x 2 shards) read as FSDP over 4 processes, whose states come out at
half of what each GPU holds (a "fits" for a run that dies), and axolotl's ``context_parallel_size: 4`` read
as one GPU holding all 65536 tokens' activations."""
from __future__ import annotations

import json

import pytest

from bench.cells import trainconfig
from tests.test_fit_guard import fit

AXOLOTL = {"base_model": "meta-llama/Llama-3.1-8B", "adapter": "lora", "micro_batch_size": 1, "sequence_len": 65536,
           "fsdp_version": 2, "fsdp_config": {"reshard_after_forward": True}}
TRL = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "per_device_train_batch_size": 1, "fsdp": "full_shard",
       "num_processes": 4}
TORCHTUNE = {"model": {"_component_": "torchtune.models.llama3_1.lora_llama3_1_8b"}, "batch_size": 1,
             "optimizer": {"_component_": "torch.optim.AdamW"}}


def _read(tmp_path, doc):
    (tmp_path / "c.json").write_text(json.dumps(doc))
    return trainconfig.read(tmp_path / "c.json")


@pytest.mark.parametrize("doc, key, what", [
    (dict(AXOLOTL, context_parallel_size=4), "context_parallel_size: 4", "context parallelism"),
    (dict(AXOLOTL, sequence_parallel_degree=2), "sequence_parallel_degree: 2", "context parallelism"),
    (dict(AXOLOTL, tensor_parallel_size="2"), "tensor_parallel_size: '2'", "tensor parallelism"),
    (dict(TRL, parallelism_config={"dp_replicate_size": 2, "dp_shard_size": 2}), "parallelism_config.dp_replicate_size: 2",
     "replicated FSDP shards"),
    (dict(TRL, parallelism_config={"parallelism_config_tp_size": 2}), "parallelism_config.parallelism_config_tp_size: 2",
     "tensor parallelism"),
    (dict(TRL, parallelism_config={"sp_size": 4, "sp_backend": "deepspeed"}), "parallelism_config.sp_size: 4",
     "sequence parallelism"),
    (dict(TRL, model_init_kwargs={"tp_plan": "auto"}), "model_init_kwargs.tp_plan: 'auto'", "tensor parallelism"),
    (dict(TRL, pipeline_parallel_size=2), "pipeline_parallel_size: 2", "pipeline parallelism"),
    (dict(TORCHTUNE, tensor_parallel_dim=2), "tensor_parallel_dim: 2", "tensor parallelism"),
    (dict(TORCHTUNE, context_parallel_dim=8), "context_parallel_dim: 8", "context parallelism"),
])
def test_each_parallelism_is_refused_naming_its_key(tmp_path, doc, key, what):
    with pytest.raises(trainconfig.ConfigError) as exc:
        _read(tmp_path, doc)
    message = str(exc.value)
    assert str(tmp_path / "c.json") in message and key in message, message
    assert what in message and "ft-membench does not simulate" in message and "no answer is given" in message


def test_a_degree_of_one_is_no_parallelism_and_reads(tmp_path):
    r = _read(tmp_path, dict(AXOLOTL, context_parallel_size=1, tensor_parallel_size=None))
    assert r.techniques()[:2] == ["lora", "fsdp"]
    r = _read(tmp_path, dict(TRL, parallelism_config={"dp_replicate_size": 1, "dp_shard_size": 4, "tp_size": 1}))
    assert "w4" in r.techniques()
    r = _read(tmp_path, dict(TORCHTUNE, tensor_parallel_dim=1, context_parallel_dim=1))
    assert "lora" in r.techniques()


@pytest.mark.parametrize("value", [0, -2, 1.5, "two", True])
def test_a_degree_that_is_no_count_of_processes_is_refused(tmp_path, value):
    with pytest.raises(trainconfig.ConfigError, match="context_parallel_size: .*a parallel degree"):
        _read(tmp_path, dict(AXOLOTL, context_parallel_size=value))


def test_the_cli_exits_2_before_simulating_anything(tmp_path):
    (tmp_path / "hsdp.json").write_text(json.dumps(dict(TRL, parallelism_config={"dp_replicate_size": 2,
                                                                                   "dp_shard_size": 2})))
    done = fit(["llama-3.1-8b", "--gpu", "rtx-4090", "--config", str(tmp_path / "hsdp.json")], tmp_path, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "replicated FSDP shards" in done.stderr and "no answer is given" in done.stderr
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").rglob("*.json"))
