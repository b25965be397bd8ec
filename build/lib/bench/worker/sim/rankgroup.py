"""One rank's own program in sim: the sharded step run as rank 0 of N runs it, under fake
tensors and torch's fake process group, the way torch's own FSDP memory tools do
(``torch.distributed._tools.fsdp2_mem_tracker``; torchtitan's memory estimation).

    with rankgroup.ranks(spec) as mesh:   # rank 0 of spec["world_size"]; None: not traced per rank
        ...                               # fully_shard(..., mesh=mesh) runs its real code

The fake process group (``torch.testing._internal.distributed.fake_pg``) completes every
collective at once and writes nothing: FSDP2 allocates its all-gather outputs, its
reduce-scatter inputs and outputs, its unsharded gradients and its sharded state exactly as on
a real rank, and the tracker sees each of them. Rank 0 holds the largest shard (FSDP2 pads every
rank's shard to ``ceil(dim0 / N)`` rows), so its peak is the cell's per-GPU peak.

What the fake group leaves out, each named and tested (tests/test_sim_ranks.py):
- gloo's own copy of a reduce-scatter's input (a real CPU run under gloo holds one, NCCL does not);
- the device mesh's rank tensor (a few bytes, made before the tracker starts here);
- NCCL's device buffers, outside PyTorch's allocator: bench/estimate/nccl.py adds them to the need.

Which engines run per rank (bench/spec/techniques.py ``TRACED_PER_RANK``): FSDP2 (``fsdp``). FSDP2 with CPU offload and DeepSpeed
ZeRO are still partitioned by formula from the single-process step (bench/worker/sim/sharding.py):
offload needs host and device apart on one fake device, and DeepSpeed does not run under fake
tensors.
"""
from __future__ import annotations

import contextlib

from bench.spec import techniques

HOW = ("rank 0's own program: the step run under fake tensors with FSDP2 (fully_shard) over torch's fake "
       "process group of the cell's world size; its allocation trace is the rank's, replayed as the rank's")
LOAD_OP = "(the rank's shards, placed at load)"


def traced(spec: dict) -> bool:
    """Whether sim runs this cell's step as one rank runs it (else: one process, partitioned)."""
    return techniques.traced_per_rank(spec)


@contextlib.contextmanager
def ranks(spec: dict):
    """Rank 0 of the cell's world size under the fake process group, and its device mesh (made
    here, outside the fake tensor mode: a mesh's rank tensor must hold values)."""
    if not traced(spec):
        yield None
        return
    import torch.distributed as tdist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if tdist.is_initialized():
        raise RuntimeError("a process group is already initialized in this process: sim runs one rank per process")
    n = spec["world_size"]
    tdist.init_process_group("fake", store=FakeStore(), rank=0, world_size=n)
    try:
        yield init_device_mesh("cpu", (n,))
    finally:
        tdist.destroy_process_group()


def start_from_shards(tracker) -> int:
    """The trace from here on starts from what is live now (the rank's shards, the optimizer's
    empty state), each storage placed once in the order it was made: a rank that loads only its
    shards (FSDP's meta-device, CPU-RAM-efficient loading) starts its step so. The build before it
    (the whole model, then sharded) is not what a launched rank holds; how the load itself goes
    is bench/estimate/loadplan.py's. Returns the build's peak (as ``reset_peak`` does)."""
    op = tracker.ops.setdefault(LOAD_OP, len(tracker.ops))
    tracker.events = [(1, serial, nbytes, -1, 0, op) for serial, nbytes, *_ in sorted(tracker.live.values())
                      if nbytes > 0]
    tracker.dropped_events = 0
    return tracker.reset_peak()
