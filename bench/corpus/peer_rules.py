"""Published rules of thumb as peers on a corpus row: LLaMA-Factory's hardware table and Unsloth's
requirements table, looked up as published. Torch-free.

    n = count_params(config)                       # from config.json's dimensions, no torch
    answer = estimate(TOOL, row)                   # {"bytes", "what"}; Unanswerable where the table has none

Both tables give one figure per fine-tuning method and model size; they read nothing else (batch,
sequence, optimizer, checkpointing, GPU). The row's model size is the parameter count of its model
config (``matrix/models/<name>.json``, counted here from the config's dimensions); its method and bits
come from the row's techniques (``bench.cells.techniques.knobs``). A row the table cannot answer (a method
or size it has no entry for, several GPUs, not a training run) raises ``Unanswerable`` with the reason:
the scoreboard shows it as "not covered", never as zero. GB in both tables is 10^9 bytes.

LLaMA-Factory, README.md "Hardware Requirement" at ff6d4d12 (marked "* estimated"):

    | Method                              | Bits |   7B  |  14B  |  30B  |   70B  |   `x`B  |
    | Full (`bf16` or `fp16`)             |  32  | 120GB | 240GB | 600GB | 1200GB | `18x`GB |
    | Full (`pure_bf16`)                  |  16  |  60GB | 120GB | 300GB |  600GB |  `8x`GB |
    | Freeze/LoRA/GaLore/APOLLO/BAdam/OFT |  16  |  16GB |  32GB |  64GB |  160GB |  `2x`GB |
    | QLoRA / QOFT                        |   8  |  10GB |  20GB |  40GB |   80GB |   `x`GB |
    | QLoRA / QOFT                        |   4  |   6GB |  12GB |  24GB |   48GB | `x/2`GB |
    | QLoRA / QOFT                        |   2  |   4GB |   8GB |  16GB |   24GB | `x/4`GB |

A model within 10% of a named column (7B, 14B, 30B, 70B) takes that column's figure; any other size
takes the `x`B formula with x = its parameters in billions. Our methods: autocast (amp-bf16, amp-fp16)
over fp32 master weights = Full (bf16 or fp16), 32 bits; pure bf16 = Full (pure_bf16); LoRA (DoRA
included) in bf16 or under autocast = the 16-bit LoRA row; QLoRA (NF4) = QLoRA 4 bits. Full or LoRA
in fp32 has no row; 8-bit and 2-bit QLoRA are not techniques we run.

Unsloth, "Unsloth Requirements" (unsloth.ai/docs/get-started/fine-tuning-for-beginners/unsloth-requirements,
"Fine-tuning VRAM requirements", "these numbers are the absolute minimum"; not in unslothai/unsloth's
README at 0acd1c7e): QLoRA (4-bit) and LoRA (16-bit) per model size, 3B to 90B (``UNSLOTH`` below).
A model within 10% of a listed size takes the nearest one; any other size, full fine-tuning and fp32
LoRA are not covered. The figures are for Unsloth's own kernels, and are compared as they are.
"""
from __future__ import annotations

import json

from bench.corpus import published
from bench.cells import techniques as tech
from bench.corpus.row import Row

LLAMA_FACTORY = "LLaMA-Factory hardware table"
UNSLOTH = "Unsloth requirements table"
TOOLS = (LLAMA_FACTORY, UNSLOTH)
SOURCES = {
    LLAMA_FACTORY: "https://github.com/hiyouga/LLaMA-Factory/blob/ff6d4d12eeb035d6ce06805a5733dd7b29f2ac30/README.md#hardware-requirement",
    UNSLOTH: "https://unsloth.ai/docs/get-started/fine-tuning-for-beginners/unsloth-requirements",
}
GB = 10**9
NEAR = 0.10   # a model within 10% of a table's named size takes that size's figure

