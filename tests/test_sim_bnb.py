"""bitsandbytes in sim mode holds exactly the bytes real bitsandbytes holds: the NF4 stand-in
(bench.worker.sim.fakestep.qlora_base) against a real 4-bit load (bench.worker.models.load_qlora_base) of the same
tiny model, and 8-bit optimizer state after a fake step against a real CPU step."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

import bitsandbytes as bnb  # noqa: F401 - imported before any fake mode (its constants stay real)
from bench.worker import dist, models, optimizers
from bench.worker.sim import fakestep
from bench.cells import matrix

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["qlora", "qlora+nf4-no-dq"])
def spec(tmp_path_factory, request):
    from tests.helpers import write_matrix
    study = {"mode": "cpu", "models": ["tiny-qwen2"], "gpus": ["cpu"], "techniques": [request.param]}
    return matrix.load(write_matrix(tmp_path_factory.mktemp("bnb"), {"s": study}))[f"tiny-qwen2__cpu__{request.param}"]


def storages(model) -> list:
    """(bytes, dtype, shape) of every storage holding the model's weights, quantization state included."""
    seen = {}
    for t in dist.parameter_tensors(model):
        seen[t.untyped_storage()._cdata] = (t.untyped_storage().nbytes(), str(t.dtype), tuple(t.shape))
    return sorted(seen.values())


def test_nf4_stand_in_holds_the_bytes_of_a_real_4bit_load(spec):
    config = models.load_config(spec["model_config"], "sdpa")
    real = models.load_qlora_base(spec, config, "cpu")
    with fakestep.FakeRun(spec, fakestep.sim_tracker(cuda_model=False), cuda_model=False):
        fake = fakestep.qlora_base(spec, config, "cpu")
        fake_storages = storages(fake)
    assert isinstance(next(fake.parameters()), FakeTensor)
    assert fake_storages == storages(real)
    packed = [s for s in fake_storages if s[1] == "torch.uint8" and len(s[2]) == 2]
    linears = [m for m in real.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(packed) == len(linears) > 0  # one packed weight (numel / 2 bytes) per quantized linear
    assert sum(s[0] for s in packed) == sum(m.weight.quant_state.shape.numel() // 2 for m in linears)
    # the absmax: one per 64 weights, fp32 without double quantization (bitsandbytes' default), uint8 with it
    # (plus fp32 constants per 256 blocks and their code)
    double = spec["knobs"]["double_quant"]
    assert all(m.weight.quant_state.nested == double for m in linears)
    absmax = sum(m.weight.quant_state.absmax.untyped_storage().nbytes() for m in linears)
    blocks = sum(m.weight.quant_state.shape.numel() // 64 for m in linears)
    assert absmax == blocks * (1 if double else 4)


def _state(optimizer) -> list:
    return sorted((str(v.dtype), tuple(v.shape), v.untyped_storage().nbytes())
                  for st in optimizer.state.values() for v in st.values() if isinstance(v, torch.Tensor))


@pytest.mark.parametrize("name", ["adamw8bit", "paged-adamw8bit", "lion8bit"])
def test_8bit_optimizer_state_is_real_bitsandbytes_state(name):
    def step():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 300), torch.nn.Linear(300, 8))  # 8-bit and 32-bit states
        opt = optimizers.make(name, model)
        model(torch.randn(2, 256)).sum().backward()
        opt.step()
        return _state(opt), isinstance(next(model.parameters()), FakeTensor)

    real, real_is_fake = step()
    knobs = {"optimizer": name, "adapter": None}
    with fakestep.FakeRun({"knobs": knobs, "warmup_steps": 1}, fakestep.sim_tracker(cuda_model=False), cuda_model=False):
        fake, fake_is_fake = step()
    assert (real_is_fake, fake_is_fake) == (False, True)
    assert fake == real
    assert ("torch.uint8", (300, 256), 300 * 256) in real  # blockwise 8-bit state of the big weight


@pytest.mark.parametrize("name, state_bytes", [("paged-adamw8bit", 2 * 1), ("paged-adamw32bit", 2 * 4)])
def test_paged_states_are_unified_memory_outside_the_allocator_replay(name, state_bytes):
    """bitsandbytes pages a state buffer of 1e5 or more elements (cudaMallocManaged): the trace
    names those allocations and the replay keeps them apart; the small layer's states are
    ordinary torch tensors."""
    from bench.estimate import replay

    tracker = fakestep.sim_tracker(cuda_model=True)
    knobs = {"optimizer": name, "adapter": None}
    with fakestep.FakeRun({"knobs": knobs, "warmup_steps": 1}, tracker, cuda_model=True), tracker:
        model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 8))  # 262,144 and 4,096
        opt = optimizers.make(name, model)
        model(torch.randn(2, 512)).sum().backward()
        opt.step()
        trace = tracker.trace()
        out = replay.replay(trace)
    assert out["unified_peak_bytes"] == state_bytes * 512 * 512  # two states of the big weight only
    alone = replay.replay({**trace, "ops": [op if op != replay.UNIFIED_OP else "x" for op in trace["ops"]]})
    assert alone["allocated_peak_bytes"] - out["allocated_peak_bytes"] >= state_bytes * 512 * 512


def test_which_states_are_paged_is_bitsandbytes_own_decision():
    # Optimizer8bit.get_state_buffer: `if not self.is_paged or p.numel() < 1e5` keeps a plain tensor; the
    # rule is asked of the library (its GPU branch), not copied: every reader goes through bnb_pages
    import inspect
    from bench.worker.sim import fakestep as fs
    assert (optimizers.bnb_pages(99_999), optimizers.bnb_pages(100_000)) == (False, True)
    assert "bnb_pages(" in inspect.getsource(optimizers.paged_state_tensors)
    assert "bnb_pages(" in inspect.getsource(fs.FakeRun._paged_buffer)
    assert not hasattr(optimizers, "BNB_PAGED_MIN_NUMEL")


def test_quant_state_is_counted_where_fsdp2_leaves_it_on_the_module():
    """FSDP2 swaps each weight for a sharded parameter that carries no ``quant_state``; bitsandbytes keeps the
    state on its Linear4bit module (``module.quant_state``, read back by fix_4bit_weight_quant_state_from_module).
    dist.quant_state_bytes counts it there, and a state both a weight and its module hold once."""
    import types

    import torch

    from bench.worker import dist

    class Linear4bit(torch.nn.Module):   # bitsandbytes' class, by name: what dist reads
        def __init__(self, state, on_weight):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(8))
            self.quant_state = state
            if on_weight:
                self.weight.quant_state = state

    def state(n):
        nested = types.SimpleNamespace(absmax=torch.zeros(n // 4), code=torch.zeros(256), offset=None, state2=None)
        return types.SimpleNamespace(absmax=torch.zeros(n, dtype=torch.uint8), code=torch.zeros(16), offset=torch.zeros(()),
                                     state2=nested)
    a, b = state(64), state(128)
    model = torch.nn.Sequential(Linear4bit(a, on_weight=False), Linear4bit(b, on_weight=True))
    each = lambda s: 4 * 16 + s.absmax.numel() + 4 + 4 * (s.absmax.numel() // 4) + 4 * 256  # noqa: E731
    assert dist.quant_state_bytes(model) == each(a) + each(b)
