"""Optimizers by name. AdamW and SGD take their multi-tensor (foreach) path in every mode,
as they do by default on CUDA, so cpu, sim and cuda account the same temporaries."""
from __future__ import annotations

import torch

LR = 1e-5


def _bnb(name):
    import bitsandbytes as bnb
    return getattr(bnb.optim, name)


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=LR, foreach=True),
    "adamw-fused": lambda ps: torch.optim.AdamW(ps, lr=LR, fused=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=LR, momentum=0.9, foreach=True),
    "adafactor": lambda ps: torch.optim.Adafactor(ps, lr=LR, foreach=True),
    "adamw8bit": lambda ps: _bnb("AdamW8bit")(ps, lr=LR),
    "paged-adamw8bit": lambda ps: _bnb("PagedAdamW8bit")(ps, lr=LR),
    "paged-adamw32bit": lambda ps: _bnb("PagedAdamW32bit")(ps, lr=LR),
    "lion8bit": lambda ps: _bnb("Lion8bit")(ps, lr=LR),
}


def make(name: str, model) -> torch.optim.Optimizer:
    return OPTIMIZERS[name]([p for p in model.parameters() if p.requires_grad])


def state_tensors(optimizer) -> list:
    """Every tensor the optimizer keeps between steps: its state, and master parameters that
    are not the model's own (DeepSpeed's fp32 partitions, for instance)."""
    inner = getattr(optimizer, "optimizer", optimizer)  # DeepSpeed wraps a torch optimizer
    out = [v for st in inner.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
    out += list(getattr(inner, "name2qmap", {}).values())  # bitsandbytes' 8-bit quantization maps
    for group in inner.param_groups:
        out.extend(group["params"])
    from bench.worker.dist import zero_buffers
    return out + zero_buffers(optimizer, "optimizer")


# bitsandbytes pages an optimizer state buffer (``get_state_buffer``) when the optimizer is paged
# and the parameter has at least this many elements; smaller ones are ordinary torch tensors
BNB_PAGED_MIN_NUMEL = 100_000


def paged_state_tensors(optimizer, paged: bool) -> list:
    """The state tensors a paged bitsandbytes optimizer keeps in CUDA unified memory on a GPU:
    ``bitsandbytes.functional.get_paged`` allocates them with cudaMallocManaged and wraps them
    as host tensors (``torch.frombuffer``), so torch's allocator never sees them (they are not
    in ``torch.cuda.memory_stats()``'s allocated or active bytes). Empty for other optimizers."""
    if not paged:
        return []
    inner = getattr(optimizer, "optimizer", optimizer)
    return [st[k] for p, st in inner.state.items() if p.numel() >= BNB_PAGED_MIN_NUMEL
            for k in ("state1", "state2") if isinstance(st.get(k), torch.Tensor)]

