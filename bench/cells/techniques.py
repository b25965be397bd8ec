"""Techniques composed: a cell's technique list (``lora+gc+bf16``) resolved into knobs.

Torch-free: the matrix loader validates combinations with it before anything runs, and the
report reads its metadata. The worker reads the resulting knobs (``knobs()``) and acts on
them in bench/worker/train.py; no technique is a branch scattered through the worker.

Each entry of the catalogue (bench/cells/catalogue.py) sets knobs; two entries setting the same
knob is an impossible combination (two precisions, two optimizers, fa2 with eager, zero3 with
fsdp), and ``RULES`` adds the ones that are not a knob clash (qlora with fp32, a world size
without a sharding technique). Numbered families (``ga4``, ``b8``, ``s512``, ``w2``) and decimal
ones (``util0.9``) are patterns here.
"""
from __future__ import annotations

import re

from bench.cells.catalogue import CATALOG, DEFAULT_KNOBS, Technique

# The smallest value of each shape setting: the one home of these minimums, used by the
# matrix schema (bench/cells/matrix.py fills them in) and by the numbered techniques below.
# A causal LM predicts token t+1 from token t: one token leaves no target, and its loss is
# NaN (an ok-looking step that trains nothing), so a sequence needs two.
MINIMUMS = {"batch_size": 1, "seq_len": 2, "steps": 1, "warmup_steps": 1, "accum": 1, "world_size": 1}
# The largest: what one cell may ask for before anything runs (w10000 would start 10000
# ranks; s1000000000 allocated 15 GiB of real memory before the budget acted). Far above any
# study here (world size 8, sequences of 128k tokens), far below what would take the machine down.
MAXIMUMS = {"batch_size": 1 << 16, "seq_len": 1 << 20, "steps": 10_000, "warmup_steps": 10_000, "accum": 1 << 16,
            "world_size": 256, "new_tokens": 1 << 20, "max_model_len": 1 << 22, "max_batched_tokens": 1 << 22,
            "timeout_s": 7 * 24 * 3600}


def _numbered(prefix: str, knob: str, summary: str, **kw):
    """A technique family ``<prefix><N>`` setting ``knob`` to N (ga4, b8, s512, w2)."""
    def make(n: int) -> Technique:
        if n < MINIMUMS[knob]:
            raise ValueError(f"{prefix}{n} sets {knob} to {n}, below its minimum of {MINIMUMS[knob]}")
        return Technique(f"{prefix}{n}", {knob: n}, summary.format(n=n), **kw)
    return re.compile(prefix + r"(0|[1-9][0-9]*)"), make


# Techniques with a number: ga4 (4 micro-batches), b8 (batch 8), s512 (sequence 512), w2 (2 ranks).
# Written without leading zeros, so one setting has one spelling (one cell id).
PATTERNS = dict([
    _numbered("ga", "accum", "gradient accumulation over {n} micro-batches of batch/{n}",
              saves="activations", expected="activations / N at the same effective batch",
              overhead="less parallelism per step"),
    _numbered("b", "batch_size", "batch size {n}", saves="activations",
              expected="activations scale with batch", overhead="throughput"),
    _numbered("s", "seq_len", "sequence length {n}", saves="activations",
              expected="activations scale with sequence length", overhead="shorter context"),
    _numbered("w", "world_size", "{n} processes (ranks)", saves="parameters, gradients, optimizer",
              expected="sharded states / N per GPU", overhead="communication"),
]) | {
    # workload settings: generate's new tokens, vLLM's max_model_len and max_num_batched_tokens
    re.compile(r"new([1-9][0-9]*)"): lambda n: Technique(
        f"new{n}", {"new_tokens": n}, f"generate {n} new tokens after the prompt"),
    re.compile(r"len([1-9][0-9]*)"): lambda n: Technique(
        f"len{n}", {"max_model_len": n}, f"vLLM max_model_len {n}"),
    re.compile(r"batched([1-9][0-9]*)"): lambda n: Technique(
        f"batched{n}", {"max_batched_tokens": n}, f"vLLM max_num_batched_tokens {n}"),
}


def _util(text: str) -> Technique:
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError(f"util{text}: gpu_memory_utilization must be in (0, 1], got {value}")
    return Technique(f"util{text}", {"gpu_util": value},
                     f"vLLM gpu_memory_utilization {value} (the fraction of the card's total memory vLLM requests)",
                     expected="a smaller KV cache, room for other processes")