# LLaMA-Factory: (method, bits) -> ({column size in B: GB}, GB per billion parameters for the `x`B column)
LF_TABLE = {
    ("Full (bf16 or fp16)", 32): ({7: 120, 14: 240, 30: 600, 70: 1200}, 18),
    ("Full (pure_bf16)", 16): ({7: 60, 14: 120, 30: 300, 70: 600}, 8),
    ("Freeze/LoRA/GaLore/APOLLO/BAdam/OFT", 16): ({7: 16, 14: 32, 30: 64, 70: 160}, 2),
    ("QLoRA / QOFT", 8): ({7: 10, 14: 20, 30: 40, 70: 80}, 1),
    ("QLoRA / QOFT", 4): ({7: 6, 14: 12, 30: 24, 70: 48}, 0.5),
    ("QLoRA / QOFT", 2): ({7: 4, 14: 8, 30: 16, 70: 24}, 0.25),
}
# Unsloth: model size in B -> (QLoRA 4-bit GB, LoRA 16-bit GB)
UNSLOTH_TABLE = {3: (3.5, 8), 7: (5, 19), 8: (6, 22), 9: (6.5, 24), 11: (7.5, 29), 14: (8.5, 33), 27: (22, 64),
                 32: (26, 76), 40: (30, 96), 70: (41, 164), 81: (48, 192), 90: (53, 212)}


class Unanswerable(ValueError):
    """The table has no figure for this row (the message says why)."""


def count_params(cfg: dict) -> int:
    """Parameters of a decoder-only transformer from its config.json (llama, qwen2, qwen3, mixtral,
    qwen3_moe; phi, gpt_neox and falcon with their two-matrix MLPs, biases and LayerNorms): embeddings,
    attention (with q/k/v biases for qwen2, q/k norms for qwen3), dense or expert MLPs with their
    router, the norms, and the LM head unless tied."""
    h, layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    mtype = cfg.get("model_type", "")
    if mtype in TWO_MATRIX_MLP:
        return _count_two_matrix(cfg, h, layers, vocab, heads, mtype)
    kv = cfg.get("num_key_value_heads") or heads
    hd = cfg.get("head_dim") or h // heads
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    if mtype == "qwen2" or cfg.get("attention_bias"):
        attn += heads * hd + 2 * kv * hd + (h if cfg.get("attention_bias") else 0)
    if mtype.startswith("qwen3"):
        attn += 2 * hd   # q_norm, k_norm
    dense = 3 * h * cfg["intermediate_size"]
    experts = cfg.get("num_local_experts") or cfg.get("num_experts")
    total = 0
    for i in range(layers):
        if experts and i not in (cfg.get("mlp_only_layers") or []) and (i + 1) % (cfg.get("decoder_sparse_step") or 1) == 0:
            mlp = experts * 3 * h * (cfg.get("moe_intermediate_size") or cfg["intermediate_size"]) + h * experts
        else:
            mlp = dense
        total += attn + mlp + NORMS_PER_LAYER.get(mtype, 2) * h
    tied = cfg.get("tie_word_embeddings", mtype in TIED_BY_DEFAULT)
    total += vocab * h + h + (0 if tied else vocab * h)
    return total


# transformers' config defaults where a config.json leaves them out: Gemma's embeddings are tied, and
# Gemma 2/3 norm before and after both attention and MLP
TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3_text", "falcon")
NORMS_PER_LAYER = {"gemma2": 4, "gemma3_text": 4}

# architectures whose MLP is up and down projections (no gate), with LayerNorms (weight and bias)
TWO_MATRIX_MLP = ("phi", "gpt_neox", "falcon")


def _count_two_matrix(cfg: dict, h: int, layers: int, vocab: int, heads: int, mtype: str) -> int:
    """phi (biased q/k/v/dense and fc1/fc2, one LayerNorm per layer, a biased LM head), gpt_neox
    (biased fused QKV, dense and MLP, two LayerNorms) and falcon (unbiased unless ``bias``; the new
    decoder architecture's two LayerNorms and grouped KV heads, else one LayerNorm and multi-query)."""
    hd = h // heads
    if mtype == "falcon":
        bias = bool(cfg.get("bias"))
        new = cfg.get("new_decoder_architecture")
        kv = (cfg.get("num_kv_heads") or heads) if new else (heads if not cfg.get("multi_query", True) else 1)
        inter = cfg.get("ffn_hidden_size") or 4 * h
        norms = 2 if new else 1
        tied = cfg.get("tie_word_embeddings", True)
    else:
        bias = True
        kv = cfg.get("num_key_value_heads") or heads
        inter = cfg["intermediate_size"]
        norms = 1 if mtype == "phi" else 2
        tied = cfg.get("tie_word_embeddings", False)
    qkv = h * (heads + 2 * kv) * hd + (heads + 2 * kv) * hd * bias
    attn = qkv + h * h + h * bias
    mlp = 2 * h * inter + (inter + h) * bias
    total = layers * (attn + mlp + norms * 2 * h)
    head = 0 if tied else vocab * h + (vocab if mtype == "phi" else 0)
    return total + vocab * h + 2 * h + head


