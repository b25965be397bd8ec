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

Which engines run per rank (bench/cells/techniques.py ``TRACED_PER_RANK``): FSDP2, with and without
CPU offload (``fsdp``, ``fsdp-offload``: the rank's host and device kept apart as a GPU keeps them,
bench/worker/fsdpoffload.py), FSDP1, and DeepSpeed ZeRO-1/2/3 with and without offload (DeepSpeed's
own engine; what a fake rank adds to it: bench/worker/sim/zerorank.py). At world size 1 a ZeRO cell
is the single process's step with the formula over it (bench/worker/sim/sharding.py).
"""
from __future__ import annotations

import contextlib

from bench.cells import techniques
from bench.worker import onerank
from bench.worker.sim import dtensor_flag, fake_pointers, zerorank
from bench.worker.onerank import LOAD_OP, start_from_shards  # noqa: F401  (sim's names for them)

HOW = ("one rank's own program (details.rank_program.rank: rank 0, or the rank that peaks, "
       "bench/worker/sim/rankrun.py): the step run under fake tensors with FSDP2 (fully_shard; CPUOffloadPolicy for "
       "fsdp-offload), FSDP1 (FullyShardedDataParallel as accelerate wraps it) or DeepSpeed's ZeRO engine "
       "(deepspeed.initialize) over torch's fake process group of the cell's world size; its allocation trace is "
       "the rank's, replayed as the rank's")

def traced(spec: dict) -> bool:
    """Whether sim runs this cell's step as one rank runs it (else: one process, partitioned)."""
    return techniques.traced_per_rank(spec)


@contextlib.contextmanager
def ranks(spec: dict):
    """Rank ``spec["sim_rank"]`` (0 unless named: the rank that peaks, bench/worker/sim/rankrun.py) of
    the cell's world size under the fake process group, and its device mesh (bench/worker/onerank.py)."""
    if not traced(spec):
        yield None
        return
    engine = spec["knobs"]["dist"]
    zero = engine.startswith("zero")
    pointers = fake_pointers.distinct() if engine == "fsdp1" or zero else contextlib.nullcontext()
    rank = spec.get("sim_rank", 0)
    deepspeed = zerorank.installed(spec["world_size"], rank) if zero else contextlib.nullcontext()
    with onerank.fake_ranks(spec["world_size"], "cpu", rank) as mesh, dtensor_flag.installed(), pointers, deepspeed:
        yield mesh