# Decimal patterns (util0.8, coresident12.5): the group is a string, not an int.
DECIMAL_PATTERNS = {
    re.compile(r"util([0-9]+(?:\.[0-9]+)?)"): _util,
    re.compile(r"coresident([0-9]+(?:\.[0-9]+)?)"): lambda x: Technique(
        f"coresident{x}", {"coresident_gib": float(x)},
        f"another process holds {x} GiB of the same card (e.g. a training run that has not released it)"),
}

SHARDED = {"zero1", "zero2", "zero3", "zero2-offload", "zero3-offload", "fsdp", "fsdp-offload", "fsdp1"}
FSDP = {"fsdp", "fsdp-offload"}  # FSDP2 (DTensor shards); fsdp1: flat parameters
# sharding engines that partition the parameters: QLoRA's 4-bit weights must then be stored in a
# 16-bit dtype (bnb_4bit_quant_storage) so the engine can flatten and shard them with the rest
# (answer.ai's fsdp_qlora, PEFT's FSDP and DeepSpeed ZeRO-3 guides)
SHARDS_PARAMETERS = {"zero3", "zero3-offload", "fsdp", "fsdp-offload", "fsdp1"}
# engines sim runs as one rank runs them (bench/worker/sim/rankgroup.py); the others are partitioned by formula
TRACED_PER_RANK = {"fsdp", "fsdp-offload", "fsdp1", "zero1", "zero2", "zero3", "zero2-offload", "zero3-offload"}


def traced_per_rank(spec: dict) -> bool:
    """Whether sim runs this cell's sharded step as one of its ranks runs it (a rank's own trace, searched
    and replayed as any single-process step's), rather than one process partitioned by formula."""
    knobs = spec["knobs"]
    return knobs.get("dist") in TRACED_PER_RANK and spec.get("world_size", 1) > 1


def lookup(name: str) -> Technique:
    """The technique called ``name`` (catalogue, numbered or decimal pattern); KeyError with the
    known names otherwise, ValueError for a setting out of range (``s1``, ``util1.5``)."""
    if name in CATALOG:
        return CATALOG[name]
    for pattern, make in PATTERNS.items():
        m = pattern.fullmatch(name)
        if m:
            tech = make(int(m.group(1)))
            for knob, value in tech.sets.items():
                if knob in MAXIMUMS and value > MAXIMUMS[knob]:
                    raise ValueError(f"{name} sets {knob} to {value}, above its limit of {MAXIMUMS[knob]}")
            return tech
    for pattern, make in DECIMAL_PATTERNS.items():
        m = pattern.fullmatch(name)
        if m:
            return make(m.group(1))
    known = ", ".join(sorted(CATALOG)) + ", ga<N>, b<N>, s<N>, w<N>, new<N>, len<N>, batched<N>, util<x>, coresident<x>"
    raise KeyError(f"unknown technique {name!r} (known: {known})")


ADAPTERS = ("lora", "qlora", "qlora-fp32", "dora", "lora-all")


def _order(name: str) -> tuple:
    """Where ``name`` sorts in a canonical spelling, as the matrix mostly writes them: the
    adapter, the sharding engine, the other catalogue entries in the catalogue's order, then the
    numbered and decimal families in their order here, by value; unknown names last."""
    if name in CATALOG:
        return (0 if name in ADAPTERS else 1 if name in SHARDED else 2, list(CATALOG).index(name), 0.0)
    for i, pattern in enumerate([*PATTERNS, *DECIMAL_PATTERNS]):
        m = pattern.fullmatch(name)
        if m:
            return (3, i, float(m.group(1)))
    return (4, 0, 0.0)


def canonical(combo: str, known=()) -> str:
    """The one spelling of a combination (``fsdp+qlora+gc+w2`` and ``qlora+fsdp+gc+w2``
    are one recipe, one cell): the spelling in ``known`` (e.g. the default matrix's, whose stored
    records and cell ids use it) with the same set of techniques, else the techniques in
    ``_order``'s order. A technique written twice is kept twice (``knobs`` refuses it)."""
    names = combo.split("+")
    key = sorted(names)
    for spelling in known:
        if sorted(spelling.split("+")) == key:
            return spelling
    return "+".join(sorted(names, key=_order))


