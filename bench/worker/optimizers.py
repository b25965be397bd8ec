"""Optimizers by name. AdamW and SGD take their multi-tensor (foreach) path in every mode,
as they do by default on CUDA, so cpu, sim and cuda account the same temporaries."""
from __future__ import annotations

import functools
import inspect

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


@functools.lru_cache(maxsize=None)
def bnb_pages(numel: int) -> bool:
    """Whether a paged bitsandbytes optimizer keeps a state buffer of ``numel`` elements in CUDA
    unified memory on a GPU. bitsandbytes' own ``Optimizer8bit.get_state_buffer`` decides: its
    GPU branch, run on a fake CUDA parameter with ``get_paged`` swapped for a marker (on a CPU it
    never pages, so the GPU's answer is asked for directly). The one copy of the rule is the
    library's; the worker, sim's trace labels and the tests read it here."""
    import bitsandbytes.functional as bnbf
    from bitsandbytes.optim.optimizer import Optimizer8bit
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
    from torch.utils._python_dispatch import _disable_current_modes

    paged = object()

    class _Asking:  # what get_state_buffer reads of the optimizer on its GPU branch
        is_paged = True
        page_mng = type("PageManager", (), {"paged_tensors": []})()

    real = bnbf.get_paged, bnbf.fill
    bnbf.get_paged, bnbf.fill = (lambda *shape, dtype=None, device=None: paged), (lambda *a, **k: None)
    try:
        with _disable_current_modes(), unset_fake_temporarily(), FakeTensorMode(allow_non_fake_inputs=True):
            library = inspect.unwrap(Optimizer8bit.get_state_buffer)  # sim's label wrapper calls this
            return library(_Asking(), torch.empty(numel, device="cuda")) is paged
    finally:
        bnbf.get_paged, bnbf.fill = real


def paged_state_tensors(optimizer, paged: bool) -> list:
    """The state tensors a paged bitsandbytes optimizer keeps in CUDA unified memory on a GPU:
    ``bitsandbytes.functional.get_paged`` allocates them with cudaMallocManaged and wraps them
    as host tensors (``torch.frombuffer``), so torch's allocator never sees them (they are not
    in ``torch.cuda.memory_stats()``'s allocated or active bytes). Empty for other optimizers."""
    if not paged:
        return []
    inner = getattr(optimizer, "optimizer", optimizer)
    return [st[k] for p, st in inner.state.items() if bnb_pages(p.numel())
            for k in ("state1", "state2") if isinstance(st.get(k), torch.Tensor)]

