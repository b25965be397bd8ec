"""Every reference sim cell whose step is extended from fewer layers (bench/worker/sim/layers.py) gives,
extended, the record and the allocation trace its full simulation gives: field for field, event for event.

tests/test_sim_layers.py holds this on two tiny architectures in every run. This module holds it on
the reference's own cells, at their full sizes: every sim cell of matrix/default.yaml and of
matrix/published.yaml that the extension takes (``layers.eligible``; a cell whose small steps do not
verify runs its full step anyway, and is reported as such). Each cell costs its full simulation (a
70B step: minutes), so the module is opt-in:

    FT_MEMBENCH_ALL_LAYERS=1 python -m pytest tests/test_layers_reference.py -n 2 -q
    FT_MEMBENCH_ALL_LAYERS=1 python -m pytest tests/test_layers_reference.py -k llama-3.1-70b   # some

Without the variable it collects one skipped test that says how to run it.
"""
from __future__ import annotations

import json
import os

import pytest

from bench.records import identical

ALL = os.environ.get("FT_MEMBENCH_ALL_LAYERS") == "1"
pytestmark = pytest.mark.slow


def _specs() -> dict:
    from bench.cells import matrix
    from tests.helpers import REPO
    out = {}
    for path in (REPO / "matrix" / "default.yaml", REPO / "matrix" / "published.yaml"):
        for cid, spec in matrix.load(path).items():
            if spec["mode"] == "sim" and not spec["skip_reason"]:
                out.setdefault(cid, spec)
    return out


def _size(spec) -> int:
    raw = json.loads(open(spec["model_config"]).read())
    return raw.get("hidden_size", 0) * raw.get("num_hidden_layers", 0)


SPECS = _specs() if ALL else {}
ORDER = sorted(SPECS, key=lambda c: (_size(SPECS[c]), c))  # the small models first: most answers come early


def _record(spec, m, single=None):
    from bench.worker.sim import rankgroup, simulate
    out = simulate.per_rank(spec, m, single, {}) if rankgroup.traced(spec) else simulate.finish(spec, m)
    trace = out.pop("_trace", None)
    return json.loads(json.dumps(out)), trace


@pytest.mark.skipif(not ALL, reason="opt-in: FT_MEMBENCH_ALL_LAYERS=1 runs every reference cell's full simulation")
@pytest.mark.parametrize("cell", ORDER or ["(set FT_MEMBENCH_ALL_LAYERS=1)"])
def test_the_extended_step_is_the_full_step_on_a_reference_cell(cell):
    import bitsandbytes  # noqa: F401  (their constants real, as a sim run imports them first)
    import peft  # noqa: F401

    from bench.worker.sim import layers, measure, rankgroup
    spec = SPECS[cell]
    why = layers.eligible(spec)
    if why:
        pytest.skip(f"not extended, runs its full step: {why}")
    ext = layers.extended(spec)
    if ext is None:
        pytest.skip("the small steps did not verify: the cell runs its full step (the worker log says why)")
    single = full_single = None
    if rankgroup.traced(spec):
        single = layers.extended(spec, per_rank=False) or measure.measure(spec, per_rank=False)
        full_single = measure.measure(spec, per_rank=False)
    extended, ext_trace = _record(spec, ext, single)
    full, full_trace = _record(spec, measure.measure(spec), full_single)
    assert [str(d) for d in identical.compare(full, extended)] == []
    assert ext_trace == full_trace
