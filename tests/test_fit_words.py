"""Words that match the numbers: a tight row says what it rests on and is never
called "fits", the config echo says what was simulated, and the report prints no "nan s"."""
from __future__ import annotations

import json

from bench.fit import table
from bench.cells import trainconfig
from tests.test_fit_guard import CONFIGS

GiB = 2**30
H100 = {"memory_bytes": int(79.20 * GiB), "label": "H100 80GB", "kind": "cuda", "gpu_class": "hopper"}


def _tight_line():
    """The newcomer's adamw8bit on an H100: modelled reserved 87.03 GiB on a 79.20 GiB card, allocated 75.05."""
    rec = {"status": "ok", "peak_bytes": int(75.05 * GiB), "modelled_reserved_peak_bytes": int(87.03 * GiB),
           "batch_size": 1, "seq_len": 2048,
           "details": {"verdict_reserve_bytes": 840 * 2**20,
                       "blas_workspaces": {"label": "cuBLAS", "by_gpu": {"h100-80gb": 2 * 32 * 2**20}},
                       "verdict_notes": {"h100-80gb": (
               "fits, with paging: 0.04 of 0.04 GiB of paged optimizer state (CUDA unified memory, outside the "
               "caching allocator) is paged to host memory")}}}
    return {"technique": "adamw8bit", "verdict": "tight", "record": rec, "fit": None}


def test_a_tight_row_says_its_allocations_fit_and_by_how_much_the_reserve_does_not():
    text = table.render([_tight_line()], "h100-80gb", H100, "llama-3.1-8b", best=False)
    # 75.87 GiB of allocations and the context reserve, + the record's 64 MiB of cuBLAS workspaces on sm90
    assert "tight: the step's allocations fit (75.93 GiB with the CUDA reserve and cuBLAS's workspaces, of 79.20)" in text
    assert "(need 87.91 GiB, 8.71 over): it runs only by releasing cached segments" in text
    assert "\n    fits, with paging" not in text and "with paging, if it runs: 0.04 of 0.04 GiB" in text


def test_the_config_echo_says_all_linear_when_lora_all_was_simulated(tmp_path):
    (tmp_path / "sft.json").write_text(json.dumps({"model_name_or_path": "meta-llama/Llama-3.1-8B", "use_peft": True,
                                                  "load_in_4bit": True, "lora_target_modules": "all-linear",
                                                  "lora_r": 16, "bf16": True}))
    r = trainconfig.read(tmp_path / "sft.json")
    assert "lora-all" in r.techniques()
    assert r.as_dict()["options"]["lora"]["target_modules"].startswith("all-linear")
    assert r.options()["lora"]["r"] == 16  # what the simulation takes is unchanged


def test_a_switch_is_echoed_as_written():
    r = trainconfig.read(CONFIGS / "axolotl-llama3-qlora.yml")
    [fa] = [i for i in r.ignored if i["key"] == "flash_attention"]
    assert fa["value"] is True and "flash-attention" in fa["reason"]


def test_the_report_says_no_speed_model_for_a_nan_speed():
    from report import recommend
    assert recommend._speed_text({"speed": float("nan")}, "sim") == "no speed model"
    assert recommend._speed_text({"speed": 1.5}, "sim") == "1.50 s (modelled)"


def _row(technique, verdict, world=1, reason="", seq_fit=None):
    rec = {"status": "ok", "peak_bytes": 10 * GiB, "modelled_reserved_peak_bytes": 20 * GiB, "batch_size": 1,
           "seq_len": 2048, "world_size": world, "details": {"verdict_reserve_bytes": 768 * 2**20}}
    fit = {"seq_answer": "fits", "max_seq_at_batch1": seq_fit, "batch_answer": "none", "reason": "",
           "seq_len": 2048, "resolution_tokens": 256} if seq_fit else None
    return {"technique": technique, "verdict": verdict, "record": rec, "fit": fit, "reason": reason}


def test_the_default_answer_says_its_shape_groups_multi_gpu_rows_and_says_a_repeated_note_once():
    """The default answer of 16 rows, 10 repeating the same notes, multi-GPU rows mixed in: said once, grouped,
    with its shape."""
    note = "oom while loading: the weights alone exceed the card"
    lines = [_row("zero3+w8", "oom", world=8, reason=note), _row("baseline", "oom", reason=note),
             _row("lora", "oom", reason=note), _row("qlora", "fits", seq_fit=2048)]
    text = table.render(lines, "h100-80gb", H100, "qwen2.5-7b", best=True)
    assert "need and verdict: one training step at batch 1 x 2048 tokens" in text
    assert text.count(note) == 1 and "(as for baseline)" in text
    rows = [ln.split()[0] for ln in text.splitlines() if ln.split() and ln.split()[0] in ("zero3+w8", "baseline", "lora")]
    assert rows == ["baseline", "lora", "zero3+w8"] and "on several GPUs (need, speed and verdict per rank):" in text
    assert "qlora: largest sequence at batch 1: 2048 tokens; headroom" in text and "no room for longer samples" in text


def test_a_row_whose_notes_were_all_said_under_one_earlier_row_points_to_it_once():
    """Llama-3.1-8B on a T4: gc's reason and its verdict note were both printed under baseline; gc's row says
    "(as for baseline)" once, not once a note."""
    reason, note = "oom while loading: the weights alone exceed the card", "no bf16 in this recipe: add +bf16"
    lines = []
    for tech in ("baseline", "gc"):
        row = _row(tech, "oom", reason=reason)
        row["record"]["details"]["verdict_notes"] = {"h100-80gb": note}
        lines.append(row)
    text = table.render(lines, "h100-80gb", H100, "llama-3.1-8b", best=False)
    assert text.count(reason) == 1 and text.count(note) == 1
    assert text.count("(as for baseline)") == 1
