"""The catalogue of memory techniques: what each one sets, and what the field says it buys.

Torch-free: the matrix loader validates combinations with it before anything runs, and the
report reads its metadata. The worker reads the resulting knobs (``knobs()``) and acts on
them in bench/train.py; no technique is a branch scattered through the worker.

A cell's technique list is composed with ``+`` (``lora+gc+bf16``). Each entry sets knobs;
two entries setting the same knob is an impossible combination (two precisions, two
optimizers, fa2 with eager, zero3 with fsdp), and ``RULES`` adds the ones that are not a
knob clash (qlora with fp32, a world size without a sharding technique).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

ALL_MODES = frozenset({"cpu", "cuda", "sim"})

# The defaults every cell starts from: the baseline is exactly these.
DEFAULT_KNOBS = {
    "precision": "fp32",        # fp32 | amp-fp16 | amp-bf16 | bf16 (pure)
    "gc": False,                # activation (gradient) checkpointing
    "accum": 1,                 # micro-batches per optimizer step
    "batch_size": None,         # override of the study's batch size
    "seq_len": None,            # override of the study's sequence length
    "optimizer": "adamw",       # adamw | adamw-fused | adamw8bit | paged-adamw8bit | adafactor | lion8bit | sgd
    "adapter": None,            # None | lora | qlora
    "attn": "sdpa",             # sdpa | eager | fa2
    "dist": None,               # None | zero1 | zero2 | zero3 | zero2-offload | zero3-offload | fsdp
    "world_size": 1,
    "batching": "fixed",        # fixed | padding | packing
    "alloc_conf": None,         # PYTORCH_CUDA_ALLOC_CONF value
    "load": "random-init",      # random-init | checkpoint | checkpoint-low-cpu-mem-usage
    "loss": "full",             # full (transformers' CE over all fp32 logits) | chunked | liger
    "act_offload": False,       # saved activations to host memory during forward
    "opt_in_bwd": False,        # optimizer step per parameter inside backward
    "compile": False,           # torch.compile of the model
    "dora": False,              # peft DoRA (weight-decomposed LoRA)
    "lora_targets": "options",  # options (technique_options.lora.target_modules) | all-linear
    "kbit_extras": "bf16",      # QLoRA's non-quantized weights: bf16 (torchtune, Unsloth, LLaMA-Factory) | fp32 (peft)
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
    mode_note: str = ""         # why a mode is missing (becomes the skipped record's reason)


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
    _t("qlora", {"adapter": "qlora", "optimizer": "paged-adamw8bit"},
       "NF4 base weights (double quantization, bf16 compute; fp16 under amp-fp16) + LoRA + paged 8-bit AdamW; "
       "embeddings, norms and LM head kept bf16 (torchtune, Unsloth, LLaMA-Factory)",
       saves="parameters, gradients, optimizer", expected="~75% of weights on top of LoRA",
       difficulty="medium", overhead="dequantization: slower steps"),
    _t("qlora-fp32", {"adapter": "qlora", "optimizer": "paged-adamw8bit", "kbit_extras": "fp32"},
       "qlora as in the original recipe: peft's prepare_model_for_kbit_training upcasts embeddings, norms "
       "and LM head to fp32",
       saves="parameters, gradients, optimizer", expected="~75% of weights on top of LoRA",
       difficulty="medium", overhead="dequantization: slower steps"),
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
       "saved activations copied to host memory in forward, back in backward (torch's save_on_cpu; "
       "with gc, the offloaded tensors are the checkpoints)",
       saves="activations", expected="activations leave the GPU",
       difficulty="low", overhead="PCIe traffic: slower unless overlapped"),
    _t("opt-in-bwd", {"opt_in_bwd": True},
       "optimizer step fused into backward, one parameter at a time (register_post_accumulate_grad_hook): "
       "the full set of gradients never exists",
       saves="gradients", expected="almost all gradient memory", difficulty="medium",
       overhead="none; no gradient accumulation or clipping"),
    _t("compile", {"compile": True},
       "torch.compile of each decoder layer (inductor; sim runs the same graphs and partitioner eagerly)",
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
    _t("packing", {"batching": "packing"}, "variable-length samples packed into full rows, no pad tokens",
       saves="activations", expected="steady peak, no pad waste", overhead="none; more tokens per step"),
    # allocator and loading
    _t("expandable-segments", {"alloc_conf": "expandable_segments:True"},
       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", saves="temporaries",
       expected="less fragmentation (reserved closer to allocated)", modes=frozenset({"cuda"}),
       mode_note="a CUDA caching-allocator setting: it changes nothing off CUDA"),
    _t("ckpt-load", {"load": "checkpoint"}, "load weights from a local checkpoint (from_pretrained)",
       modes=frozenset({"cpu", "cuda"}),
       mode_note="a load technique changes host memory while loading; a simulated step loads no weights"),
    _t("low-cpu-mem-usage", {"load": "checkpoint-low-cpu-mem-usage"},
       "from_pretrained(..., low_cpu_mem_usage=True) from a local checkpoint (transformers 5.x accepts "
       "the flag and ignores it: it always loads lazily)", saves="host memory at load",
       expected="lower host peak while loading", modes=frozenset({"cpu", "cuda"}),
       mode_note="a host-memory effect at load time; a simulated step loads nothing"),
])

# Techniques with a number: ga4 (4 micro-batches), b8 (batch 8), s512 (sequence 512), w2 (2 ranks).
PATTERNS = {
    re.compile(r"ga([1-9][0-9]*)"): lambda n: Technique(
        f"ga{n}", {"accum": n}, f"gradient accumulation over {n} micro-batches of batch/{n}",
        saves="activations", expected="activations / N at the same effective batch",
        overhead="less parallelism per step"),
    re.compile(r"b([1-9][0-9]*)"): lambda n: Technique(
        f"b{n}", {"batch_size": n}, f"batch size {n}", saves="activations",
        expected="activations scale with batch", overhead="throughput"),
    re.compile(r"s([1-9][0-9]*)"): lambda n: Technique(
        f"s{n}", {"seq_len": n}, f"sequence length {n}", saves="activations",
        expected="activations scale with sequence length", overhead="shorter context"),
    re.compile(r"w([1-9][0-9]*)"): lambda n: Technique(
        f"w{n}", {"world_size": n}, f"{n} processes (ranks)", saves="parameters, gradients, optimizer",
        expected="sharded states / N per GPU", overhead="communication"),
}

SHARDED = {"zero1", "zero2", "zero3", "zero2-offload", "zero3-offload", "fsdp"}


def lookup(name: str) -> Technique:
    """The technique called ``name``; KeyError with the known names otherwise."""
    if name in CATALOG:
        return CATALOG[name]
    for pattern, make in PATTERNS.items():
        m = pattern.fullmatch(name)
        if m:
            return make(int(m.group(1)))
    known = ", ".join(sorted(CATALOG)) + ", ga<N>, b<N>, s<N>, w<N>"
    raise KeyError(f"unknown technique {name!r} (known: {known})")


def knobs(names: list[str]) -> dict:
    """The knobs a combination sets, on top of DEFAULT_KNOBS; ValueError if impossible."""
    out, owner = dict(DEFAULT_KNOBS), {}
    for name in names:
        for knob, value in lookup(name).sets.items():
            if knob in owner:
                raise ValueError(f"{owner[knob]} and {name} both set {knob}: pick one")
            owner[knob], out[knob] = name, value
    for rule, reason in RULES:
        if rule(out, names):
            raise ValueError(reason)
    return out


BNB_OPTIMIZERS = {"adamw8bit", "paged-adamw8bit", "lion8bit"}
ZERO = {"zero1", "zero2", "zero3", "zero2-offload", "zero3-offload"}

# Combinations that cannot work, each found by running it (cpu, torch 2.13, DeepSpeed 0.19,
# bitsandbytes 0.50). Everything else composes: ZeRO takes any torch or bitsandbytes
# optimizer, FSDP2 takes LoRA, qlora takes amp-bf16/amp-fp16/bf16 and ZeRO.
RULES = [
    (lambda k, n: k["adapter"] == "qlora" and "fp32" in n,
     "qlora computes in 16-bit over NF4 weights: it cannot be combined with fp32"),
    (lambda k, n: k["world_size"] > 1 and k["dist"] not in SHARDED,
     "a world size above 1 needs a sharding technique (zero1/2/3, zero*-offload or fsdp)"),
    (lambda k, n: k["dist"] == "fsdp" and k["optimizer"] in BNB_OPTIMIZERS,
     "fsdp cannot step a bitsandbytes optimizer (adamw8bit, lion8bit, or qlora's paged-adamw8bit): "
     "its update kernels have no DTensor sharding rule"),
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
]


# Combinations that run in some modes but not others, beyond each technique's own ``modes``.
# (Sim models DeepSpeed's bf16 path, fp32 master weights and moments, analytically:
# bench/worker/sim/sharding.py.)
MODE_RULES: list = []


def skip_reason(names: list[str], knobs: dict, mode: str) -> str:
    """Why a combination cannot run in ``mode`` (becomes a skipped record), or ''. Decided
    once, when the matrix loads (bench/matrix.py puts it in the cell's spec)."""
    for name in names:
        tech = lookup(name)
        if mode not in tech.modes:
            return f"{name} does not run in {mode} mode: {tech.mode_note}"
    for rule, modes, reason in MODE_RULES:
        if mode not in modes and rule(knobs):
            return f"not in {mode} mode: {reason}"
    return ""