def model_params(name: str) -> int:
    raw = json.loads((published.MODELS_DIR / f"{name}.json").read_text())
    return count_params(raw)


def _near(billions: float, sizes) -> int | None:
    best = min(sizes, key=lambda s: abs(billions - s) / s)
    return best if abs(billions - best) / best <= NEAR else None


def _knobs(row: Row) -> dict:
    if not row.model_config_name:
        raise Unanswerable("the row names no model config: no parameter count to look up")
    if not row.techniques:
        raise Unanswerable("the row's recipe is not matched to our techniques: no method to look up")
    k = tech.knobs(row.techniques.split("+"))
    if k["workload"] != "train":
        raise Unanswerable("the table is for fine-tuning")
    if k["dist"] or k["world_size"] != 1 or (row.n_gpus or 1) != 1:
        raise Unanswerable("the table gives one figure per job, not how it splits across several GPUs")
    return k


def llama_factory(row: Row) -> dict:
    k = _knobs(row)
    if k["adapter"] == "qlora":
        method = ("QLoRA / QOFT", 4)
    elif k["adapter"] == "lora":
        if k["precision"] == "fp32":
            raise Unanswerable("the table has no fp32 LoRA row (its LoRA row is 16 bits)")
        method = ("Freeze/LoRA/GaLore/APOLLO/BAdam/OFT", 16)
    elif k["precision"] in ("amp-bf16", "amp-fp16"):
        method = ("Full (bf16 or fp16)", 32)
    elif k["precision"] == "bf16":
        method = ("Full (pure_bf16)", 16)
    else:
        raise Unanswerable(f"the table has no full fine-tuning row in {k['precision']}")
    params = model_params(row.model_config_name)
    b = params / 1e9
    columns, per_b = LF_TABLE[method]
    col = _near(b, columns)
    if col is not None:
        gb, where = columns[col], f"{col}B column"
    else:
        gb, where = per_b * b, f"`x`B column, {per_b:g}x GB at x = {b:.2f}"
    return {"bytes": int(round(gb * GB)), "what": f"{method[0]}, {method[1]} bits, {where}: {gb:.4g} GB"}


def unsloth(row: Row) -> dict:
    k = _knobs(row)
    if k["adapter"] == "qlora":
        col, label = 0, "QLoRA (4-bit)"
    elif k["adapter"] == "lora":
        if k["precision"] == "fp32":
            raise Unanswerable("the table has no fp32 LoRA column (its LoRA is 16-bit)")
        col, label = 1, "LoRA (16-bit)"
    else:
        raise Unanswerable("the table has no full fine-tuning column (QLoRA and LoRA only)")
    b = model_params(row.model_config_name) / 1e9
    size = _near(b, UNSLOTH_TABLE)
    if size is None:
        raise Unanswerable(f"the table has no model size near {b:.2f}B (it lists {', '.join(f'{s}B' for s in UNSLOTH_TABLE)})")
    gb = UNSLOTH_TABLE[size][col]
    return {"bytes": int(round(gb * GB)), "what": f"{label}, {size}B row: {gb:g} GB (the table's absolute minimum)"}


ESTIMATORS = {LLAMA_FACTORY: llama_factory, UNSLOTH: unsloth}


def estimate(tool: str, row: Row) -> dict:
    """The rule's figure for the row: {"bytes", "what"}; Unanswerable where the table has none."""
    return ESTIMATORS[tool](row)
