"""The catalogue of memory techniques: what each one sets, and what the field says it buys.

Torch-free: the matrix loader validates combinations with it before anything runs, and the
report reads its metadata. The worker reads the resulting knobs (``knobs()``) and acts on
them in bench/worker/train.py; no technique is a branch scattered through the worker.

A cell's technique list is composed with ``+`` (``lora+gc+bf16``). Each entry sets knobs;
two entries setting the same knob is an impossible combination (two precisions, two
optimizers, fa2 with eager, zero3 with fsdp), and ``RULES`` adds the ones that are not a
knob clash (qlora with fp32, a world size without a sharding technique).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

ALL_MODES = frozenset({"cpu", "cuda", "sim"})
DIFFICULTIES = ("low", "medium", "high")   # easiest first: the order the report ranks changes by
WORKLOAD_KNOBS = ("batch_size", "seq_len")  # knobs that change the workload itself, not how it runs

# The defaults every cell starts from: the baseline is exactly these.
DEFAULT_KNOBS = {
    "precision": "fp32",        # fp32 | amp-fp16 | amp-bf16 | bf16 (pure)
    "gc": False,                # activation (gradient) checkpointing
    "accum": 1,                 # micro-batches per optimizer step
    "batch_size": None,         # override of the study's batch size
    "seq_len": None,            # override of the study's sequence length
    "optimizer": "adamw",       # adamw | adamw-fused | adamw8bit | paged-adamw8bit | paged-adamw32bit | adafactor | lion8bit | sgd
    "adapter": None,            # None | lora | qlora
    "attn": "sdpa",             # sdpa | eager | fa2
    "dist": None,               # None | zero1 | zero2 | zero3 | zero2-offload | zero3-offload | fsdp
    "world_size": 1,
    "batching": "fixed",        # fixed | padding | padding-growing | packing
    "alloc_conf": None,         # PYTORCH_CUDA_ALLOC_CONF value
    "load": "random-init",      # random-init | checkpoint | checkpoint-low-cpu-mem-usage
    "loss": "full",             # full (transformers' CE over all fp32 logits) | chunked | liger
    "act_offload": False,       # saved activations to host memory during forward
    "opt_in_bwd": False,        # optimizer step per parameter inside backward
    "compile": False,           # torch.compile of the model
    "dora": False,              # peft DoRA (weight-decomposed LoRA)
    "lora_targets": "options",  # options (technique_options.lora.target_modules) | all-linear
    "kbit_extras": "bf16",      # QLoRA's non-quantized weights: bf16 (torchtune, Unsloth, LLaMA-Factory) | fp32 (peft)
    # workloads beyond the training step: generation and a vLLM engine's plan
    "workload": "train",        # train | generate | vllm
    "new_tokens": None,         # generate: tokens decoded after the prompt (new<N>; default 32)
    "gpu_util": None,           # vllm: gpu_memory_utilization (util<x>; vLLM's default 0.9)
    "max_model_len": None,      # vllm: max_model_len (len<N>; default the model's max_position_embeddings)
    "max_batched_tokens": None, # vllm: max_num_batched_tokens (batched<N>; default vLLM's LLM-class one)
    "coresident_gib": None,     # vllm: GiB another process holds on the same card (coresident<x>)
}


@dataclass(frozen=True)
class Technique:
    name: str
    sets: dict
    summary: str
    saves: str = "-"            # the breakdown categories it is expected to shrink
    expected: str = "-"         # what common advice says it saves, in its own words
    difficulty: str = "low"     # low | medium | high
    overhead: str = "-"         # what common advice says it costs
    modes: frozenset = field(default=ALL_MODES)  # modes in which it can run at all
    defaults: dict = field(default_factory=dict)  # knobs it sets unless another technique of the combination does
    mode_note: str = ""         # why a mode is missing (becomes the skipped record's reason)

    def __post_init__(self):
        if self.difficulty not in DIFFICULTIES:
            raise ValueError(f"{self.name}: difficulty {self.difficulty!r} not one of {DIFFICULTIES}")


def _t(name, sets, summary, **kw):
    return name, Technique(name=name, sets=sets, summary=summary, **kw)


CATALOG: dict[str, Technique] = dict([
    _t("baseline", {}, "fp32 weights, AdamW (torch), SDPA attention, no checkpointing",
       expected="reference point", difficulty="low", overhead="none"),
    # precision
    _t("fp32", {"precision": "fp32"}, "fp32 weights, gradients and optimizer state"),
    _t("amp-bf16", {"precision": "amp-bf16"}, "bf16 autocast over fp32 master weights",
       saves="activations", expected="significant (~50% of activations)",
       overhead="little; faster on tensor-core GPUs"),
    _t("amp-fp16", {"precision": "amp-fp16"}, "fp16 autocast over fp32 master weights, gradient scaler",
       saves="activations", expected="significant (~50% of activations)",
       overhead="loss-scaling bookkeeping", modes=frozenset({"cpu", "cuda"}),
       mode_note="the fp16 gradient scaler reads its inf/nan check back as a value, which fake tensors do not have"),
    _t("bf16", {"precision": "bf16"}, "pure bf16 weights, gradients and optimizer state",
       saves="parameters, gradients, optimizer", expected="~50% of model states",
       overhead="possible precision loss"),
    # activations
    _t("gc", {"gc": True}, "gradient (activation) checkpointing: recompute activations in backward",
       saves="activations", expected="significant (activations down to ~sqrt of layers)",
       difficulty="low", overhead="~20-30% slower (one extra forward)"),
    # optimizers
    _t("adamw", {"optimizer": "adamw"}, "torch AdamW (two fp32 states per parameter)"),
    _t("adamw-fused", {"optimizer": "adamw-fused"},
       "torch AdamW with fused=True (one kernel per parameter group, as torchtune's configs set it)",
       saves="temporaries", expected="no multi-tensor temporaries in the step", overhead="faster"),
    _t("adamw8bit", {"optimizer": "adamw8bit"}, "bitsandbytes 8-bit AdamW (uint8 states)",
       saves="optimizer", expected="~75% of optimizer state", overhead="negligible"),
    _t("paged-adamw8bit", {"optimizer": "paged-adamw8bit"},
       "bitsandbytes paged 8-bit AdamW (states in unified memory, evicted under pressure; "
       "off CUDA bitsandbytes falls back to plain 8-bit states)",
       saves="optimizer", expected="~75% of optimizer state, absorbs spikes",
       overhead="paging traffic under pressure"),
    _t("paged-adamw32bit", {"optimizer": "paged-adamw32bit"},
       "bitsandbytes paged 32-bit AdamW (fp32 states in unified memory, evicted under pressure; "
       "off CUDA bitsandbytes falls back to plain states)",
       saves="optimizer", expected="absorbs spikes: states paged to host memory under pressure",
       overhead="paging traffic under pressure"),
    _t("adafactor", {"optimizer": "adafactor"},
       "Adafactor (factored second moment, no first moment; under ZeRO it gets flat 1-D partitions "
       "and cannot factor)",
       saves="optimizer", expected="most of optimizer state", overhead="slower convergence possible",
       modes=frozenset({"cpu", "cuda"}),
       mode_note="torch's Adafactor reads parameter norms back as values (.item()) in its step, which fake "
                 "tensors do not have"),
    _t("lion8bit", {"optimizer": "lion8bit"}, "bitsandbytes 8-bit Lion (one uint8 state)",
       saves="optimizer", expected="~87% of optimizer state vs AdamW", overhead="retuning"),
    _t("sgd", {"optimizer": "sgd"}, "plain SGD with momentum (one state)",
       saves="optimizer", expected="50% of optimizer state vs AdamW", overhead="convergence"),
    # adapters
    _t("lora", {"adapter": "lora"}, "peft LoRA adapters; base weights frozen",
       saves="gradients, optimizer", expected="very large (>90% of gradients and optimizer)",
       difficulty="medium", overhead="small; quality may differ from full fine-tune"),
    _t("qlora", {"adapter": "qlora"},
       "NF4 base weights (double quantization, bf16 compute; fp16 under amp-fp16) + LoRA + paged 8-bit AdamW "
       "unless the combination names another optimizer (qlora+adamw: TRL's adamw_torch); embeddings, norms and "
       "LM head kept bf16 (torchtune, Unsloth, LLaMA-Factory)",
       saves="parameters, gradients, optimizer", expected="~75% of weights on top of LoRA",
       difficulty="medium", overhead="dequantization: slower steps", defaults={"optimizer": "paged-adamw8bit"}),
    _t("qlora-fp32", {"adapter": "qlora", "kbit_extras": "fp32"},
       "qlora as in the original recipe: peft's prepare_model_for_kbit_training upcasts embeddings, norms "
       "and LM head to fp32 (paged 8-bit AdamW unless another optimizer is named)",
       saves="parameters, gradients, optimizer", expected="~75% of weights on top of LoRA",
       difficulty="medium", overhead="dequantization: slower steps", defaults={"optimizer": "paged-adamw8bit"}),
    _t("dora", {"dora": True}, "peft DoRA (use_dora=True) on the adapter's layers: magnitude vector + LoRA",
       saves="gradients, optimizer", expected="like LoRA, a little more activation memory",
       difficulty="medium", overhead="slower than LoRA (weight norm per step)"),
    _t("lora-all", {"lora_targets": "all-linear"},
       "LoRA on every linear layer (attention and MLP; peft's all-linear, the LM head excluded)",
       saves="gradients, optimizer", expected="more adapter memory, and backward keeps every linear's input",
       difficulty="low", overhead="more adapter compute"),
    # loss
    _t("chunked-ce", {"loss": "chunked"},
       "cross-entropy over 8 chunks of the sequence (torchtune's chunked output loss): LM head and CE per "
       "chunk, fp32 logits one chunk at a time, softmax recomputed in backward",
       saves="activations, temporaries", expected="most of the fp32 logits (GiBs at a 128k vocabulary)",
       overhead="none to small"),
    _t("liger-ce", {"loss": "liger"},
       "Liger Kernel's fused linear cross-entropy: LM head + CE + their gradients chunk by chunk in forward",
       saves="activations, temporaries", expected="the logits and their gradient never materialise",
       difficulty="low", overhead="faster or equal", modes=frozenset({"cuda", "sim"}),
       mode_note="Liger's fused linear cross-entropy is a Triton kernel: it runs on CUDA only"),
    # activation placement, optimizer placement, compilation
    _t("act-offload", {"act_offload": True},
       "saved activations copied to host memory in forward, back in backward (torchtune's OffloadActivations, "
       "its forward and backward stashes kept alive as it keeps them; with gc, the offloaded tensors are the "
       "checkpoints)",
       saves="activations", expected="activations leave the GPU",
       difficulty="low", overhead="PCIe traffic: slower unless overlapped"),
    _t("opt-in-bwd", {"opt_in_bwd": True},
       "optimizer step fused into backward, one parameter at a time (register_post_accumulate_grad_hook): "
       "the full set of gradients never exists",
       saves="gradients", expected="almost all gradient memory", difficulty="medium",
       overhead="none; no gradient accumulation or clipping"),
    _t("compile", {"compile": True},
       "torch.compile of each decoder layer, and of the chunked loss's CE as torchtune's compile_loss (inductor; "
       "sim runs inductor's graphs and partition op by op, values a fused kernel keeps in registers uncounted)",
       saves="activations, temporaries", expected="fused kernels keep fewer intermediates",
       difficulty="low", overhead="compile time; faster steps"),
    # attention kernels
    _t("sdpa", {"attn": "sdpa"}, "torch scaled_dot_product_attention"),
    _t("eager", {"attn": "eager"}, "eager (materialised) attention",
       expected="reference for attention memory", overhead="slowest"),
    _t("fa2", {"attn": "fa2"}, "FlashAttention-2 kernels (flash-attn package)",
       saves="activations", expected="attention memory linear in sequence length",
       difficulty="medium", overhead="faster", modes=frozenset({"cuda"}),
       mode_note="flash-attn kernels exist only for CUDA"),
    # sharding
    _t("zero1", {"dist": "zero1"}, "DeepSpeed ZeRO-1: optimizer states partitioned",
       saves="optimizer", expected="optimizer / N per GPU", difficulty="medium", overhead="communication"),
    _t("zero2", {"dist": "zero2"}, "DeepSpeed ZeRO-2: + gradients partitioned",
       saves="gradients, optimizer", expected="(gradients + optimizer) / N per GPU",
       difficulty="medium", overhead="communication"),
    _t("zero3", {"dist": "zero3"}, "DeepSpeed ZeRO-3: + parameters partitioned",
       saves="parameters, gradients, optimizer", expected="all model states / N per GPU",
       difficulty="medium", overhead="more communication (all-gather per layer)"),
    _t("zero2-offload", {"dist": "zero2-offload"},
       "DeepSpeed ZeRO-2 with optimizer offloaded to CPU (offloaded bytes: details.offloaded_bytes)",
       saves="optimizer", expected="optimizer state leaves the GPU", difficulty="medium",
       overhead="CPU optimizer step and PCIe traffic: much slower"),
    _t("zero3-offload", {"dist": "zero3-offload"},
       "DeepSpeed ZeRO-3 with optimizer and parameters offloaded to CPU (offloaded bytes: details.offloaded_bytes)",
       saves="parameters, gradients, optimizer", expected="model states leave the GPU",
       difficulty="high", overhead="much slower"),
    _t("fsdp", {"dist": "fsdp"}, "PyTorch FSDP2 full shard",
       saves="parameters, gradients, optimizer", expected="all model states / N per GPU",
       difficulty="medium", overhead="communication"),
    # batching
    _t("padding", {"batching": "padding"}, "variable-length samples padded to the longest in each batch",
       saves="-", expected="peak climbs in steps as longer batches arrive", overhead="wasted pad compute"),
    _t("padding-growing", {"batching": "padding-growing"},
       "padded batches whose longest sample grows every step up to the sequence length (length-sorted)",
       saves="-", expected="reserved memory climbs in stairs and never comes down",
       overhead="wasted pad compute; fragmentation"),
    _t("packing", {"batching": "packing"}, "variable-length samples packed into full rows, no pad tokens",
       saves="activations", expected="steady peak, no pad waste", overhead="none; more tokens per step"),
    # allocator and loading
    _t("expandable-segments", {"alloc_conf": "expandable_segments:True"},
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (one growing segment per pool, mapped in "
       "2/20 MiB pages); cuda: the real allocator; cpu and sim: the allocator model's reserved memory "
       "(live bytes unchanged)", saves="reserved",
       expected="less fragmentation (reserved closer to allocated)"),
    _t("ckpt-load", {"load": "checkpoint"}, "load weights from a local checkpoint (from_pretrained)",
       modes=frozenset({"cpu", "cuda"}),
       mode_note="a load technique changes host memory while loading; a simulated step loads no weights"),
    _t("low-cpu-mem-usage", {"load": "checkpoint-low-cpu-mem-usage"},
       "from_pretrained(..., low_cpu_mem_usage=True) from a local checkpoint (transformers 5.x accepts "
       "the flag and ignores it: it always loads lazily)", saves="host memory at load",
       expected="lower host peak while loading", modes=frozenset({"cpu", "cuda"}),
       mode_note="a host-memory effect at load time; a simulated step loads nothing"),
    # workloads beyond the training step, named like a technique (`generate+b8+s2048`, `vllm+util0.8`);
    # no name means `train`
    _t("train", {"workload": "train"}, "the training step (the default workload, spelled out)",
       expected="reference point: the workload every other technique is measured on"),
    _t("generate", {"workload": "generate"},
       "transformers generation: prefill of the prompt (batch x seq), then greedy decoding of new "
       "tokens with the KV cache (DynamicCache)", saves="-", expected="weights + KV cache + one step's activations",
       overhead="-"),
    _t("vllm", {"workload": "vllm"},
       "vLLM engine start-up memory plan: gpu_memory_utilization x total, weights, profiled activation "
       "peak, KV-cache blocks (sim: vLLM's rules, see README; cuda: vLLM itself, optional extra [vllm])",
       expected="KV cache takes what the utilization leaves", overhead="-", modes=frozenset({"cuda", "sim"}),
       mode_note="vLLM's engine runs on a GPU; cpu mode has no engine to plan (sim plans it per GPU profile)"),
])

# The smallest value of each shape setting: the one home of these minimums, used by the
# matrix schema (bench/spec/matrix.py fills them in) and by the numbered techniques below.
# A causal LM predicts token t+1 from token t: one token leaves no target, and its loss is
# NaN (an ok-looking step that trains nothing), so a sequence needs two.
MINIMUMS = {"batch_size": 1, "seq_len": 2, "steps": 1, "warmup_steps": 1, "accum": 1, "world_size": 1}
# The largest: what one cell may ask for before anything runs (issue 25: w10000 would start 10000
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

SHARDED = {"zero1", "zero2", "zero3", "zero2-offload", "zero3-offload", "fsdp"}


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


def knobs(names: list[str]) -> dict:
    """The knobs a combination sets, on top of DEFAULT_KNOBS; ValueError if impossible."""
    out, owner = dict(DEFAULT_KNOBS), {}
    for name in names:
        for knob, value in lookup(name).sets.items():
            if knob in owner:
                raise ValueError(f"{owner[knob]} and {name} both set {knob}: pick one")
            owner[knob], out[knob] = name, value
    for name in names:  # a default (qlora's paged 8-bit AdamW) yields to a technique that sets the knob
        for knob, value in lookup(name).defaults.items():
            if knob not in owner:
                owner[knob], out[knob] = name, value
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
     "a world size above 1 needs a sharding technique (zero1/2/3, zero*-offload or fsdp)"),
    (lambda k, n: k["dist"] == "fsdp" and k["adapter"] == "qlora",
     "fsdp shards QLoRA's 4-bit weights only when bitsandbytes stores them in a 16-bit dtype "
     "(bnb_4bit_quant_storage, as answer.ai's fsdp_qlora and PEFT's FSDP guide set it): not modelled here yet"),
    (lambda k, n: k["dist"] == "fsdp" and k["optimizer"] in BNB_OPTIMIZERS,
     "fsdp cannot step a bitsandbytes optimizer (adamw8bit, lion8bit, the paged ones, or qlora's default "
     "paged-adamw8bit): its update kernels have no DTensor sharding rule"),
    (lambda k, n: k["dist"] == "fsdp" and k["optimizer"] == "adafactor",
     "fsdp cannot step torch's Adafactor: its factored row/column means fail DTensor sharding propagation"),
    (lambda k, n: k["dist"] in ZERO and k["precision"] == "amp-fp16",
     "DeepSpeed ZeRO has no gradient scaler for autocast fp16 (its own fp16 mode is pure fp16 weights): "
     "use amp-bf16 or bf16"),
    (lambda k, n: (k["dora"] or k["lora_targets"] != "options") and not k["adapter"],
     "dora and lora-all change the adapters: combine them with lora or qlora"),
    (lambda k, n: k["opt_in_bwd"] and k["dist"] in ZERO,
     "DeepSpeed owns the optimizer step: it cannot run inside backward per parameter"),
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
    once, when the matrix loads (bench/spec/matrix.py puts it in the cell's spec)."""
    for name in names:
        tech = lookup(name)
        if mode not in tech.modes:
            return f"{name} does not run in {mode} mode: {tech.mode_note}"
    for rule, modes, reason in MODE_RULES:
        if mode not in modes and rule(knobs):
            return f"not in {mode} mode: {reason}"
    return ""


