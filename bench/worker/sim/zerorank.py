"""DeepSpeed ZeRO as one rank runs it, under fake tensors and torch's fake process group.

DeepSpeed's own engine and ZeRO optimizer run unchanged (``deepspeed.initialize``, its forward,
``engine.backward``, ``engine.step``): its flat partitions, gradient buckets, ZeRO-3's gathers,
prefetch and release are allocated as on a real rank and the tracker sees each of them. What a
fake rank has to add, each for a stated reason:

- A value read back to Python (``Tensor.item()``, ``bool(t)``: torch's ``aten._local_scalar_dense``)
  has no value under fake tensors. A tensor made from Python values reads them back; any other reads
  0: DeepSpeed's overflow and gradient-norm checks then find the step finite and unclipped, as a
  trained step is; clipping scales gradients in place, so its bytes are the same either way.
- ``get_lst_from_rank0``: ZeRO-3 checks that every rank recorded the same parameter order by
  broadcasting rank 0's list; every rank runs the same program, so that is the rank's own list,
  which the fake group (it moves no data) cannot return. Its tensors are still made and broadcast.
- DeepSpeed's debug map of parameter names (``deepspeed.utils.debug``, for its log lines only) holds
  a finalizer on each parameter; torch cannot swap a tensor that has one, and moving a fake
  parameter (the engine's ``module.to(device)``) swaps it. The engine records its modules' names
  only.
- The rank's environment (RANK, WORLD_SIZE, LOCAL_RANK, ...) as a launcher sets it for the rank, and
  DeepSpeed's process-wide state (its communication backend, its cached groups, and
  ``torch.nn.functional.linear``, which ZeRO-3 replaces with its memory-efficient linear "until
  manually reset") put back on exit: the next cell in this process starts as a fresh one would.

    with zerorank.installed(world_size, rank):   # inside onerank.fake_ranks(world_size, "cpu", rank)
        ...                                 # deepspeed.initialize(...) and the steps
"""
from __future__ import annotations

import contextlib
import os

import torch

RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _scalar(fake_mode, func, arg):
    """``aten._local_scalar_dense`` of a fake tensor: its value where the fake mode kept one (a tensor
    made from Python values), else 0 of its kind (module docstring)."""
    constant = getattr(arg, "constant", None)
    if constant is not None:
        return constant.item()
    return False if arg.dtype == torch.bool else 0.0 if arg.dtype.is_floating_point else 0


@contextlib.contextmanager
def installed(world_size: int, rank: int = 0):
    import deepspeed.comm.comm as ds_comm
    import deepspeed.runtime.engine as ds_engine
    import deepspeed.utils.debug as debug
    import deepspeed.runtime.zero.utils as zero_utils
    import deepspeed.utils.groups as groups
    from torch._subclasses import fake_impls

    saved_env = {k: os.environ.get(k) for k in RANK_ENV}
    linear = torch.nn.functional.linear
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
    saved_groups = {k: v for k, v in vars(groups).items() if k.startswith("_") and k.isupper()}
    saved_groups = {k: (dict(v) if isinstance(v, dict) else v) for k, v in saved_groups.items()}
    op = torch.ops.aten._local_scalar_dense.default
    table = fake_impls.op_implementations_dict
    saved_scalar = table.get(op)
    table[op] = _scalar
    own_list = zero_utils.get_lst_from_rank0

    def rank0_list(lst):
        own_list(lst)  # its tensors and broadcast, as on a real rank
        return list(lst)

    zero_utils.get_lst_from_rank0 = rank0_list
    own_names = ds_engine.debug_extract_module_and_param_names

    def module_names(model):
        debug.debug_clear_module_and_param_names()
        for name, module in model.named_modules():
            debug.module_names[module] = name

    ds_engine.debug_extract_module_and_param_names = module_names
    try:
        yield
    finally:
        zero_utils.get_lst_from_rank0 = own_list
        ds_engine.debug_extract_module_and_param_names = own_names
        debug.debug_clear_module_and_param_names()
        if saved_scalar is None:
            table.pop(op, None)
        else:
            table[op] = saved_scalar
        torch.nn.functional.linear = linear
        ds_comm.cdb = None
        vars(groups).update(saved_groups)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
