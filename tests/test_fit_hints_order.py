"""The "what to change" hints, in the order people try them and in words that match the numbers
(bench/fit/tofit.py)."""
from __future__ import annotations

from bench.fit import tofit

GiB = 2**30


def _line(technique, verdict, need_gib, step_s=None):
    rec = {"status": "ok", "batch_size": 2, "seq_len": 4096,
           "modelled_reserved_peak_bytes": int(need_gib * GiB), "peak_bytes": int(need_gib * GiB),
           "details": {"speed_model": {"rtx-4090": {"step_s": step_s, "tokens_per_s": 8192 / step_s}}} if step_s else {}}
    return {"technique": technique, "verdict": verdict, "record": rec}


def test_the_free_shape_change_comes_first_and_more_gpus_last():
    """The newcomer's TRL config, tight on a 4090 at batch 2 x 4096: batch 2 -> 1 with accumulation
    came fifth, after offload and ZeRO-3 on 2, 4 and 8 GPUs (it has no speed model)."""
    base = _line("qlora+lora-all+gc+bf16+packing", "tight", 25.15, step_s=4.0)
    base["fit"] = {"max_batch_at_seq": 1, "peak_at_max_batch_bytes": 15 * GiB, "max_seq_at_batch1": 7424,
                   "peak_at_max_seq_bytes": 22 * GiB, "seq_answer": "fits", "batch_answer": "fits"}

    def evaluate(recipes):
        out = []
        for names in recipes:
            what = "+".join(names)
            step = 3.2 if "zero3-offload" in names else 2.0 if "zero3" in names else 4.0
            out.append(_line(what, "fits" if "zero" in what or "expandable" in what else "tight", 20, step_s=step))
        return out
    got = tofit.hints(base, "rtx-4090", {"memory_bytes": 24 * GiB, "kind": "cuda"}, evaluate)
    changes = [h["change"] for h in got if h["fits"]]
    assert changes[0] == "batch 2 -> 1 (ga2 keeps the effective batch); at batch 1 contexts up to 7424 tokens fit"
    assert changes[1].startswith("expandable segments")  # tight: the allocations fit, the reserve does not
    assert [tofit.rank(c) for c in changes] == sorted(tofit.rank(c) for c in changes)
    assert "GPUs" in changes[-1] and "offload" in changes[-4]  # faster (made-up step times), yet after the free fixes
    assert not any("shorter samples" in h["speed_cost"] for h in got)  # 7424 is longer than 4096


def test_a_precision_setting_comes_before_another_training_method():
    """Full fine-tuning (amp-bf16+gc) on an H100: QLoRA (-45% step time) was offered ahead of +bf16."""
    ranks = {what: tofit.rank(what) for what, _ in tofit.changes(["amp-bf16", "gc"])}
    assert ranks["bf16 weights (+bf16)"] < ranks["QLoRA (4-bit base, LoRA adapters)"]
    assert ranks["QLoRA (4-bit base, LoRA adapters)"] < ranks["offload (ZeRO-3, CPU offload, one GPU)"] < \
        ranks["2 GPUs (ZeRO-3)"]


def test_a_longer_context_at_batch_1_is_not_called_shorter_samples():
    base = _line("lora+gc", "oom", 30, step_s=4.0)
    base["fit"] = {"max_seq_at_batch1": 6656, "peak_at_max_seq_bytes": 22 * GiB, "seq_answer": "fits"}
    [h] = tofit.shape_hints(base, "rtx-4090", 23 * GiB)
    assert h["change"].startswith("batch 2 -> 1") and "up to 6656 tokens" in h["change"]
    assert "shorter samples" not in h["speed_cost"]
    base["record"]["seq_len"] = 8192
    [h] = tofit.shape_hints(base, "rtx-4090", 23 * GiB)
    assert h["change"] == "context 8192 -> 6656 tokens at batch 1" and "shorter samples" in h["speed_cost"]


def test_a_faster_hint_says_its_speed_comes_from_the_dtype_change():
    """The axolotl example's ZeRO-3 offload hint read -19% step time: DeepSpeed's bf16 cast of the adapters."""
    cost = tofit._with_also("-19% step time (4.30 s against 5.34 s)", "trainable weights float32 -> bfloat16",
                            4.30, 5.34)
    assert cost.startswith("-19% step time") and "faster only because it also changes trainable weights" in cost
    assert "faster only" not in tofit._with_also("+5% step time", "gradients float32 -> bfloat16", 5.6, 5.34)


