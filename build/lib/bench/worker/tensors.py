"""The tensors in an op's arguments or outputs, in ``tree_flatten``'s order: what the memory
tracker and the step cost counter walk after every op."""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten

NO_TENSORS = (bool, int, float, str, torch.device, torch.dtype, torch.layout, torch.memory_format)


def tensors_in(tree, out: list | None = None) -> list:
    """The tensors of ``tree`` in ``tree_flatten``'s order (depth first, dict values in insertion
    order), walking plain tuples, lists and dicts here and anything else through pytree: the
    same list, without pytree's per-node overhead on every op (sim runs ~10^5 ops a step)."""
    if out is None:
        out = []
    kind = type(tree)
    if kind is tuple or kind is list:
        for x in tree:
            if isinstance(x, torch.Tensor):
                out.append(x)
            elif x is not None and not isinstance(x, NO_TENSORS):
                tensors_in(x, out)
    elif kind is dict:
        tensors_in(list(tree.values()), out)
    elif isinstance(tree, torch.Tensor):
        out.append(tree)
    elif tree is not None and not isinstance(tree, NO_TENSORS):
        out.extend(t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))
    return out
