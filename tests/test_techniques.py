"""The technique catalogue and the pieces that need no worker: impossible combinations are
refused when the matrix loads (with the reason), batches pad or pack as they say, and the
tracker follows storages freed by resizing, moved to the host, or only shaped (meta)."""
import inspect

import pytest
import torch

from bench.worker import data
from bench.cells import matrix, techniques as tech
from bench.worker.memtrack import MemTracker

STUDY = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"]}


@pytest.mark.parametrize("name", sorted(tech.CATALOG) + ["ga4", "b8", "s512", "w2"])
def test_every_technique_sets_knobs_the_defaults_know(name):
    sets = tech.lookup(name).sets
    assert set(sets) <= set(tech.DEFAULT_KNOBS), name
    # a world size alone needs a sharding technique; adapter variants need an adapter
    needs = {"w2": None, "dora": ["lora"], "lora-all": ["lora"], "nf4-no-dq": ["qlora"],
             "no-sync": ["fsdp1", "ga2"], "wrap-layers": ["fsdp1"]}
    if name in needs and needs[name] is None:
        return
    knobs = tech.knobs([name] + needs.get(name, []))
    assert all(knobs[k] == v for k, v in sets.items())


@pytest.mark.parametrize("combo, reason", [
    ("amp-bf16+bf16", "both set precision"),
    ("fp32+amp-fp16", "both set precision"),
    ("fa2+eager", "both set attn"),
    ("zero3+fsdp", "both set dist"),
    ("dora", "combine them with lora or qlora"),
    ("lora-all+gc", "combine them with lora or qlora"),
    ("lora+nf4-no-dq", "combine it with qlora or qlora-fp32"),
    ("zero2+opt-in-bwd", "DeepSpeed owns the optimizer step"),
    ("opt-in-bwd+ga2", "cannot accumulate gradients"),
    ("qlora+adamw-fused+adamw8bit", "both set optimizer"),
    ("zero2+zero3-offload", "both set dist"),
    ("lora+qlora", "both set adapter"),
    ("adamw8bit+sgd", "both set optimizer"),
    ("padding+packing", "both set batching"),
    ("ckpt-load+low-cpu-mem-usage", "both set load"),
    ("ga2+ga4", "both set accum"),
    ("qlora+fp32", "cannot be combined with fp32"),
    ("gc+w2", "needs a sharding technique"),
    ("fsdp+adamw8bit", "bitsandbytes"),
    ("fsdp+lion8bit", "bitsandbytes"),
    ("qlora+fsdp+adamw8bit", "DTensor sharding rule"),
    ("qlora+fsdp-offload+paged-adamw8bit", "bitsandbytes"),
    ("fsdp+fsdp-offload", "both set dist"),
    ("fsdp+paged-adamw32bit", "bitsandbytes"),
    ("fsdp+adafactor", "Adafactor"),
    ("zero2+amp-fp16", "no gradient scaler"),
    ("zero3-offload+amp-fp16", "no gradient scaler"),
    ("qlora+fsdp1+w2", "needs autocast"),
    ("fsdp+fsdp1", "both set dist"),
])
def test_impossible_combinations_are_refused_at_load_with_the_reason(matrix_file, combo, reason):
    with pytest.raises(ValueError, match=reason):
        tech.knobs(combo.split("+"))
    path = matrix_file({"s": {**STUDY, "techniques": ["gc", combo]}})
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    assert str(err.value).startswith(f"{path}: studies.s.techniques[1]: {combo}: ")
    assert reason in str(err.value)


@pytest.mark.parametrize("combo", [
    "lora+gc+bf16", "qlora+gc", "qlora+amp-bf16", "qlora+bf16", "qlora+zero2", "zero3-offload+gc",
    "lora+zero3", "fsdp+lora", "fsdp+amp-fp16", "zero2+amp-bf16", "zero2+adamw8bit", "zero2+adafactor",
    "zero3+sgd", "ga2+zero2", "ckpt-load+zero3", "packing+gc", "padding+ga2", "bf16+lion8bit",
    "qlora+zero3", "zero3-offload+adamw8bit", "low-cpu-mem-usage+fsdp",
    "qlora+fsdp", "qlora+adamw+fsdp", "fsdp1+w2", "lora+fsdp1+w4", "qlora+fsdp1+amp-bf16+w2", "qlora+fsdp-offload+gc", "qlora+adamw", "qlora+paged-adamw32bit",
])
def test_combinations_that_work_are_not_refused(combo):
    tech.knobs(combo.split("+"))


