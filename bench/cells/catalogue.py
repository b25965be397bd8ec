"""The catalogue of memory techniques as data: each technique, the knobs it sets (and those it
sets only when no other technique of the combination does), what the field says it buys, its
difficulty and cost, and the modes it runs in. DEFAULT_KNOBS are the knobs every cell starts
from: the baseline is exactly these.

Torch-free. How a combination of names becomes knobs, and which combinations the libraries
refuse, is bench/cells/techniques.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

ALL_MODES = frozenset({"cpu", "cuda", "sim"})
DIFFICULTIES = ("low", "medium", "high")   # easiest first: the order the report ranks changes by
WORKLOAD_KNOBS = ("batch_size", "seq_len")  # knobs that change the workload itself, not how it runs

# The defaults every cell starts from: the baseline is exactly these.
# A LoRA cell's options where its matrix says nothing (``technique_options.lora`` overrides any key):
# peft's LoraConfig with rank 8, alpha 16, no dropout, on the attention projections. The one copy:
# the matrix loader fills every LoRA cell's spec from it, and the worker and the corpus read it here.
LORA_DEFAULTS = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}

DEFAULT_KNOBS = {
    "precision": "fp32",        # fp32 | amp-fp16 | amp-bf16 | bf16 (pure)
    "gc": False,                # activation (gradient) checkpointing: False | True (non-reentrant) | "reentrant"
    "accum": 1,                 # micro-batches per optimizer step
    "batch_size": None,         # override of the study's batch size
    "seq_len": None,            # override of the study's sequence length
    "optimizer": "adamw",       # adamw | adamw-fused | adamw8bit | paged-adamw8bit | paged-adamw32bit | adafactor | lion8bit | sgd
    "adapter": None,            # None | lora | qlora
    "attn": "sdpa",             # sdpa | eager | fa2
    "dist": None,               # None | zero1 | zero2 | zero3 | zero2-offload | zero3-offload | fsdp | fsdp-offload | fsdp1
    "world_size": 1,
    "batching": "fixed",        # fixed | padding | padding-growing | packing
    "alloc_conf": None,         # PYTORCH_CUDA_ALLOC_CONF value
    "load": "random-init",      # random-init | checkpoint | checkpoint-low-cpu-mem-usage
    "loss": "full",             # full (transformers' CE over all fp32 logits) | shift (4.46-4.48's) | chunked | liger
    "act_offload": False,       # saved activations to host memory during forward
    "opt_in_bwd": False,        # optimizer step per parameter inside backward
    "compile": False,           # torch.compile of the model
    "dora": False,              # peft DoRA (weight-decomposed LoRA)
    "lora_targets": "options",  # options (technique_options.lora.target_modules) | all-linear
    "quant_storage": None,      # bnb_4bit_quant_storage: None (uint8) | bf16 (derived: qlora under FSDP or ZeRO-3)
    "kbit_extras": "bf16",      # QLoRA's non-quantized weights: bf16 (torchtune, Unsloth, LLaMA-Factory) | fp32 (peft)
    "keep_output": False,       # the loop keeps the model's output (its logits) until the optimizer step (keep-output)
    "double_quant": True,       # QLoRA's NF4 absmax quantized again (bnb_4bit_use_double_quant): True | False (nf4-no-dq)
    "no_sync": False,           # FSDP: every micro-batch but a step's last runs without the gradient sync (no-sync)
    "fsdp1_wrap": "accelerate", # FSDP1's units: accelerate (peft's policy for a peft model) | layers (decoder layers only)
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
    _t("amp-bf16", {"precision": "amp-bf16"}, "bf16 autocast over fp32 master weights (under FSDP also FSDP2's "
       "MixedPrecisionPolicy: gathered weights and compute in bf16, fp32 shards, as accelerate and torchtitan run it)",
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
    _t("gc-reentrant", {"gc": "reentrant"},
       "gradient checkpointing with torch's reentrant checkpoint (use_reentrant: true): each layer's forward runs "
       "without an autograd graph, so nothing a layer's autograd nodes hold outlives it (bitsandbytes' 4-bit "
       "matmul keeps a reference to its weight on its node: under ZeRO-3 the gathered weight)",
       saves="activations", expected="as gc; PEFT's QLoRA + ZeRO-3 recipe sets it",
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
    _t("nf4-no-dq", {"double_quant": False},
       "qlora's NF4 without double quantization (bnb_4bit_use_double_quant=False, bitsandbytes' default): one fp32 "
       "absmax per 64 weights (0.5 bit/weight) instead of an 8-bit absmax with fp32 constants per 256 blocks "
       "(~0.127 bit/weight); fitcheck-llm's and transformers' BitsAndBytesConfig default",
       saves="-", expected="costs ~0.37 bit per quantized weight (~0.3 GiB on a 7B)",
       difficulty="low", overhead="none"),
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
    _t("shift-ce", {"loss": "shift"},
       "transformers 4.46-4.48's causal-LM loss (and the loss of the forward before it): the fp32 logits shifted "
       "into a contiguous copy before the cross-entropy, one more fp32 batch x sequence x vocabulary tensor at "
       "the loss and in its backward (removed in 4.49, PR #35646); for runs on those releases",
       saves="-", expected="costs one more fp32 copy of the logits at the loss", difficulty="low", overhead="none"),
    _t("keep-output", {"keep_output": True},
       "a plain training loop that keeps the model's output until the step ends (out = model(**batch); "
       "out.loss.backward(); optimizer.step()): its logits stay alive through backward and the optimizer step, "
       "where transformers' Trainer, TRL and torchtune let them go once the loss is computed",
       saves="-", expected="costs the logits through backward (batch x sequence x vocabulary, fp32 where the "
       "LM head is)", difficulty="low", overhead="none"),
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
    _t("fsdp", {"dist": "fsdp"}, "PyTorch FSDP2 full shard (torch AdamW unless the combination names another "
       "optimizer: it cannot step bitsandbytes' ones; with qlora the 4-bit weights are stored in bf16, "
       "bnb_4bit_quant_storage, so FSDP shards them like any bf16 tensor)",
       saves="parameters, gradients, optimizer", expected="all model states / N per GPU",
       difficulty="medium", overhead="communication", defaults={"optimizer": "adamw"}),
    _t("fsdp-offload", {"dist": "fsdp-offload"},
       "PyTorch FSDP2 full shard with CPU offload (CPUOffloadPolicy: parameter and gradient shards in host "
       "memory, the optimizer steps there; offloaded bytes: details.offloaded_bytes)",
       saves="parameters, gradients, optimizer", expected="model states leave the GPU; one unit gathered at a time",
       difficulty="high", overhead="host-device copies of every shard each step, CPU optimizer step: much slower",
       defaults={"optimizer": "adamw"}),
    _t("fsdp1", {"dist": "fsdp1"},
       "PyTorch FSDP1 (FullyShardedDataParallel) full shard as accelerate's FSDP plugin runs it with "
       "`accelerate config`'s answers: each decoder layer and then the whole model wrapped "
       "(TRANSFORMER_BASED_WRAP), flat parameters, use_orig_params, BACKWARD_PRE prefetch, limit_all_gathers; "
       "torch AdamW unless the combination names another torch optimizer",
       saves="parameters, gradients, optimizer", expected="all model states / N per GPU, plus a gathered unit and the next",
       difficulty="medium", overhead="communication", defaults={"optimizer": "adamw"}),
    _t("no-sync", {"no_sync": True},
       "gradient accumulation without the gradient sync (FSDP1's no_sync, FSDP2's set_requires_gradient_sync(False)): "
       "every micro-batch of a step but the last skips the reduce-scatter and keeps each unit's unsharded gradient "
       "(accelerate's accumulate() and the HF Trainer by default, Lightning Fabric's no_backward_sync); without it "
       "each micro-batch's gradients are reduced (accelerate's sync_each_batch=True)",
       saves="-", expected="costs the unsharded gradients of every unit that trains (accelerate: "
       "sync_each_batch=True saves them)", difficulty="low", overhead="less communication"),
    _t("wrap-layers", {"fsdp1_wrap": "layers"},
       "FSDP1 with the decoder layers as its only units (Lightning Fabric's FSDPStrategy(auto_wrap_policy={Block})): "
       "a peft model's adapters share their layer's flat parameter with the frozen weights, so the flat "
       "parameter and its gradient are whole layers, where peft's fsdp_auto_wrap_policy gives each adapter a unit",
       saves="-", expected="a LoRA run's gradients are whole layers' (frozen weights included)",
       difficulty="low", overhead="none"),
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
