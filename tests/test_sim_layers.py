"""Sim's layer extension (bench/worker/sim/layers.py): a step simulated with 2, 3 and 4 layers
and extended to L gives the record the full L-layer step gives, field for field, and its
allocation trace event for event; where it cannot be shown exact it is not used."""
import json

import pytest

import bitsandbytes  # noqa: F401  (their constants real, as a sim run imports them first)
import peft  # noqa: F401

from bench.records import identical
from bench.cells import matrix
from bench.worker.sim import extension, layers, measure, simulate

SIX = ["lora+gc+bf16", "qlora+gc", "baseline", "gc+bf16", "adamw8bit+gc+bf16", "opt-in-bwd+bf16"]
# torchtune's offloading stash frees a tensor 5 saved ids after it, across layer boundaries: the
# 2-, 3- and 4-layer steps do not verify, and the cell runs the full step
FALLS_BACK = "gc+act-offload+bf16"
# one rank's own program (bench/worker/sim/rankgroup.py): FSDP2, with QLoRA, with CPU offload
PER_RANK = ["fsdp+w2", "qlora+fsdp+gc+w2", "qlora+fsdp-offload+gc+w2", "lora+fsdp1+w2"]


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """Cells of two real tiny architectures with 7 decoder layers (the extension adds 5)."""
    from tests.helpers import MATRIX_DIR, write_matrix
    folder = tmp_path_factory.mktemp("layers")
    models = folder / "models"
    models.mkdir()
    for name in ("tiny-qwen2", "tiny-llama"):
        raw = json.loads((MATRIX_DIR / "models" / f"{name}.json").read_text())
        (models / f"seven-{name}.json").write_text(json.dumps(dict(raw, num_hidden_layers=7)))
    study = {"mode": "sim", "models": ["seven-tiny-qwen2", "seven-tiny-llama"], "gpus": ["h100-80gb", "t4"],
             "techniques": SIX + [FALLS_BACK] + PER_RANK, "batch_size": 2, "seq_len": 64}
    return matrix.load(write_matrix(folder, {"s": study}, models_dir=str(models)))


def _record(spec, m) -> dict:
    out = simulate.finish(spec, m)
    trace = out.pop("_trace")
    return json.loads(json.dumps(out)), trace


QUICK = {("seven-tiny-qwen2", "lora+gc+bf16"), ("seven-tiny-llama", "qlora+gc")}  # in the default run; the rest slow


@pytest.mark.parametrize("model,technique", [
    pytest.param(m, t, marks=() if (m, t) in QUICK else pytest.mark.slow)
    for m in ("seven-tiny-qwen2", "seven-tiny-llama") for t in SIX])
def test_extended_step_is_the_full_step(cells, model, technique):
    spec = cells[f"{model}__sim__{technique}"]
    ext = layers.extended(spec, min_layers=5)
    assert ext is not None, "the extension did not verify (the worker log says why)"
    extended, ext_trace = _record(spec, ext)
    full, full_trace = _record(spec, measure.measure(spec))
    assert [str(d) for d in identical.compare(full, extended)] == []
    assert ext_trace == full_trace
    assert full["details"]["lora_modules" if "lora" in technique else "param_dtypes"]  # a real record


@pytest.mark.parametrize("technique", [pytest.param(t, marks=() if t == "qlora+fsdp+gc+w2" else pytest.mark.slow)
                                       for t in PER_RANK])