def knobs(names: list[str]) -> dict:
    """The knobs a combination sets, on top of DEFAULT_KNOBS; ValueError if impossible."""
    out, owner = dict(DEFAULT_KNOBS), {}
    for name in names:
        for knob, value in lookup(name).sets.items():
            if knob in owner:
                raise ValueError(f"{owner[knob]} and {name} both set {knob}: pick one")
            owner[knob], out[knob] = name, value
    # A default (qlora's paged 8-bit AdamW) yields to a technique that sets the knob; a sharding
    # engine's default comes first (FSDP's torch AdamW: it cannot step qlora's bitsandbytes one).
    for name in sorted(names, key=lambda n: "dist" not in lookup(n).sets):
        for knob, value in lookup(name).defaults.items():
            if knob not in owner:
                owner[knob], out[knob] = name, value
    if out["adapter"] == "qlora" and out["dist"] in SHARDS_PARAMETERS:
        out["quant_storage"] = "bf16"
    for rule, reason in RULES:
        if rule(out, names):
            raise ValueError(reason(out, names) if callable(reason) else reason)
    return out


BNB_OPTIMIZERS = {"adamw8bit", "paged-adamw8bit", "paged-adamw32bit", "lion8bit"}
ZERO = {"zero1", "zero2", "zero3", "zero2-offload", "zero3-offload"}

# Knobs only a training step has, with the value that means "not used".
TRAIN_ONLY = {"optimizer": "adamw", "gc": False, "accum": 1, "dist": None, "world_size": 1,
              "batching": "fixed", "load": "random-init", "alloc_conf": None}
GENERATE_ONLY = ("new_tokens",)
VLLM_ONLY = ("gpu_util", "max_model_len", "max_batched_tokens", "coresident_gib")


def _workload_clash(k: dict, names: list[str]) -> str:
    """Why a workload cannot take the knobs set by ``names`` ('' if it can)."""
    wl = k["workload"]
    if wl != "train":
        for name in names:
            sets = lookup(name).sets
            bad = [knob for knob in sets if knob in TRAIN_ONLY and sets[knob] != TRAIN_ONLY[knob]]
            if bad or (name in ("adamw", "fp32") and wl == "vllm"):
                return (f"{name} is a training technique ({', '.join(bad) or 'precision'}): {wl} runs no "
                        f"optimizer step, no backward and no sharding engine")
        if k["precision"] in ("amp-bf16", "amp-fp16"):
            return f"{wl} has no autocast recipe here: use bf16 weights (or qlora's 4-bit base)"
    if wl == "vllm" and k["precision"] not in ("fp32", "bf16"):
        return "vllm loads the model in its config dtype (bf16 here)"
    for knob, owner in ((GENERATE_ONLY, "generate"), (VLLM_ONLY, "vllm")):
        if wl != owner and any(k[x] is not None for x in knob):
            return f"{', '.join(x for x in knob if k[x] is not None)} applies to the {owner} workload only"
    if wl == "vllm" and k["attn"] == "sdpa" and "sdpa" in names:
        return "vllm picks its own attention backend (FlashAttention / FlashInfer): sdpa does not apply"
    return ""