@pytest.mark.parametrize("mode", ["cpu", "cuda", "sim"])
def test_expandable_segments_run_in_every_mode(mode):
    # cpu and sim: the allocator model's reserved memory is what it changes (bench/estimate/allocator.py)
    assert tech.skip_reason(["expandable-segments"], tech.knobs(["expandable-segments"]), mode) == ""


@pytest.mark.parametrize("combo, mode, words", [
    ("fa2", "cpu", "flash-attn kernels exist only for CUDA"),
    ("low-cpu-mem-usage", "sim", "loads nothing"),
    ("ckpt-load", "sim", "loads no weights"),
    ("amp-fp16", "sim", "gradient scaler"),
    ("adafactor", "sim", ".item()"),
    ("liger-ce", "cpu", "CUDA only"),
])

def test_a_technique_outside_its_modes_is_a_skip_with_the_reason(combo, mode, words):
    names = combo.split("+")
    assert words in tech.skip_reason(names, tech.knobs(names), mode)


@pytest.mark.parametrize("combo", ["zero3+bf16+w8", "lora+zero2+bf16+w4", "qlora+zero3+w2", "lora+fsdp+w2",
                                   "zero2+amp-bf16", "compile", "chunked-ce+act-offload+opt-in-bwd", "liger-ce"])
def test_what_runs_in_cpu_or_cuda_mode_also_runs_in_sim(combo):
    names = combo.split("+")
    assert tech.skip_reason(names, tech.knobs(names), "sim") == ""


def test_skips_are_decided_when_the_matrix_loads_and_no_worker_starts(matrix_file, tmp_path):
    """One decision, in the spec; the launcher honours it without starting a process."""
    from bench.runner import launch
    from bench.cells import matrix
    study = {"mode": "sim", "models": ["qwen2.5-7b"], "gpus": ["rtx-4090"], "techniques": ["adafactor", "lora"]}
    cells = matrix.load(matrix_file({"s": study}))
    assert "Adafactor" in cells["qwen2.5-7b__sim__adafactor"]["skip_reason"]
    assert cells["qwen2.5-7b__sim__lora"]["skip_reason"] == ""
    log = tmp_path / "w.log"
    rec = launch.run_cell(cells["qwen2.5-7b__sim__adafactor"], log)
    assert rec["status"] == "skipped" and "Adafactor" in rec["reason"]
    assert not log.exists(), "a skipped cell must not start a worker"


def test_every_technique_has_its_metadata_for_the_report():
    for name, t in tech.CATALOG.items():
        assert t.summary and t.difficulty in ("low", "medium", "high"), name
        if name not in ("baseline", "fp32", "adamw", "sdpa", "ckpt-load"):
            assert t.expected != "-", f"{name} says nothing about what it is expected to save"


# -- batches ------------------------------------------------------------------------
def _take(kind, steps=6, batch=4, seq=64, seed=0):
    return list(data.batches(kind, batch, seq, 1000, steps, seed, "cpu"))


def test_packing_leaves_no_pad_tokens_and_padding_does():
    packed, padded = _take("packing"), _take("padding")
    for b in packed:
        assert b["attention_mask"].all() and b["input_ids"].shape == (4, 64)
        assert b["real_tokens"] == b["input_ids"].numel()
    pads = sum(b["input_ids"].numel() - b["real_tokens"] for b in padded)
    assert pads > 0
    for b in padded:
        assert b["real_tokens"] == int(b["attention_mask"].sum())
        assert (b["labels"][b["attention_mask"] == 0] == -100).all()  # pads never reach the loss


def test_padded_widths_follow_the_seeded_lengths_and_vary():
    widths = [b["input_ids"].shape[1] for b in _take("padding", steps=8)]
    assert widths == [b["input_ids"].shape[1] for b in _take("padding", steps=8)]
    assert len(set(widths)) > 2 and max(widths) <= 64
    assert widths != [b["input_ids"].shape[1] for b in _take("padding", steps=8, seed=1)]