def test_a_ranks_extended_step_is_its_full_step(cells, technique):
    """A cell sim runs as its rank 0 runs it, from 4, 5 and 6 layers (at 2 its last unit's buffers
    sit nearer the step's start than its end: module docstring): its gathers, refilled buffers
    (``UntypedStorage.resize_``), reduce-scatters, host shards and the single-process step beside
    it extend to 7 layers with the record and the rank's trace the full step's, field for field
    and event for event."""
    spec = cells[f"seven-tiny-llama__sim__{technique}"]
    ext = layers.extended(spec, min_layers=5)
    assert ext is not None, "the rank's extension did not verify (the worker log says why)"
    single = layers.extended(spec, min_layers=5, per_rank=False)
    assert single is not None
    full_single = measure.measure(spec, per_rank=False)

    def record(m, s):
        out = simulate.per_rank(spec, m, s, {})
        trace = out.pop("_trace")
        return json.loads(json.dumps(out)), trace
    extended, ext_trace = record(ext, single)
    full, full_trace = record(measure.measure(spec), full_single)
    assert [str(d) for d in identical.compare(full, extended)] == []
    assert ext_trace == full_trace
    assert extended["details"]["rank_program"]["world_size"] == 2 and extended["details"]["build_peak_bytes"] is None
    assert extended["details"]["formula_cross_check"] == full["details"]["formula_cross_check"]


def test_an_extension_that_does_not_verify_runs_the_full_step(cells, monkeypatch):
    """A figure of the 3- and 5-layer steps off by one (not linear in the layers any more):
    the extension refuses, from 2 layers and from 4, and ``simulate.run`` gives the full
    step's record."""
    spec = cells["seven-tiny-qwen2__sim__lora+gc+bf16"]
    measured_part = layers.measured_part

    def off_by_one(spec, cuda_model, per_rank=True):
        part = measured_part(spec, cuda_model, per_rank)
        if spec["model_config"].endswith(("layers3.json", "layers5.json")):  # k + 1 of both tries
            part["out"]["details"]["pad_tokens"] += 1
        return part
    monkeypatch.setattr(layers, "measured_part", off_by_one)
    monkeypatch.setattr(layers, "MIN_LAYERS", 5)
    assert layers.eligible(spec) == ""
    tried, extended = [], layers.extended
    monkeypatch.setattr(layers, "extended", lambda *a, **k: tried.append(extended(*a, **k)) or tried[-1])
    ran = json.loads(json.dumps({k: v for k, v in simulate.run(spec).items() if k != "_trace"}))
    assert tried == [None]   # simulate.run tried the extension, which refused, and ran the full step
    full, _ = _record(spec, measure.measure(spec))
    assert [str(d) for d in identical.compare(full, ran)] == []


def test_ineligible_cells_run_the_full_step(cells, tmp_path):
    spec = cells["seven-tiny-qwen2__sim__baseline"]
    assert layers.eligible(spec, min_layers=5) == ""
    assert "fewer than" in layers.eligible(spec)  # 7 layers: below MIN_LAYERS, three small steps cost more
    assert "zero2" in layers.eligible(dict(spec, knobs=dict(spec["knobs"], dist="zero2")), min_layers=5)
    for dist in ("zero2", "zero3"):   # a rank's own ZeRO step: its partition's pieces move as layers are added
        rank = dict(spec, world_size=2, knobs=dict(spec["knobs"], dist=dist))
        assert "does not repeat layer by layer" in layers.eligible(rank, min_layers=5)
    assert "compile" in layers.eligible(dict(spec, knobs=dict(spec["knobs"], compile=True)), min_layers=5)
    raw = json.loads(open(spec["model_config"]).read())
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(dict(raw, use_sliding_window=True)))
    assert "sliding" in layers.eligible(dict(spec, model_config=str(odd)), min_layers=5)
    odd.write_text(json.dumps(dict(raw, model_type="mixtral")))
    assert "model type" in layers.eligible(dict(spec, model_config=str(odd)), min_layers=5)


