"""Sim's model of inductor's fusion (bench/worker/sim/fusion.py), checked on its rule and against
real inductor on cpu; and torchtune's activation-offloading stashes (bench/worker/placement.py).

    python -m pytest tests/test_sim_fusion.py
"""
import contextlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from bench.worker import losses, placement
from bench.worker.memtrack import MemTracker
from bench.worker.sim import fusion

ROWS, VOCAB = 256, 8192  # one loss chunk: 256 tokens x an 8k vocabulary (fp32: 8 MiB)


def _graph(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(fn)(*args).graph


def _names(nodes):
    return {str(n.target.overloadpacket).split(".")[-1] for n in nodes}


def test_a_pointwise_chain_stays_in_registers_until_a_matmul_or_an_output_reads_it():
    def f(x, w):
        y = (x * 2).exp()        # read only by the matmul: stored
        z = (y + 1).sigmoid()    # a chain whose only reader is a reduction: in registers
        return y @ w, z.sum(-1)
    g = _graph(f, torch.randn(4, 8), torch.randn(8, 3))
    inside = fusion.in_registers(g)
    assert _names(inside) == {"mul", "add", "sigmoid"}
    stored = {n for n in g.nodes if n.op == "call_function"} - inside
    assert _names(stored) == {"exp", "mm", "sum"}


def test_a_value_read_by_many_is_stored_as_inductor_realizes_it():
    from torch._inductor import config

    def f(x):
        y = x.exp()
        return sum((y * i).sum() for i in range(config.realize_reads_threshold + 1))
    g = _graph(f, torch.randn(4, 8))
    assert "exp" not in _names(fusion.in_registers(g))


def _ce_backward_peak(backend, fake: bool) -> tuple[int, int]:
    """(bytes live after forward, peak bytes over backward), above what the inputs hold, of
    torchtune's compute_cross_entropy compiled with ``backend`` on one bf16 chunk."""
    tracker = MemTracker()
    torch._dynamo.reset()
    with (FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()), tracker:
        x = torch.randn(ROWS, VOCAB, dtype=torch.bfloat16, requires_grad=True)
        y = torch.randint(0, VOCAB, (ROWS,))
        ce = torch.compile(losses.compute_cross_entropy, backend=backend(tracker) if callable(backend) else backend)
        base = tracker.total
        loss = ce(x, y)
        after_forward = tracker.total - base
        tracker.reset_peak()
        loss.backward()
        return after_forward, tracker.peak - base


@pytest.mark.slow
def test_the_compiled_chunk_loss_matches_real_inductor_on_cpu():
    """Real inductor (its C++ kernels, buffers routed through the tracker) against sim's rule:
    neither stores the chunk's fp32 softmax; op by op it would be counted (the rule matters)."""
    placement.route_inductor_allocations()
    real_fwd, real_bwd = _ce_backward_peak("inductor", fake=False)
    sim_fwd, sim_bwd = _ce_backward_peak(fusion.backend, fake=True)
    op_by_op_fwd, op_by_op_bwd = _ce_backward_peak("aot_eager_decomp_partition", fake=True)
    grad = ROWS * VOCAB * 2  # the bf16 gradient of the logits, the only vocab-sized value written
    assert real_bwd < 1.1 * grad and sim_bwd < 1.1 * grad, (real_bwd, sim_bwd)
    assert abs(sim_bwd - real_bwd) <= 0.02 * grad, (sim_bwd, real_bwd)
    assert abs(sim_fwd - real_fwd) <= 64 * 1024, (sim_fwd, real_fwd)  # a logsumexp per row, no logits
    assert op_by_op_bwd > 2.5 * grad  # fp32 values inductor fuses, counted when run op by op


def test_offloading_keeps_torchtunes_forward_stash_on_the_device(monkeypatch):
    """After forward the last offloaded tensors' device copies are still alive (torchtune's
    forward stash, 5 ids deep); with a stash of 1 fewer are."""
    from transformers import LlamaConfig, LlamaForCausalLM

    def after_forward(depth):
        monkeypatch.setattr(placement.offload_saved, "FWD_STASH", depth)
        torch.manual_seed(0)
        cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                          num_key_value_heads=4, vocab_size=256)
        model = LlamaForCausalLM(cfg)
        tracker = MemTracker()
        with tracker:
            hooks = placement.offload_saved(model, tracker, "cpu")
            ids = torch.randint(0, 256, (2, 64))
            with hooks:
                out = model(input_ids=ids, labels=ids)
            live = tracker.total
            out.loss.backward()
        return live, hooks.offloaded, tracker.total
    deep, moved, _ = after_forward(5)
    shallow, moved_too, _ = after_forward(1)
    assert moved == moved_too > 0
    assert deep > shallow


COMPILED = ["compile", "compile+bf16", "compile+chunked-ce+bf16", "gc+compile+bf16"]


@pytest.fixture(scope="module")
def compiled_cells(tmp_path_factory):
    from bench.cells import matrix
    from tests.helpers import write_matrix
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": COMPILED,
             "batch_size": 2, "seq_len": 32}
    return matrix.load(write_matrix(tmp_path_factory.mktemp("compiled"), {"s": study}))


def _phases(spec, sim: bool) -> dict:
    from bench.worker import train
    from bench.worker.sim import measure
    torch._dynamo.reset()
    out = measure.simulate_step(spec, cuda_model=False)[0] if sim else train.train(spec, "cpu", MemTracker())
    return {k: v for k, v in out["phase_peak_bytes"].items() if k in ("forward", "backward")}


@pytest.mark.slow
@pytest.mark.parametrize("technique", COMPILED)
def test_compiled_cells_count_what_real_inductor_allocates_on_cpu(compiled_cells, technique):
    """Real inductor on cpu against sim (CUDA modelling off), tiny-llama at 2 x 32 tokens: forward
    and backward peaks within 0.01% (inductor reuses a dead buffer here and there: a few KiB).
    At this size the layers' transients are too small to move a phase peak, so the rule itself
    is held by the loss-chunk test above, where counting every value misses sixfold."""
    import bitsandbytes  # noqa: F401
    import peft  # noqa: F401
    spec = compiled_cells[f"tiny-llama__cpu__{technique}"]
    real, sim = _phases(spec, sim=False), _phases(spec, sim=True)
    for phase in real:
        assert abs(sim[phase] / real[phase] - 1) < 1e-4, (phase, sim, real)
