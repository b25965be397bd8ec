"""``--config`` is read as the matrix is: a bounded regular file under the
strict safe loader, and a memory-relevant value that cannot be what it means is bad input naming
the key, never a default that answers another recipe with exit 0."""
import json
import os
import time

import pytest

from bench import cli
from bench.fit import guard
from bench.cells import trainconfig
from bench.cells.trainconfig import reading

BASE = "model_name_or_path: tiny-llama\nmax_seq_length: 256\ngradient_checkpointing: true\n"


def refused(path, *words):
    with pytest.raises(trainconfig.ConfigError) as err:
        trainconfig.read(path)
    text = str(err.value)
    assert all(w in text for w in words), text
    assert "\n" not in text and len(text) < 600
    return text


@pytest.mark.parametrize("extra,key", [
    ("per_device_train_batch_size: four\n", "per_device_train_batch_size: 'four'"),
    ("per_device_train_batch_size: 0\n", "per_device_train_batch_size"),
    ("deepspeed: /nonexistent/ds.json\n", "deepspeed"),
    ("deepspeed: {zero_optimization: {stage: '3'}}\n", "deepspeed.zero_optimization.stage: '3'"),
    ("deepspeed: {zero_optimization: {stage: 7}}\n", "deepspeed.zero_optimization.stage: 7"),
    ("deepspeed: [1, 2]\n", "deepspeed"),
    ("use_peft: true\nlora_r: sixteen\n", "lora_r"),
    ("use_peft: true\nlora_target_modules: 5\n", "lora_target_modules"),
])
def test_an_invalid_memory_relevant_value_is_refused_naming_the_key(tmp_path, extra, key):
    (tmp_path / "c.yaml").write_text(BASE.replace("max_seq_length: 256\n", "") + extra)
    refused(tmp_path / "c.yaml", key)


def test_a_sequence_that_is_no_integer_is_refused(tmp_path):
    for value in ("256.5", ".nan"):
        (tmp_path / "c.yaml").write_text(f"model_name_or_path: tiny-llama\nmax_seq_length: {value}\n")
        refused(tmp_path / "c.yaml", "max_seq_length")


def test_stage_0_and_a_readable_deepspeed_file_still_answer(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    (tmp_path / "c.yaml").write_text(BASE + "deepspeed: ds.json\n")
    assert "zero2" in trainconfig.read(tmp_path / "c.yaml").techniques()
    (tmp_path / "c.yaml").write_text(BASE + "deepspeed: {zero_optimization: {stage: 0}}\n")
    assert not any(t.startswith("zero") for t in trainconfig.read(tmp_path / "c.yaml").techniques())


def test_the_cli_exits_2_naming_the_key(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(BASE + "per_device_train_batch_size: four\n")
    code = cli.main(["fit", "--config", str(tmp_path / "c.yaml"), "--gpu", "t4", "--no-search", "--json"])
    out, err = capsys.readouterr()
    assert code == guard.BAD_INPUT and "per_device_train_batch_size" in json.loads(out)["error"]["message"]


# --- item 5: read as the matrix is ---------------------------------------------------------------

def test_duplicate_keys_are_refused_in_yaml_and_json(tmp_path):
    (tmp_path / "d.yaml").write_text("model_name_or_path: tiny-llama\nload_in_4bit: true\nuse_peft: true\n"
                                     "load_in_4bit: false\n")
    refused(tmp_path / "d.yaml", "duplicate key 'load_in_4bit'")
    (tmp_path / "d.json").write_text('{"model_name_or_path": "a", "model_name_or_path": "b"}')
    refused(tmp_path / "d.json", "duplicate key 'model_name_or_path'")


def test_an_anchor_bomb_is_refused_quickly(tmp_path):
    levels = 8
    helpers = "x_helpers:\n  - &a0 [" + ",".join(["lol"] * 9) + "]\n" + "".join(
        f"  - &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, levels))
    (tmp_path / "b.yaml").write_text(BASE + "use_peft: true\n" + helpers + f"fsdp: *a{levels - 1}\n")
    t0 = time.monotonic()
    refused(tmp_path / "b.yaml", "more than 100000 values")
    assert time.monotonic() - t0 < 5


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path):
    (tmp_path / "deep.yaml").write_text(BASE + "x: " + "[" * 5000 + "]" * 5000 + "\n")
    refused(tmp_path / "deep.yaml", "nested deeper than 100 levels")
    (tmp_path / "deep.json").write_text('{"x": ' + "[" * 5000 + "]" * 5000 + "}")
    refused(tmp_path / "deep.json", "nested deeper")


@pytest.mark.skipif(not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"), reason="POSIX only")
def test_devices_fifos_folders_and_huge_files_are_refused_without_reading(tmp_path):
    os.mkfifo(tmp_path / "f.yaml")
    refused(tmp_path / "f.yaml", "not a regular file")   # would hang if opened for a blocking read
    refused("/dev/zero", "not a regular file")
    refused(tmp_path, "a folder")
    (tmp_path / "big.yaml").write_text(BASE + "# " + "x" * (reading.MAX_BYTES + 1) + "\n")
    refused(tmp_path / "big.yaml", "bytes")
    (tmp_path / "c.yaml").write_text(BASE + "deepspeed: /dev/zero\n")
    refused(tmp_path / "c.yaml", "deepspeed", "not a regular file")


def test_a_long_mapped_value_is_echoed_bounded(tmp_path):
    (tmp_path / "c.yaml").write_text(BASE + "fsdp: [" + ", ".join(["full_shard"] * 2000) + "]\n")
    r = trainconfig.read(tmp_path / "c.yaml")
    assert all(len(json.dumps(m["value"])) < 300 for m in r.mapped + r.ignored)