# Combinations that cannot work, each found by running it (cpu, torch 2.13, DeepSpeed 0.19,
# bitsandbytes 0.50). Everything else composes: ZeRO takes any torch or bitsandbytes
# optimizer, FSDP2 takes LoRA, qlora takes amp-bf16/amp-fp16/bf16 and ZeRO.
# Each entry: (rule(knobs, names) -> bool, reason: a string, or a function of (knobs, names)).
RULES = [
    (lambda k, n: k["adapter"] == "qlora" and "fp32" in n,
     "qlora computes in 16-bit over NF4 weights: it cannot be combined with fp32"),
    (lambda k, n: k["world_size"] > 1 and k["dist"] not in SHARDED,
     "a world size above 1 needs a sharding technique (zero1/2/3, zero*-offload, fsdp, fsdp-offload or fsdp1)"),
    (lambda k, n: k["dist"] in FSDP and k["optimizer"] in BNB_OPTIMIZERS,
     "fsdp cannot step a bitsandbytes optimizer (adamw8bit, lion8bit, the paged ones): its update kernels "
     "have no DTensor sharding rule; qlora+fsdp trains its adapters with torch AdamW, as answer.ai's fsdp_qlora "
     "and PEFT's FSDP guide do (its default when no optimizer is named)"),
    (lambda k, n: k["dist"] in FSDP and k["optimizer"] == "adafactor",
     "fsdp cannot step torch's Adafactor: its factored row/column means fail DTensor sharding propagation"),
    (lambda k, n: k["dist"] == "fsdp1" and k["adapter"] == "qlora" and k["precision"] not in ("amp-bf16", "amp-fp16"),
     "qlora+fsdp1 needs autocast (amp-bf16, as the HF Trainer's bf16=True runs it): FSDP1's mixed precision "
     "hands the adapters bf16 weights (bnb_4bit_quant_storage) while peft casts their input to the adapters' "
     "own fp32, and the matmul refuses the two dtypes (under fp32 and under bf16 weights alike)"),
    (lambda k, n: k["dist"] in ZERO and k["precision"] == "amp-fp16",
     "DeepSpeed ZeRO has no gradient scaler for autocast fp16 (its own fp16 mode is pure fp16 weights): "
     "use amp-bf16 or bf16"),
    (lambda k, n: not k["double_quant"] and k["adapter"] != "qlora",
     "nf4-no-dq changes how qlora quantizes its base weights: combine it with qlora or qlora-fp32"),
    (lambda k, n: (k["dora"] or k["lora_targets"] != "options") and not k["adapter"],
     "dora and lora-all change the adapters: combine them with lora or qlora"),
    (lambda k, n: k["opt_in_bwd"] and k["dist"] in ZERO,
     "DeepSpeed owns the optimizer step: it cannot run inside backward per parameter"),
    (lambda k, n: k["no_sync"] and k["dist"] not in ("fsdp1", "fsdp", "fsdp-offload"),
     "no-sync is FSDP's gradient accumulation without the sync (FSDP1's no_sync, FSDP2's "
     "set_requires_gradient_sync(False)): combine it with fsdp1, fsdp or fsdp-offload"),
    (lambda k, n: k["no_sync"] and k["accum"] < 2,
     "no-sync acts between the micro-batches of one step: combine it with gradient accumulation (ga<N>, N >= 2)"),
    (lambda k, n: k["fsdp1_wrap"] != "accelerate" and k["dist"] != "fsdp1",
     "wrap-layers chooses FSDP1's units: combine it with fsdp1"),
    (lambda k, n: k["opt_in_bwd"] and k["accum"] > 1,
     "the optimizer in backward steps on every backward: it cannot accumulate gradients (torchtune refuses it too)"),
    (lambda k, n: k["opt_in_bwd"] and k["precision"] == "amp-fp16",
     "the fp16 gradient scaler must see every gradient before any step: no optimizer in backward"),
    # what a workload other than training cannot take, and what only one workload takes
    (lambda k, n: bool(_workload_clash(k, n)), _workload_clash),
]


# Combinations that run in some modes but not others, beyond each technique's own ``modes``.
# (Sim models DeepSpeed's bf16 path, fp32 master weights and moments, analytically:
# bench/worker/sim/sharding.py.)
MODE_RULES: list = []


def skip_reason(names: list[str], knobs: dict, mode: str) -> str:
    """Why a combination cannot run in ``mode`` (becomes a skipped record), or ''. Decided
    once, when the matrix loads (bench/cells/matrix.py puts it in the cell's spec)."""
    for name in names:
        tech = lookup(name)
        if mode not in tech.modes:
            return f"{name} does not run in {mode} mode: {tech.mode_note}"
    for rule, modes, reason in MODE_RULES:
        if mode not in modes and rule(knobs):
            return f"not in {mode} mode: {reason}"
    return ""




def markdown_table() -> str:
    """The catalogue as a markdown table: each technique, the knobs it sets, the knobs it sets
    only when no other technique of the combination does (``defaults``), the modes it runs in,
    and its summary. docs/composing.md holds this table (tests/test_composition.py)."""
    def fmt(d: dict) -> str:
        return ", ".join(f"`{k}={v}`" for k, v in d.items()) or "-"
    rows = ["| technique | sets | default (yields to an explicit choice) | modes | what it is |",
            "|---|---|---|---|---|"]
    for name, t in CATALOG.items():
        summary = t.summary.replace("|", "/")
        rows.append(f"| `{name}` | {fmt(t.sets)} | {fmt(t.defaults)} | {', '.join(sorted(t.modes))} | {summary} |")
    rows.append("| `ga<N>`, `b<N>`, `s<N>`, `w<N>` | `accum`, `batch_size`, `seq_len`, `world_size` = N | - | "
                "cpu, cuda, sim | gradient accumulation, batch, sequence length, processes |")
    rows.append("| (derived) | `quant_storage=bf16` when `adapter=qlora` and `dist` is one of "
                + ", ".join(f"`{d}`" for d in sorted(SHARDS_PARAMETERS)) + " | - | cpu, cuda, sim | "
                "bitsandbytes stores the 4-bit weights in bf16 so the engine shards them |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import argparse
    import sys
    parser = argparse.ArgumentParser(prog="python -m bench.cells.techniques",
                                     description="The technique catalogue: what each technique sets.")
    parser.add_argument("--markdown", action="store_true", required=True,
                        help="print the catalogue as the markdown table of docs/composing.md")
    parser.parse_args()
    sys.stdout.write(markdown_table())
