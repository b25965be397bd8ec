"""``fit --dataset --padding-free``: a step is one row of its samples' tokens together, run as the
recipe's unpadded step at batch 1; such rows reach past the sampled lengths (up to batch x max_length),
and the step derived there equals a simulation at that width."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.dataset import answer, epoch
from bench.fit import cells
from tests.helpers import REPO
from tests.test_dataset_ranks import lifetimes

TECH, GPU = "lora+bf16", "rtx-4090"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """tiny-llama with a context of 8192: a padding-free row may be longer than any one sample (TRL restarts
    the position ids at each sample), but sim refuses a width beyond the config's context."""
    from tests.helpers import MATRIX_DIR
    path = tmp_path_factory.mktemp("model") / "config.json"
    raw = json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text())
    path.write_text(json.dumps(dict(raw, max_position_embeddings=8192)))
    return str(path)


def test_a_padding_free_step_is_as_wide_as_its_tokens():
    lengths = [100, 300, 50, 2000, 129]
    assert epoch.free_widths(lengths, [[0, 1, 2], [3, 4]]) == [512, 2176]   # 450 -> 512, 2129 -> 2176
    assert epoch.padded_widths(lengths, [[0, 1, 2], [3, 4]]) == [384, 2048]


@pytest.mark.slow
def test_the_step_past_the_sampled_lengths_is_its_simulation(tmp_path, model):
    def spec_at(seq, padded=False):
        (spec,) = cells.specs(model, GPU, [TECH], seq, 1).values()
        return dict(spec, cross_check=False)

    from bench.records import reuse
    from bench.search.sample_cache import SampleCache
    from bench.search.simpool import SimPool
    with SimPool(2) as pool:
        samples = SampleCache(pool, reuse.versions(), folder=tmp_path / "cache" / "fit-samples")
        fam, how = answer.family(spec_at, 1, False, samples.run_many, lambda m: None)
        (wide,) = pool.run_many([(spec_at(4096), None)])
    assert max(how["sample_seqs"]) == 2048
    got = fam.epoch([4096, 4096])
    assert lifetimes(got) == lifetimes(wide["_trace"])

    f = tmp_path / "lengths.txt"
    f.write_text("\n".join(str(n) for n in [40, 700, 90, 1500, 20, 2000, 3000, 100] * 5))
    env = dict(os.environ, FT_MEMBENCH_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-m", "bench.cli", "fit", model, "--gpu", GPU, "--techniques", TECH,
                          "--batch", "4", "--seq", "2048", "--lengths", str(f), "--padding-free", "--json",
                          "--results", str(tmp_path / "r")], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["padding_free"] and doc["simulation"]["simulated"] == 0 and doc["epoch"]["steps"] == 10
    widths = [s["width"] for s in doc["epoch"]["by_step"]]
    assert max(widths) > 2048 and all(w % 128 == 0 for w in widths)   # rows longer than any one sample
    assert {f["change"].split(" (")[0] for f in doc["to_change"]} == {"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}


def test_padding_free_with_packing_or_accumulation_is_refused(tmp_path):
    f = tmp_path / "lengths.txt"
    f.write_text("40\n700\n")
    base = [sys.executable, "-m", "bench.cli", "fit", "tiny-llama", "--gpu", GPU, "--seq", "2048", "--batch", "4",
            "--lengths", str(f), "--padding-free", "--results", str(tmp_path / "r")]
    env = dict(os.environ, FT_MEMBENCH_CACHE=str(tmp_path / "cache"))
    both = subprocess.run([*base, "--techniques", TECH, "--packing"], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=600)
    assert both.returncode == 2 and "one or the other" in both.stderr
    accum = subprocess.run([*base, "--techniques", f"{TECH}+ga2"], capture_output=True, text=True, env=env,
                           cwd=REPO, timeout=600)
    assert accum.returncode == 2 and "not modelled" in accum.stderr


def test_a_trl_config_says_padding_free(tmp_path):
    from bench.cells import trainconfig
    cfg = tmp_path / "sft.yaml"
    cfg.write_text("model_name_or_path: tiny-llama\nuse_peft: true\nbf16: true\npadding_free: true\nseed: 7\n")
    assert trainconfig.read(cfg).epoch == {"seed": 7, "padding_free": True}
    cfg.write_text("model_name_or_path: tiny-llama\nuse_peft: true\nbf16: true\npadding_free: false\n")
    assert "padding_free" not in trainconfig.read(cfg).epoch
