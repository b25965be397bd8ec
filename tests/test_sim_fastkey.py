"""Sim's fast FakeTensor cache (bench/worker/sim/fastkey.py) is torch's, value for value: on
every op of real sim steps (tiny models, techniques that reach LoRA, QLoRA's 4-bit ops,
checkpointing, activation offloading, 8-bit optimizers), the key built with it equals the key
torch's own ``_prep_args_for_hash`` builds, and a bypass torch raises is raised too; and every
output it builds from a cache entry passes torch's own cross-check against the op dispatched
afresh (``FakeTensorMode.cache_crosscheck_enabled``)."""
import pytest

import bitsandbytes  # noqa: F401  (their constants real, as a sim run imports them first)
import peft  # noqa: F401
from torch._subclasses import fake_tensor as ft

from bench.cells import matrix
from bench.worker.sim import fakestep, fastkey, simulate

TECHNIQUES = ["lora+gc+bf16", "qlora+gc", "adamw8bit+gc+bf16", "gc+act-offload+bf16"]


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    from tests.helpers import write_matrix
    study = {"mode": "sim", "models": ["tiny-qwen2"], "gpus": ["h100-80gb"], "techniques": TECHNIQUES,
             "batch_size": 2, "seq_len": 64}
    return matrix.load(write_matrix(tmp_path_factory.mktemp("fastkey"), {"s": study}))


def _outcome(fn, mode, args, state):
    result = []
    try:
        fn(mode, result, args, state, [])
    except ft._BypassDispatchCache as exc:
        return "bypass", exc.reason
    return "key", result


@pytest.mark.parametrize("technique", TECHNIQUES)
def test_fast_key_is_torchs_key(cells, monkeypatch, technique):
    seen = {"args": 0, "tensors": 0}

    def checked(mode: ft.FakeTensorMode) -> ft.FakeTensorMode:
        def prep(self, result, args, state, ids):
            fast = _outcome(fastkey.prep_args_for_hash, self, args, state)
            del self._prep_args_for_hash  # torch's own, all the way down
            try:
                ours = _outcome(fastkey._ORIGINAL, self, args, state)
            finally:
                self._prep_args_for_hash = prep.__get__(self)
            assert fast == ours, (args, fast, ours)
            seen["args"] += 1
            seen["tensors"] += sum(type(a) is ft.FakeTensor for a in (args if isinstance(args, (tuple, list)) else ()))
            return fastkey.prep_args_for_hash(self, result, args, state, ids)
        mode._prep_args_for_hash = prep.__get__(mode)
        return mode

    monkeypatch.setattr(fakestep.fastkey, "install", checked)
    spec = cells[f"tiny-qwen2__sim__{technique}"]
    out = simulate.run(spec)
    assert out["peak_bytes"] > 0
    assert seen["args"] > 500 and seen["tensors"] > 500, seen  # the check ran on the step's ops


def _facts(t: ft.FakeTensor) -> tuple:
    import torch
    return (type(t), t.shape, t.stride(), t.storage_offset(), t.dtype, t.layout, t.fake_device, t.device,
            t.requires_grad, t.is_conj(), t.is_neg(), t.fake_mode, t.constant, t.untyped_storage().nbytes(),
            t.untyped_storage()._cdata if t._base is not None or t.storage_offset() else None,
            torch._C._dispatch_key_set(t), list(t.__dict__.items()), _data_pointer(t))


def _data_pointer(t) -> str:
    """What asking for the data pointer does: FakeTensors raise, or (once) warn where the mode
    allows it."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            t.data_ptr()
        except RuntimeError as exc:
            return f"raises {str(exc)[:60]}"
    return "returns"


@pytest.mark.parametrize("technique", TECHNIQUES)
def test_fast_cache_outputs_pass_torchs_crosscheck(cells, monkeypatch, technique):
    """torch's cross-check dispatches each cache hit afresh, with the cache off, and compares
    the two outputs' metadata (sizes, strides, storage offset, dtype, device, requires_grad,
    conj/neg, aliasing); it raises on any difference. Cache misses go through the same code:
    torch builds a new entry's output once from the entry and compares it with the dispatched one."""
    seen = {"fast": 0}
    install = fastkey.install

    def checked(mode: ft.FakeTensorMode) -> ft.FakeTensorMode:
        install(mode)
        mode.cache_crosscheck_enabled = True

        def output(self, state, entry, key, func, args):
            fast = fastkey.output_from_cache_entry(self, state, entry, key, func, args)
            if isinstance(fast, ft.FakeTensor):  # and torch's own, from the same entry
                torchs = fastkey._ORIGINAL_OUTPUT(self, state, entry, key, func, args)
                assert _facts(fast) == _facts(torchs), (func, _facts(fast), _facts(torchs))
                seen["fast"] += 1
            return fast
        mode._get_output_tensor_from_cache_entry = output.__get__(mode)
        return mode

    monkeypatch.setattr(fakestep.fastkey, "install", checked)
    hits = ft.FakeTensorMode.cache_hits
    out = simulate.run(cells[f"tiny-qwen2__sim__{technique}"])
    assert out["peak_bytes"] > 0
    assert ft.FakeTensorMode.cache_hits - hits > 300 and seen["fast"] > 300, seen  # cross-checked hits


def test_a_sim_step_runs_without_the_cyclic_collector(cells):
    """Every step, compiled or not, gets the fast key, and no cyclic GC runs inside it (what it
    frees, and when, would depend on the process, not the cell: fakestep's docstring); the
    collector is back on afterwards."""
    import gc
    spec = cells["tiny-qwen2__sim__lora+gc+bf16"]
    for knobs in (spec["knobs"], dict(spec["knobs"], compile=True)):
        with fakestep.FakeRun(dict(spec, knobs=knobs), fakestep.sim_tracker()) as fake:
            assert not gc.isenabled()
            assert fake.mode._prep_args_for_hash.__func__ is fakestep.fastkey.prep_args_for_hash
        assert gc.isenabled()
