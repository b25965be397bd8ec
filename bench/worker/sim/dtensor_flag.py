"""DTensor's strided-shard flag pass, asked once per op instead of once per tensor of a foreach op.

Under fake tensors DTensor propagates every op's sharding without its cache (fake mode counts as
tracing: ``torch.distributed.tensor._sharding_prop._are_we_tracing``). For a foreach op over N
sharded tensors (the optimizer's step over FSDP2's DTensor parameters) it calls
``_propagate_use_strided_shard_flag(child, op_schema)`` for each of the N children, and each call
scans all of the op's argument specs (``op_schema.args_spec``, rebuilt on every read) for a
``_StridedShard`` placement: N x (k N) work. On a 70B QLoRA rank's step that scan was about a third
of the step's CPU time.

The pass does nothing unless some argument spec holds a ``_StridedShard`` (its ``_use_strided``
stays None and it returns). ``installed()`` answers that question once per ``op_schema`` and
calls torch's own pass, unchanged, only when the answer is yes. FSDP2 shards with ``Shard(0)``,
so on sim's steps the pass returns at once, as it did. tests/test_sim_dtensor_flag.py holds the
result equal on schemas with and without a strided shard.
"""
from __future__ import annotations

import contextlib

_KEY = "_ftmb_has_strided_shard"


def _has_strided(op_schema) -> bool:
    from torch.distributed.tensor.placement_types import _StridedShard
    seen = op_schema.__dict__.get(_KEY)
    if seen is None:
        seen = any(isinstance(p, _StridedShard) for spec in op_schema.args_spec for p in spec.placements)
        op_schema.__dict__[_KEY] = seen
    return seen


@contextlib.contextmanager
def installed():
    """torch's strided-shard flag pass, asked once per op schema, for the duration (sim's rank runs)."""
    from torch.distributed.tensor import _sharding_prop as sp
    original = sp._propagate_use_strided_shard_flag

    def once(op_strategy, op_schema) -> None:
        if _has_strided(op_schema):
            original(op_strategy, op_schema)

    sp._propagate_use_strided_shard_flag = once
    try:
        yield
    finally:
        sp._propagate_use_strided_shard_flag = original
