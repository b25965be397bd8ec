"""ft-membench fit as a launch guard: Hub ids answered from a real Hugging Face cache
layout offline, published training configs read into recipes with every ignored setting listed,
exit codes 0/1/2 from the CLI run in a subprocess, the --json object, and what to change."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fit import guard, tofit
from bench.cells import hubmodel, trainconfig

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
TINY = ROOT / "matrix" / "models" / "tiny-llama.json"


def hub_cache(tmp_path, repo="acme/tiny-hub", config_text=None, rev="0123456789abcdef") -> Path:
    """A Hugging Face cache as huggingface_hub lays it out: models--ORG--NAME/refs/main holding
    the commit, snapshots/<commit>/config.json (here a link into blobs/, as the library writes)."""
    cache = tmp_path / "hub"
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "blobs").mkdir()
    (repo_dir / "snapshots" / rev).mkdir(parents=True)
    blob = repo_dir / "blobs" / "c0ffee"
    blob.write_text(config_text if config_text is not None else TINY.read_text())
    (repo_dir / "snapshots" / rev / "config.json").symlink_to(os.path.relpath(blob, repo_dir / "snapshots" / rev))
    (repo_dir / "refs" / "main").write_text(rev)
    return cache


def fit(args, tmp_path, cache=None, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "HF_HUB_CACHE": str(cache or tmp_path / "empty-hub"), "HF_HOME": str(tmp_path / "hf-home")}
    return subprocess.run([sys.executable, "-m", "bench.cli", "fit", *args, "--results", str(tmp_path / "res")],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)


# --- Hub ids -------------------------------------------------------------------------------

def test_a_hub_id_is_answered_offline_from_the_cache(tmp_path):
    cache = hub_cache(tmp_path)
    proc = fit(["acme/tiny-hub", "--gpu", "rtx-4090", "--techniques", "lora", "--seq", "96", "--no-search",
                "--json"], tmp_path, cache)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "fits" and doc["exit_code"] == 0
    assert "Hugging Face cache" in doc["model"]["notes"][0] and str(cache) in doc["model"]["notes"][0]
    assert os.listdir(cache) == ["models--acme--tiny-hub"]  # nothing else fetched into the cache


def test_a_hub_id_not_cached_offline_is_bad_input(tmp_path):
    proc = fit(["acme/absent", "--gpu", "rtx-4090", "--techniques", "lora"], tmp_path, hub_cache(tmp_path))
    assert proc.returncode == 2
    assert "not in the Hugging Face cache and HF_HUB_OFFLINE is set" in proc.stderr


def test_a_malformed_config_json_says_malformed_not_unknown(tmp_path):
    cache = hub_cache(tmp_path, config_text='{"model_type": "llama", ')
    proc = fit(["acme/tiny-hub", "--gpu", "rtx-4090", "--techniques", "lora"], tmp_path, cache)
    assert proc.returncode == 2
    assert "malformed config.json" in proc.stderr and "config.json" in proc.stderr
    assert "unknown model" not in proc.stderr


def test_a_malformed_local_config_says_malformed(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    proc = fit([str(tmp_path / "config.json"), "--gpu", "rtx-4090", "--techniques", "lora"], tmp_path)
    assert proc.returncode == 2 and "malformed" in proc.stderr and str(tmp_path) in proc.stderr
    assert "unknown model" not in proc.stderr


def test_remote_code_is_opt_in(tmp_path):
    cfg = json.loads(TINY.read_text()) | {"auto_map": {"AutoConfig": "configuration_x.XConfig"}}
    proc = fit(["acme/tiny-hub", "--gpu", "rtx-4090", "--techniques", "lora"], tmp_path,
               hub_cache(tmp_path, config_text=json.dumps(cfg)))
    assert proc.returncode == 2 and "--trust-remote-code" in proc.stderr


def test_a_hub_id_of_a_matrix_model_is_that_model():
    assert hubmodel.local_name("Qwen/Qwen2.5-0.5B") == "qwen2.5-0.5b"
    assert hubmodel.local_name("meta-llama/Meta-Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert hubmodel.local_name("meta-llama/Meta-Llama-3-8B") == "llama-3-8b"  # Llama 3, not 3.1
    assert hubmodel.local_name("NousResearch/Meta-Llama-3-8B") == "llama-3-8b"  # a named mirror
    assert hubmodel.local_name("NousResearch/Meta-Llama-3.1-8B") is None  # not a named mirror
    assert hubmodel.local_name("meta-llama/Meta-Llama-3-70B") is None


def test_a_published_axolotl_config_answers_offline_from_its_mirror(tmp_path):
    """The axolotl example names NousResearch's mirror of Llama 3 8B; with no Hub cache and
    HF_HUB_OFFLINE it answers from matrix/models/llama-3-8b.json, whose _mirrors names it."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "empty"),
           "PYTHONPATH": str(ROOT), "FT_MEMBENCH_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "bench.cli", "fit", "--config",
                           str(CONFIGS / "axolotl-llama3-qlora.yml"), "--gpu", "rtx-4090", "--json",
                           "--no-search", "--no-hints"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr
    answer = json.loads(done.stdout)
    assert answer["model"]["asked"] == "NousResearch/Meta-Llama-3-8B"
    assert answer["recipes"][0]["verdict"] in ("fits", "tight", "does-not-fit", "fits, with paging")


