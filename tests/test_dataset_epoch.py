"""An epoch of the user's data through the allocator (bench/dataset/stairs.py, answer.py): the
derived epoch trace equals a simulation of those steps event by event, the first step that does
not fit is the first batch too wide, and ``ft-membench fit --lengths`` answers end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.dataset import answer, stairs
from bench.estimate import replay, verdicts
from bench.fit import cells
from tests.helpers import REPO

MODEL, TECH, BATCH, GPU = "tiny-llama", "lora+bf16", 2, "rtx-4090"
pytestmark = pytest.mark.slow


def spec_at(seq, padded, steps=None):
    (spec,) = cells.specs(MODEL, GPU, [f"{TECH}+padding-growing" if padded else TECH], seq, BATCH).values()
    return dict(spec, cross_check=False, **({"steps": steps} if steps else {}))


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    """The four sample lengths, padded and not (through the sample cache the command reads), and a run of four
    steps growing 512, 1024, 1536, 2048 (padding-growing's steps at 2048)."""
    made = sample_sims(tmp_path_factory, spec_at, BATCH)
    return dict(made, grown=made["grown"]["_trace"])


def sample_sims(tmp_path_factory, spec_at, batch: int) -> dict:
    """The recipe's padded and unpadded sample shapes, in a sample cache of their own (the command's), and
    the record of three padding-growing steps at 2048."""
    from bench.records import reuse
    from bench.search.sample_cache import SampleCache
    from bench.search.simpool import SimPool
    cache = tmp_path_factory.mktemp("cache")
    with SimPool(2) as pool:
        samples = SampleCache(pool, reuse.versions(), folder=cache / "fit-samples")
        fam, how = answer.family(spec_at, batch, True, samples.run_many, lambda m: None)
        answer.family(spec_at, batch, False, samples.run_many, lambda m: None)   # packing's, for the command
        (grown,) = pool.run_many([(spec_at(2048, True, steps=3), None)])
    return {"family": fam, "how": how, "grown": grown, "cache": cache}


def canonical(trace):
    """The events with storages numbered by first appearance (serial labels are arbitrary)."""
    c, seen = trace["columns"], {}
    serial = [seen.setdefault(s, len(seen)) for s in c["serial"]]
    return list(zip(c["kind"], serial, c["bytes"], c["step"], c["op"], c["phase"], c["category"]))


def test_the_derived_epoch_is_the_simulated_one_event_by_event(sims):
    got = sims["family"].epoch([512, 1024, 1536, 2048])
    assert canonical(got) == canonical(sims["grown"])
    assert replay.replay(got)["reserved_peak_bytes"] == replay.replay(sims["grown"])["reserved_peak_bytes"]


def test_two_steps_are_the_sample_itself(sims):
    fam = sims["family"]   # the 512 sample: step 0 at 256, step 1 at 512
    assert fam.epoch([256, 512])["columns"] == {k: v for k, v in fam.base["columns"].items()
                                                if k in stairs.COLUMNS} | {"stream": fam.epoch([256, 512])["columns"]["stream"]}


def test_widths_off_the_grid_are_refused(sims):
    with pytest.raises(ValueError, match="multiples of 128"):
        sims["family"].epoch([100, 200])


def test_the_first_oom_is_the_first_batch_too_wide(sims):
    fam = sims["family"]
    steady = {w: replay.replay(fam.epoch([w] * 4))["reserved_peak_bytes"] for w in (512, 1024, 1536)}
    assert steady[512] < steady[1024] < steady[1536]
    profile = {"memory_bytes": (steady[1024] + steady[1536]) // 2 + verdicts.RESERVE_BYTES}
    widths = [512, 1024, 512, 256, 1536, 2048, 512]
    batches = [[2 * k, 2 * k + 1] for k in range(len(widths))]
    lengths = [n for w in widths for n in (w, 10)]
    got = answer.epoch_answer(fam, lengths, batches, widths, None, profile, 2048)
    assert not got["survives"] and got["verdict"] == "oom" and got["first_oom"]["step"] == 4
    assert got["first_oom"]["lengths"] == [1536, 10] and got["first_oom"]["width"] == 1536
    stairs_ = [s["reserved_bytes"] for s in got["staircase"]]
    assert stairs_ == sorted(stairs_) and got["staircase"][-1]["width"] == 2048
    cut = answer.shortest_cut(fam, lengths, [batches], None, profile, None, 2048)
    assert cut["max_length"] == 1024 and cut["samples_cut"] == 2 and cut["tokens_cut"] == 512 + 1024
    fine = answer.epoch_answer(fam, lengths, batches, widths, None, {"memory_bytes": 80 * 2 ** 30}, 2048)
    assert fine["survives"] and fine["verdict"] == "fits" and fine["first_oom"] is None
    assert fine["per_step_allocated"]["max"] == fine["per_width"][2048]["allocated_bytes"]


def lengths_command(tmp_path, cache, tech: str = TECH, batch: int = BATCH) -> tuple[list[str], dict]:
    """``ft-membench fit --lengths`` over 40 lengths (8 of them past 2048), its sample shapes from ``cache``."""
    f = tmp_path / "lengths.txt"
    f.write_text("\n".join(str(n) for n in [40, 700, 90, 1500, 20, 2000, 3000, 100] * 5))
    cmd = [sys.executable, "-m", "bench.cli", "fit", MODEL, "--gpu", GPU, "--techniques", tech, "--batch", str(batch),
           "--seq", "2048", "--lengths", str(f), "--results", str(tmp_path / "results")]
    return cmd, dict(os.environ, FT_MEMBENCH_CACHE=str(cache))


def json_answer(cmd: list[str], env: dict) -> dict:
    out = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_fit_lengths_end_to_end(sims, tmp_path):
    cmd, env = lengths_command(tmp_path, sims["cache"])
    doc = json_answer(cmd, env)
    assert doc["epoch"]["survives"] and doc["epoch"]["steps"] == 20 and doc["dataset"]["truncated_samples"] == 5
    assert doc["simulation"]["simulated"] == 0          # the sample shapes came from the cache
    assert {f["change"].split(" (")[0] for f in doc["to_change"]} >= {
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "packing"}
    text = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert text.returncode == 0 and "survives the epoch" in text.stdout and "reserved staircase: step 0" in text.stdout
    bad = subprocess.run([*cmd[:-4], "--lengths", str(tmp_path / "none.txt")], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=600)
    assert bad.returncode == 2 and "none.txt: cannot read it" in bad.stderr


def test_tight_when_only_releasing_the_cache_gets_through(sims):
    """Growing widths leave cached blocks too small for the next step: uncapped, the allocator
    reserves more than the widest step alone; under a cap between the two it frees its cache
    and goes on (bench/estimate/allocator.py), the verdict bench/estimate/verdicts.py calls tight."""
    fam = sims["family"]
    widths = [512, 1024, 1536, 2048, 2048]
    grown = replay.replay(fam.epoch(widths))["reserved_peak_bytes"]
    alone = replay.replay(fam.epoch([2048] * 5))["reserved_peak_bytes"]
    assert alone < grown
    profile = {"memory_bytes": (alone + grown) // 2 + verdicts.RESERVE_BYTES}
    batches = [[k] for k in range(len(widths))]
    got = answer.epoch_answer(fam, widths, batches, widths, None, profile, 2048)
    assert got["verdict"] == "tight" and got["survives"] and got["first_oom"] is None


def test_a_trl_config_sets_the_epoch_order(sims, tmp_path):
    """seed, group_by_length and pad_to_multiple_of come from the config where the command line is silent."""
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("model_name_or_path: tiny-llama\nuse_peft: true\ndtype: bfloat16\nbf16: true\n"
                   "per_device_train_batch_size: 2\nmax_length: 2048\nseed: 7\ngroup_by_length: true\n"
                   "pad_to_multiple_of: 64\n")
    lens = tmp_path / "l.txt"
    lens.write_text("40\n700\n90\n1500\n20\n2000\n3000\n100\n")
    env = dict(os.environ, FT_MEMBENCH_CACHE=str(sims["cache"]))
    out = subprocess.run([sys.executable, "-m", "bench.cli", "fit", MODEL, "--gpu", GPU, "--config", str(cfg),
                          "--lengths", str(lens), "--seed", "3", "--json", "--results", str(tmp_path / "r")],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert (doc["technique"], doc["batch"], doc["sampling"], doc["pad_to_multiple_of"]) == (
        TECH, BATCH, "group_by_length", 64)
    assert doc["seed"] == 3          # the command line wins over the config's 7
    assert doc["simulation"]["simulated"] == 0
