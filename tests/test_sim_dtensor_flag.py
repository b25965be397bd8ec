"""DTensor's strided-shard flag pass asked once per op (bench/worker/sim/dtensor_flag.py): the
same specs come out as from torch's own pass, with and without a strided shard among the inputs.
(The whole per-rank step with it installed is held against a real rank run alone, event for event,
in tests/test_one_rank.py.)"""
import copy

import pytest
import torch
from torch.distributed.tensor import Shard
from torch.distributed.tensor import _sharding_prop as sp
from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._op_schema import OpSchema, OpSpec, OpStrategy, RuntimeSchemaInfo
from torch.distributed.tensor.placement_types import _StridedShard

from bench.worker import onerank
from bench.worker.sim import dtensor_flag


def _case(mesh, strided: bool, flag):
    inputs = [DTensorSpec(mesh, (_StridedShard(0, split_factor=2) if strided and i == 1 else Shard(0),),
                          use_strided_shard_as_shard_order=flag if strided and i == 1 else None) for i in range(3)]
    outs = [DTensorSpec(mesh, (_StridedShard(0, split_factor=2),)), DTensorSpec(mesh, (Shard(0),))]
    strategy = OpStrategy([OpSpec(output_specs=tuple(outs), input_specs=inputs)])
    schema = OpSchema(torch.ops.aten._foreach_add.List, (inputs, inputs), {}, RuntimeSchemaInfo(needs_pytree=True))
    return strategy, schema


def _flags(strategy):
    spec = strategy.strategies[0]
    return [(s.use_strided_shard_as_shard_order, s.shard_order) for s in (*spec.output_specs, *spec.input_specs)]


@pytest.mark.parametrize("strided, flag", [(False, None), (True, True), (True, False)])
def test_the_pass_gives_torchs_specs(strided, flag):
    with onerank.fake_ranks(2, "cpu") as mesh:
        strategy, schema = _case(mesh, strided, flag)
        before, theirs = _flags(strategy), copy.deepcopy(strategy)
        sp._propagate_use_strided_shard_flag(theirs, schema)
        with dtensor_flag.installed():
            for _ in range(3):  # once per child of a foreach op: the answer asked once, reused
                sp._propagate_use_strided_shard_flag(strategy, schema)
        assert _flags(strategy) == _flags(theirs)
        assert len(schema.args_spec) == 6 and (_flags(theirs) != before) is (flag is False)  # torch's pass acted
        assert schema.__dict__[dtensor_flag._KEY] is strided
    assert sp._propagate_use_strided_shard_flag.__name__ == "_propagate_use_strided_shard_flag"  # restored