# --- training configs ------------------------------------------------------------------------

def test_axolotl_qlora_example():
    r = trainconfig.read(CONFIGS / "axolotl-llama3-qlora.yml")
    assert r.format == "axolotl" and r.model == "NousResearch/Meta-Llama-3-8B"
    assert r.techniques() == ["qlora", "lora-all", "gc", "bf16", "paged-adamw32bit", "packing"]
    assert (r.batch, r.seq) == (2, 4096)
    assert r.options()["lora"]["r"] == 32
    ignored = {i["key"] for i in r.ignored}
    assert {"flash_attention", "gradient_accumulation_steps", "learning_rate", "datasets"} <= ignored


def test_llamafactory_lora_example():
    r = trainconfig.read(CONFIGS / "llamafactory-llama3-lora-sft.yaml")
    assert r.format == "llamafactory" and r.techniques() == ["lora", "lora-all", "gc-reentrant", "bf16"]
    assert (r.batch, r.seq) == (1, 2048)
    assert {"trust_remote_code", "gradient_accumulation_steps"} <= {i["key"] for i in r.ignored}


def test_torchtune_qlora_example():
    r = trainconfig.read(CONFIGS / "torchtune-llama3_1-8B_qlora_single_device.yaml")
    assert r.format == "torchtune" and r.model == "meta-llama/Llama-3.1-8B"
    assert r.techniques() == ["qlora", "gc", "bf16", "adamw-fused", "chunked-ce"]
    assert r.batch == 2 and r.seq is None
    assert "tokenizer.max_seq_len" in {i["key"] for i in r.ignored}


def test_trl_examples():
    r = trainconfig.read(CONFIGS / "trl-zephyr-sft-qlora.yaml")
    assert r.format == "trl" and r.techniques() == ["qlora-fp32", "gc", "amp-bf16", "adamw"]  # as TRL runs it
    assert (r.batch, r.seq) == (4, 2048)
    assert trainconfig.read(CONFIGS / "trl-example-config.yaml").techniques() == ["baseline"]


def test_a_deepspeed_config_is_a_zero_stage(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_optimizer":
                                                                        {"device": "cpu"}, "offload_param":
                                                                        {"device": "cpu"}}}))
    (tmp_path / "args.json").write_text(json.dumps({"model_name_or_path": "Qwen/Qwen2.5-0.5B", "bf16": True,
                                                    "deepspeed": "ds.json", "per_device_train_batch_size": 2,
                                                    "optim": "adamw_bnb_8bit"}))
    r = trainconfig.read(tmp_path / "args.json")
    assert r.techniques() == ["amp-bf16", "adamw8bit", "zero3-offload"]
    doc = json.loads((tmp_path / "args.json").read_text()) | {"num_processes": 4}
    (tmp_path / "args4.json").write_text(json.dumps(doc))
    assert trainconfig.read(tmp_path / "args4.json").techniques() == ["amp-bf16", "adamw8bit", "zero3-offload", "w4"]
    del doc["deepspeed"]
    (tmp_path / "ddp.json").write_text(json.dumps(doc))
    r = trainconfig.read(tmp_path / "ddp.json")
    assert r.techniques() == ["amp-bf16", "adamw8bit"]  # plain DDP: per rank as one process, said so
    assert any(i["key"] == "processes" and "replicates" in i["reason"] for i in r.ignored)


@pytest.mark.parametrize("stage, moved, answer", [
    (3, ("offload_optimizer",), "only offload_optimizer"), (3, ("offload_param",), "only offload_param"),
    (1, ("offload_optimizer",), "ZeRO-1 with its optimizer offloaded"), (2, ("offload_optimizer",), "zero2-offload"),
    (2, ("offload_param",), "zero2"), (3, (), "zero3")])
def test_a_deepspeed_offload_is_answered_only_as_the_engine_that_moves_the_same(tmp_path, stage, moved, answer):
    """zero3-offload moves the optimizer and the parameters: a ZeRO-3 config moving one of them answered so would
    be low by the shards it keeps on the GPU (refused, naming the key); ZeRO-1/2 move no parameters (DeepSpeed
    reads offload_param under stage 3 only), and ZeRO-1's optimizer offload is not simulated."""
    zero = {"stage": stage, **{k: {"device": "cpu"} for k in moved}}
    (tmp_path / "args.json").write_text(json.dumps({"model_name_or_path": "Qwen/Qwen2.5-0.5B", "bf16": True,
                                                    "deepspeed": {"zero_optimization": zero}}))
    if answer.startswith(("only", "ZeRO-1")):
        with pytest.raises(trainconfig.ConfigError, match=f"deepspeed.zero_optimization.*{answer}"):
            trainconfig.read(tmp_path / "args.json")
        return
    r = trainconfig.read(tmp_path / "args.json")
    assert r.techniques()[-1] == answer
    assert ("offload_param" in moved and stage < 3) == any("offload_param" in i["key"] for i in r.ignored)