def test_accumulation_splits_a_batch_into_equal_micro_batches():
    (batch,) = _take("fixed", steps=1)
    micros = data.split(batch, 2)
    assert [m["input_ids"].shape for m in micros] == [(2, 64), (2, 64)]
    assert torch.equal(torch.cat([m["input_ids"] for m in micros]), batch["input_ids"])


# -- tracker ------------------------------------------------------------------------
def test_storage_resized_in_place_is_followed():
    with MemTracker() as t:
        x = torch.empty(1000)
        assert t.total == 4000
        x.untyped_storage().resize_(0)            # how FSDP2 frees its gathered weights
        assert t.total == 0
        x.untyped_storage().resize_(8000)         # ... and refills them
        assert t.total == 8000 and t.peak == 8000
    assert "resize_" not in vars(torch.UntypedStorage)  # the wrapper is gone afterwards
    # the trace: born, freed at 0, born again under the same serial; no free of the emptied storage
    serial = t.events[0][1]
    assert [(ev[0], ev[1]) for ev in t.events] == [(1, serial), (0, serial), (1, serial)]


def test_meta_tensors_hold_no_memory():
    with MemTracker() as t:
        keep = torch.zeros(1 << 20, device="meta")
        assert t.total == 0 and t.track(keep) == 0


def test_host_storages_leave_the_device_peak():
    with MemTracker() as t:
        state = torch.zeros(1000)
        t.to_host([state])
        assert (t.total, t.host_total) == (0, 4000)
        t.host_phases.add("optimizer")
        with t.in_phase("optimizer"):
            step_tmp = torch.ones(500)             # an offloaded optimizer step allocates on the host
        assert (t.total, t.host_total) == (0, 6000)
        del step_tmp
        assert t.host_total == 4000 and t.host_peak == 6000


def test_reset_peak_keeps_loading_out_of_the_training_peak():
    with MemTracker() as t:
        staging = torch.zeros(1000)
        weights = torch.zeros(10)  # noqa: F841 - kept alive: it is what stays live
        del staging
        assert t.reset_peak() == 4040
        assert t.peak == 40
        act = torch.zeros(20)  # noqa: F841 - kept alive: it sets the peak
        assert t.peak == 120 and sum(t.breakdown().values()) == 120


def test_offload_buffer_names_exist_in_the_installed_deepspeed():
    """bench/worker/zeromem.py finds DeepSpeed's host buffers by attribute name: a rename in a new
    DeepSpeed release must fail here, not silently put offloaded bytes back on the device."""
    from deepspeed.runtime.zero import stage3, stage_1_and_2
    from bench.worker import zeromem
    source = inspect.getsource(stage_1_and_2) + inspect.getsource(stage3)
    for flag, names in zeromem.HOST_BUFFERS.items():
        assert f"self.{flag}" in source
        for name in names:
            assert f"self.{name.replace('_DeepSpeedZeroOptimizer_Stage3', '')}" in source, name


@pytest.mark.parametrize("combo, optimizer", [
    ("qlora", "paged-adamw8bit"),             # the QLoRA recipe's own
    ("qlora+gc", "paged-adamw8bit"),
    ("qlora+adamw", "adamw"),                 # TRL's default adamw_torch
    ("qlora+adamw-fused", "adamw-fused"),     # torchtune's QLoRA configs
    ("qlora+paged-adamw32bit", "paged-adamw32bit"),
    ("adamw8bit+qlora-fp32", "adamw8bit"),    # order does not matter
    ("qlora+adamw+zero3+w4", "adamw"),
])
def test_qlora_keeps_its_optimizer_unless_one_is_named(combo, optimizer):
    knobs = tech.knobs(combo.split("+"))
    assert knobs["adapter"] == "qlora" and knobs["optimizer"] == optimizer


def test_a_default_does_not_change_the_digest_of_techniques_without_one():
    from bench.cells import inputs
    assert "defaults" not in inputs.technique_entry(tech.lookup("lora"))
    assert inputs.technique_entry(tech.lookup("qlora"))["defaults"] == {"optimizer": "paged-adamw8bit"}