def test_linear_refuses_what_is_not_linear():
    assert extension.linear({"a": 10, "b": [1, "x"]}, {"a": 13, "b": [1, "x"]}, {"a": 16, "b": [1, "x"]}, 5, "r") \
        == {"a": 25, "b": [1, "x"]}
    with pytest.raises(extension.NotExact, match="not linear"):
        extension.linear({"a": 10}, {"a": 13}, {"a": 17}, 5, "r")
    with pytest.raises(extension.NotExact, match="differ"):
        extension.linear({"a": 0.5}, {"a": 0.5}, {"a": 0.6}, 5, "r")
    with pytest.raises(extension.NotExact, match="keys"):
        extension.linear({"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2}, 5, "r")


def _trace(events):
    cols = {k: [] for k in extension.COLUMNS}
    for ev in events:
        for k, v in zip(extension.COLUMNS, (*ev, 0)):  # every event on the default stream
            cols[k].append(v)
    return {"columns": cols, "categories": ["a", "b"]}


def test_trace_pumping_on_a_layered_sequence():
    """A toy trace of n layers (alloc per layer in forward, freed newest first in backward)
    extends from 2 and 3 layers to 6, serials and all."""
    def run(n):
        events, serial, live = [], 0, []
        for _ in range(n):  # forward: two storages a layer
            for nbytes in (512, 1024):
                serial += 2  # a zero-byte storage between: serials skip
                events.append((1, serial, nbytes, 0, 1, 3, 1))
                live.append(serial)
        serial += 1
        events.append((1, serial, 64, 0, 1, 4, 1))  # the loss
        events.append((0, serial, 0, 0, 2, 0, 1))
        while live:  # backward frees the newest layer's first
            s = live.pop()
            events.append((0, s, 0, 0, 2, 0, 1))
        return _trace(events)
    a, b, c, six = (extension.encode(run(n)) for n in (2, 3, 4, 6))
    blocks = extension.insertions(a, b)
    assert blocks is not None
    assert extension.pump(a, blocks, 2) == c
    assert extension.decode(extension.pump(a, blocks, 4), ["a", "b"], extension.first_serial(run(6))) == run(6)["columns"]
    assert six == extension.pump(a, blocks, 4)


@pytest.mark.slow
def test_a_cell_that_does_not_extend_gets_the_full_steps_record(cells):
    spec = cells[f"seven-tiny-llama__sim__{FALLS_BACK}"]
    assert layers.extended(spec, min_layers=5) is None
    run = json.loads(json.dumps({k: v for k, v in simulate.run(spec).items() if k != "_trace"}))
    full, _ = _record(spec, measure.measure(spec))
    assert [str(d) for d in identical.compare(full, run)] == []


def test_refilled_buffers_extend_by_their_nearest_serial():
    """FSDP2's gather buffers, each layer's freed (resized to 0) after use and refilled (the same
    serial allocated again, bench/worker/memresize.py) in backward and the next forward: the
    extension names each refill by its distance from the last refill of its kind, from the newest
    serial or from the last before the steps, and reads the 8-layer trace back serial for serial (from
    4, 5 and 6 layers, as a rank's step is extended: from 2, the first layer's refill is nearer the
    step's start than the last refill, and the second layer's is not, so 3 layers are not 2 with a
    block repeated)."""
    def run(n):
        events, serial, units = [], 0, []
        for _ in range(n):  # forward of step 0: each layer's buffer made, used, freed
            serial += 1
            units.append(serial)
            events += [(1, serial, 4096, 0, 1, 3, 1), (1, serial + 1, 64, 0, 1, 4, 0), (0, serial, 0, 0, 1, 0, 1)]
            serial += 1
        for s in reversed(units):  # backward: refilled newest first, then freed
            events += [(1, s, 4096, 0, 2, 5, 1), (0, s, 0, 0, 2, 0, 1)]
        for s in units:  # the next forward: refilled in order
            events += [(1, s, 4096, 1, 1, 5, 1), (0, s, 0, 1, 1, 0, 1)]
        return _trace(events)
    a, b, c = (extension.encode(run(n)) for n in (4, 5, 6))
    assert any(ev[0] == 2 for ev in a)  # refills, not new allocations
    blocks = extension.insertions(a, b)
    assert blocks is not None and extension.pump(a, blocks, 2) == c
    assert extension.decode(extension.pump(a, blocks, 4), ["a", "b"], extension.first_serial(run(8))) \
        == run(8)["columns"]
    assert extension.insertions(*(extension.encode(run(n)) for n in (2, 3))) is None