def test_a_bad_config_is_bad_input(tmp_path):
    (tmp_path / "bad.yaml").write_text("base_model: [unclosed\n")
    proc = fit(["--config", str(tmp_path / "bad.yaml"), "--gpu", "rtx-4090"], tmp_path)
    assert proc.returncode == 2 and "malformed YAML" in proc.stderr and "bad.yaml" in proc.stderr
    (tmp_path / "none.yaml").write_text("foo: 1\n")
    proc = fit(["--config", str(tmp_path / "none.yaml"), "--gpu", "rtx-4090"], tmp_path)
    assert proc.returncode == 2 and "--format" in proc.stderr


# --- the guard -------------------------------------------------------------------------------

def test_does_not_fit_exits_1_with_hints_in_json(tmp_path):
    proc = fit(["tiny-llama", "--gpu", "rtx-4090", "--techniques", "lora", "--seq", "2048", "--batch", "26",
                "--no-search", "--json"], tmp_path)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verdict"] == "does-not-fit" and doc["recipes"][0]["verdict"] in ("oom", "tight")
    assert doc["recipes"][0]["need_bytes"] > doc["gpu"]["memory_bytes"]
    fixes = [h for h in doc["hints"] if h["fits"]]
    assert fixes and all(h["need_bytes"] <= doc["gpu"]["memory_bytes"] for h in fixes)
    assert all("sim" in h["provenance"] for h in doc["hints"])
    assert doc["hints"][0]["fits"] and "gradient checkpointing" in doc["hints"][0]["change"]


def test_tight_exits_1_unless_allowed_and_paging_passes_flagged():
    tight = {"technique": "lora", "verdict": "tight", "record": {"status": "ok"}}
    paged = {"technique": "qlora", "verdict": "fits",
             "record": {"status": "ok", "details": {"paging": {"t4": {"paged_out_bytes": 5}}}}}
    assert guard.exit_code([tight], "t4", asked=True) == 1
    assert guard.exit_code([tight], "t4", asked=True, allow_tight=True) == 0
    assert guard.status(paged, "t4") == "fits-with-paging" and guard.exit_code([paged], "t4", asked=True) == 0
    assert any("with paging" in w for w in guard.warnings([paged], "t4", False))
    assert guard.exit_code([tight, paged], "t4", asked=False) == 0  # the default list: one recipe that fits


def test_changes_cover_the_usual_levers():
    what = [w for w, _ in tofit.changes(["lora"])]
    for lever in ("gradient checkpointing", "bf16", "8-bit", "QLoRA", "offload", "GPUs"):
        assert any(lever in w for w in what), lever


def test_a_hint_says_what_else_it_changes_in_the_trained_dtypes():
    """ZeRO-3 (DeepSpeed's bf16 mode casts the model) turns a QLoRA recipe's fp32 adapters into
    bf16: the axolotl example's ZeRO-3 offload hint read 19% faster than the asked recipe
    (modelled 4.30 s against 5.34 s) for that reason, not for the offload, and must say so."""
    fp32 = {"record": {"details": {"dtypes": {"trainable_weights": ["float32"], "gradients": ["float32"],
                                              "weights": ["bfloat16", "float32"]}}}}
    bf16 = {"record": {"details": {"dtypes": {"trainable_weights": ["bfloat16"], "gradients": ["bfloat16"],
                                              "weights": ["bfloat16"], "master_weights": ["float32"]}}}}
    assert tofit.dtype_change(bf16, fp32) == "trainable weights float32 -> bfloat16; gradients float32 -> bfloat16"
    assert tofit.dtype_change(fp32, fp32) is None and tofit.dtype_change({}, fp32) is None
    line = dict(bf16, technique="qlora+zero3-offload", verdict="fits")
    line["record"]["details"]["speed_model"] = {"t4": {"step_s": 4.3, "tokens_per_s": 1900.0}}
    base = dict(fp32, technique="qlora", verdict="tight")
    base["record"]["details"]["speed_model"] = {"t4": {"step_s": 5.34, "tokens_per_s": 1534.0}}
    hint = tofit._hint("offload", line, base, "t4", 2**34)
    assert hint["also_changes"] and "also changes trainable weights float32 -> bfloat16" in hint["speed_cost"]
    assert hint["speed_cost"].startswith("-19% step time")


def test_a_reader_that_stops_early_is_no_failure_to_report():
    """`ft-membench fit ... | head` closed the pipe mid-table: exit as a tool killed by SIGPIPE (141),
    never "failed: BrokenPipeError ... please report it" (a fresh clone's README run showed that line)."""
    import subprocess
    import sys as _sys
    from bench.runner import launch
    # `true` reads nothing and is gone before the CLI writes its first line: the write meets a closed pipe
    cmd = f"{_sys.executable} -m bench.cli fit qwen2.5-7b --gpu rtx-4090 | true; exit ${{PIPESTATUS[0]}}"
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=launch.ROOT, timeout=120)
    assert "BrokenPipe" not in out.stderr and "please report" not in out.stderr, out.stderr
    assert out.returncode == 141, out.stderr
