"""One rank's own program in this one process: rank 0 of the cell's world size over torch's fake
process group (``torch.testing._internal.distributed.fake_pg``), as torch's FSDP memory tools and
torchtitan's memory estimation run it.

Sim runs it under fake tensors (bench/worker/sim/rankgroup.py). A cpu or cuda cell asks for it with
its study's ``ranks: rank0`` (bench/cells/matrix.py): the rank's real program on this machine's one
device, its real allocator, kernels and (on a GPU) FSDP's own streams, every collective completed at
once, moving no other rank's data. What such a run does not hold, and its record says so
(``details.rank_program``): NCCL's device buffers (bench/estimate/nccl.py models them), and the
time the collectives would take.

    with onerank.fake_ranks(4, "cuda") as mesh:   # FSDP2's fully_shard(..., mesh=mesh)
        ...                                          # FSDP1 shards over the default (fake) group
"""
from __future__ import annotations

import contextlib

LOAD_OP = "(the rank's shards, placed at load)"
LOSS = ("not the model's: the gathered weights hold no other rank's shards (the fake group moves no data), so the "
        "loss may be anything, not finite included; the bytes do not depend on it")
MEASURED_HOW = ("rank 0's own program on this device: FSDP (FSDP2's fully_shard, or FSDP1's FullyShardedDataParallel "
                "for fsdp1) over torch's fake process group of the "
                "cell's world size; its allocator, kernels and streams are real, its collectives complete at once "
                "and move no other rank's data, NCCL's buffers are not allocated; the whole model's build is released before "
                "the steps (a rank that loads only its shards holds none of it)")


@contextlib.contextmanager
def fake_ranks(world_size: int, device_type: str, rank: int = 0):
    """Rank ``rank`` (0 unless named) of ``world_size`` under the fake process group, and its device
    mesh (made outside any fake tensor mode: a mesh's rank tensor must hold values)."""
    import torch.distributed as tdist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if tdist.is_initialized():
        raise RuntimeError("a process group is already initialized in this process: one rank per process")
    tdist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield init_device_mesh(device_type, (world_size,))
    finally:
        tdist.destroy_process_group()


def start_from_shards(tracker) -> int:
    """The trace from here on starts from what is live now (the rank's shards, the optimizer's
    empty state), each storage placed once in the order it was made: a rank that loads only its
    shards (FSDP's meta-device, CPU-RAM-efficient loading) starts its step so, their serials
    dense (``MemTracker.renumber_live``). The build before it
    (the whole model, then sharded) is not what a launched rank holds; how the load itself goes
    is bench/estimate/loadplan.py's. Returns the build's peak (as ``reset_peak`` does)."""
    op = tracker.ops.setdefault(LOAD_OP, len(tracker.ops))
    tracker.renumber_live()
    tracker.events = [(1, serial, nbytes, -1, 0, op, 0) for serial, nbytes, *_ in sorted(tracker.live.values())
                      if nbytes > 0]  # the shards, on the default stream
    tracker.dropped_events = 0
    return tracker.reset_peak()
