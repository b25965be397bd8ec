"""Where a causal LM keeps its decoder layers, for every reader that walks them (the gather units of
ZeRO and FSDP, FSDP2's wrapping, torch.compile per layer): transformers names the stack per
architecture.

    decoder_layers(model)   # the ModuleList of decoder layers (a peft model: its base model's)
"""
from __future__ import annotations

# transformers' attribute paths, from the model class down: Llama, Qwen, Mistral, Gemma, Phi and
# most decoders (model.layers); GPT-NeoX and StableLM-Alpha (gpt_neox.layers); Falcon, GPT-2,
# BLOOM (transformer.h); OPT (model.decoder.layers)
LAYER_PATHS = ("model.layers", "gpt_neox.layers", "transformer.h", "model.decoder.layers")


def decoder_layers(model):
    """The decoder layers of ``model`` (a peft model's base model's), in forward order."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    for path in LAYER_PATHS:
        node = base
        for name in path.split("."):
            node = getattr(node, name, None)
            if node is None:
                break
        if node is not None:
            return node
    raise ValueError(f"{type(base).__name__}: no decoder layers at any of {', '.join(LAYER_PATHS)}")