def test_fewer_gpus_are_not_simulated_where_the_most_do_not_fit():
    """14B QLoRA on a 4090: ZeRO-3 on 2, 4 and 8 GPUs were all oom, 105-115 s of simulations."""
    base = _line("qlora", "oom", 36.7, step_s=4.0)
    asked = []

    def evaluate(recipes):
        asked.extend("+".join(r) for r in recipes)
        return [_line("+".join(r), "oom", 30, step_s=4.0) for r in recipes]
    got = tofit.hints(base, "rtx-4090", {"memory_bytes": 24 * GiB, "kind": "cuda"}, evaluate)
    assert "qlora+zero3+w8" in asked and not {"qlora+zero3+w2", "qlora+zero3+w4"} & set(asked)
    assert any(h["change"] == "8 GPUs (ZeRO-3)" for h in got)
    asked.clear()

    def fits_on_8(recipes):
        asked.extend("+".join(r) for r in recipes)
        return [_line("+".join(r), "fits" if "w8" in r or "w4" in r else "oom", 20, step_s=4.0) for r in recipes]
    got = tofit.hints(base, "rtx-4090", {"memory_bytes": 24 * GiB, "kind": "cuda"}, fits_on_8)
    assert {"qlora+zero3+w2", "qlora+zero3+w4", "qlora+zero3+w8"} <= set(asked)  # the fewest that fit is asked
    assert [h["change"] for h in got if h["fits"]][:1] == ["4 GPUs (ZeRO-3)"]


def test_a_bracketed_search_names_the_shape_known_not_to_fit():
    base = _line("qlora+gc", "fits", 10, step_s=4.0)
    base["fit"] = {"max_seq_at_batch1": 11264, "seq_below": 12288, "seq_answer": "bracketed",
                   "peak_at_max_seq_bytes": 22 * GiB, "peak_at_next_seq_bytes": 24 * GiB}
    [h] = tofit.next_step(base, "rtx-4090", 23 * GiB)
    assert h["change"] == ("context 12288 tokens at batch 1 does not fit; 11264 does; between them not searched "
                           "(the search's budget ran out)")


def test_accumulation_under_fsdp_names_what_its_need_leaves_out():
    """The HF Trainer's accelerate runs no_sync between micro-batches: under FSDP the smaller-batch hint's
    need holds only with sync_each_batch=True, and says so; a one-GPU recipe's hint has no such caveat."""
    fit = {"max_batch_at_seq": 1, "peak_at_max_batch_bytes": 15 * GiB}
    for technique, caveat in (("lora+fsdp1+gc+w2", True), ("fsdp+bf16+gc+w4", True), ("lora+gc", False),
                              ("lora+fsdp1+no-sync+ga2+w2", False)):
        base = {**_line(technique, "oom", 30), "fit": fit}
        (hint,) = tofit.shape_hints(base, "rtx-4090", 24 * GiB)
        assert ("sync_each_batch=True" in hint["change"]) is caveat, (technique, hint["change"])


def test_a_hint_on_a_record_that_breaks_a_consistency_rule_says_so():
    """The 70B QLoRA + ZeRO-3 hint: gc-reentrant "fits" a 24 GB card at 23.50 GiB, from a record whose modelled
    reserved peak is +26% over its allocated one, most of that fragmentation made while the model loads
    (bench/records/consistency.py): the hint keeps its figure and says the rule it breaks, in the text and the JSON."""
    from types import SimpleNamespace

    from bench.fit import guard
    base = _line("qlora+zero3+gc+w4", "oom", 52.8, step_s=9.0)
    fine = _line("qlora+zero3+gc-reentrant+w4", "fits", 22.5, step_s=9.5)
    broken = _line("qlora+zero3+gc-reentrant+w4", "fits", 22.5, step_s=9.5)
    broken["record"].update(peak_bytes=int(17.9 * GiB), allocator_model={
        "allocated_peak_bytes": int(17.9 * GiB), "fragmentation_growth": [{"step": -1, "phase": "load", "bytes": 9 * GiB}]})
    assert tofit._hint("reentrant", fine, base, "rtx-4090", 23 * GiB)["broken_rules"] == []
    hint = dict(tofit._hint("reentrant", broken, base, "rtx-4090", 23 * GiB), for_recipe="qlora+zero3+gc+w4")
    [problem] = hint["broken_rules"]
    assert "arises while the model loads" in problem
    q = SimpleNamespace(recipe=None, notes=[])
    assert f"    not to be trusted: {problem}" in guard.describe(q, [hint], [], 1).splitlines()


def test_qlora_under_zero3_is_offered_fsdp_which_shards_the_4bit_base_as_it_loads():
    """transformers never builds a quantized model under zero.Init: each ZeRO-3 rank loads the whole 4-bit
    model (Llama-3.1-70B: 36.9 GiB a GPU, oom on 24 GB cards however many); FSDP's CPU-RAM-efficient load
    shards it. The swap keeps the rest of the recipe, offload included."""
    got = dict(tofit.changes(["qlora", "zero3", "gc", "w4"]))
    fsdp = [new for what, new in got.items() if what.startswith("FSDP instead of ZeRO-3")]
    assert fsdp == [["qlora", "fsdp", "gc", "w4"]]
    off = [new for what, new in tofit.changes(["qlora", "zero3-offload", "gc"]) if what.startswith("FSDP instead")]
    assert off == [["qlora", "fsdp-offload", "gc"]]
    assert not [w for w, _ in tofit.changes(["lora", "zero3", "bf16", "w4"]) if w.startswith("FSDP instead")]
