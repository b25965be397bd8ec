"""bench/worker/streams.py ``BackwardStreams``: on torch.cpu's streams (cpu runs and sim) an autograd
node's backward runs on the stream its forward made it on, as the CUDA engine runs it. Found on an
H200 (results/reference/cuda-h200-fsdp1): FSDP1's parameters are views of the gathered flat parameter
made on its unshard stream, and the cat of their gradients into the flat gradient ran there on the GPU
but on the default stream in sim, so sim's reserved for a full FSDP1 fine-tune was 3.9% under the H200's
where the allocator model replaying the GPU run's own trace was 1.7% under. The rule's mode is on only
inside a non-default cpu stream: on for a whole step, it broke torch.compile's tracing of the cpu
compile cells (tests/test_recipes_runs.py runs them)."""
import torch

from bench.worker.memtrack import MemTracker


def cat_streams(tracker: MemTracker) -> list[int]:
    ops = {i: str(name) for name, i in tracker.ops.items()}
    return [e[6] for e in tracker.events if e[0] == 1 and ops[e[5]] == "aten.cat.default"]


def run(side_stream: bool) -> MemTracker:
    flat = torch.zeros(1 << 16, requires_grad=True)
    side = torch.cpu.Stream()
    tracker = MemTracker()
    with tracker:
        with torch.cpu.stream(side) if side_stream else torch.cpu.stream(torch.cpu.current_stream()):
            a, b = flat.split([1 << 15, 1 << 15])   # views of the flat parameter, as FSDP1 makes them
        ((a * 2).sum() + (b * 3).sum()).backward()   # split's backward: the cat into flat's gradient
        assert torch.cpu.current_stream() is torch.cpu._default_cpu_stream
    assert torch.equal(flat.grad[: 1 << 15], torch.full((1 << 15,), 2.0))
    return tracker


def test_a_nodes_backward_runs_on_the_stream_its_forward_ran_on():
    assert [s > 0 for s in cat_streams(run(side_stream=True))] == [True]


def test_a_node_made_on_the_default_stream_stays_there():
    assert cat_streams(run(side_stream=False)) == [0]
