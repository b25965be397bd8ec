"""An attention mask under activation checkpointing: sim's CUDA attention
converts a boolean mask to a float bias that the memory-efficient kernel keeps for backward
(bench/worker/sim/cuda_kernels.py). Checkpointing drops a layer's saved tensors and recomputes
them in backward, so one layer's bias is alive at a time, as in a real run; it used to be pinned
on the graph node's metadata, out of checkpointing's reach, and every layer's stayed alive
(Mistral-7B at 16384 tokens: 33.59 GiB against 17.34 without its sliding window)."""
import gc
import json
import weakref

import pytest

import bitsandbytes  # noqa: F401  (their constants real, as a sim run imports them first)
import peft  # noqa: F401

torch = pytest.importorskip("torch")

from bench.cells import matrix  # noqa: E402
from bench.worker import train  # noqa: E402
from bench.worker.memtrack import MemTracker  # noqa: E402
from bench.worker.sim import cuda_kernels, measure  # noqa: E402

LAYERS, SEQ = 6, 256
BIAS = SEQ * SEQ * 4  # one fp32 L x L bias


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """A tiny Mistral with a sliding window shorter than the sequence, and the same without."""
    from tests.helpers import MATRIX_DIR, write_matrix
    folder = tmp_path_factory.mktemp("masks")
    models = folder / "models"
    models.mkdir()
    raw = json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text())
    # equal key/value and query heads: fp32 grouped-query attention without a mask is the math
    # kernel on a GPU (cuda_kernels.cuda_backend), which the CPU never runs, so the windowless
    # twin would differ from the real run for a reason that is not the window's
    raw = dict(raw, model_type="mistral", architectures=["MistralForCausalLM"], head_dim=32,
               vocab_size=512, num_hidden_layers=LAYERS, sliding_window=SEQ // 8,
               num_key_value_heads=raw["num_attention_heads"])
    (models / "tiny-mistral.json").write_text(json.dumps(raw))
    (models / "tiny-mistral-nosw.json").write_text(json.dumps(dict(raw, sliding_window=None)))
    study = {"mode": "cpu", "models": ["tiny-mistral", "tiny-mistral-nosw"], "gpus": ["cpu"],
             "techniques": ["lora", "lora+gc"], "batch_size": 1, "seq_len": SEQ}
    return matrix.load(write_matrix(folder, {"s": study}, models_dir=str(models)))


def _window_cost(cells, technique, run):
    """Per phase, what the sliding window adds over the same model without one."""
    sw, nosw = (run(cells[f"{m}__cpu__{technique}"])["phase_peak_bytes"] for m in ("tiny-mistral", "tiny-mistral-nosw"))
    return {p: sw[p] - nosw[p] for p in ("forward", "backward")}


def _sim(spec):
    return measure.simulate_step(spec, cuda_model=True)[0]


def _real(spec):
    return train.train(spec, "cpu", MemTracker())


@pytest.mark.slow
def test_a_sliding_window_under_gc_holds_one_layers_bias_as_a_real_run_does(cells):
    """The CPU kernel keeps the same float mask for backward as CUDA's memory-efficient one:
    under gc what the window adds, per phase, is the real run's to the byte (the boolean mask,
    and in backward the recomputed layer's bias), not a bias per layer."""
    sim, real = _window_cost(cells, "lora+gc", _sim), _window_cost(cells, "lora+gc", _real)
    assert sim == real
    assert sim["forward"] < BIAS and sim["backward"] < 3 * BIAS  # old code: a bias per layer


@pytest.mark.slow
def test_without_gc_every_layers_bias_is_held_as_in_a_real_run(cells):
    sim, real = _window_cost(cells, "lora", _sim), _window_cost(cells, "lora", _real)
    assert sim["forward"] >= LAYERS * BIAS and real["forward"] >= LAYERS * BIAS
    assert abs(sim["forward"] - real["forward"]) < BIAS


def _layers(n, checkpointed):
    """``n`` attention layers through sim's CUDA SDPA with a boolean mask (any source: a sliding
    window, padding, packed sequences, a local layer), under fake tensors; the weak references
    to each float bias the attention holds."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import checkpoint
    biases, hold = [], cuda_kernels.hold_for_backward

    def spy(bias, *inputs):
        biases.append(weakref.ref(bias))
        return hold(bias, *inputs)

    def layer(x, mask):
        return cuda_kernels.cuda_sdpa(x, x, x, attn_mask=mask).sum(dim=1, keepdim=True) + x

    cuda_kernels.hold_for_backward = spy
    try:
        with FakeTensorMode():
            x = torch.randn(1, 2, 64, 32, dtype=torch.bfloat16, requires_grad=True)
            mask = torch.ones(64, 64, dtype=torch.bool).tril()
            h = x
            for _ in range(n):
                h = checkpoint(layer, h, mask, use_reentrant=False) if checkpointed else layer(h, mask)
            gc.collect()
            alive = sum(r() is not None for r in biases)
            h.float().sum().backward()
            del h
            gc.collect()
            after = sum(r() is not None for r in biases)
    finally:
        cuda_kernels.hold_for_backward = hold
    return alive, after, len(biases)


def test_the_bias_is_a_saved_tensor_that_checkpointing_drops():
    alive, after, made = _layers(3, checkpointed=False)
    assert (alive, after, made) == (3, 0, 3)  # held until backward, each freed by it
    alive, after, made = _layers(3, checkpointed=True)
    assert (alive, after, made) == (0, 0, 6)  # dropped after each forward, recomputed in backward
