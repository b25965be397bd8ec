"""The benchmark suite's matrix: one parametrized test per cell of the matrix YAML.

    pytest bench                       # every cell of matrix/default.yaml
    pytest bench -k zero3              # the cells whose id contains zero3
    pytest bench --matrix my.yaml      # another matrix
    pytest bench --collect-only -q     # list the cells
    pytest bench -k published          # the published corpus's rows (bench/test_published.py, matrix/published.yaml)
    pytest bench/test_cells.py --cell ID --cell-out results/cells/ID.json   # what Snakemake runs

The ids come from bench.cells.matrix, the one loader: a bad matrix fails collection with the
file, key and reason before any cell runs.

``--cell ID --cell-out PATH`` is the per-cell job of the Snakefile: exactly that cell runs,
and its pytest-benchmark JSON (the record in ``extra_info``), kept in memory (pytest-benchmark
itself writes to os.devnull, so no temp file sits beside PATH), is written to PATH atomically
when the session ends. Whatever happened (a crash, an error record, a collection error), PATH
receives a record, and the exit status is 0 once it has: a failing cell is a row, and the
workflow goes on. A full disk: when the whole record does not fit, a small failure record saying
so is written in its place; when nothing fits, one line on stderr names the path and the reason,
and the exit status is 1 (no traceback, no partial file). While it runs, a watchdog ends the job if the process that started it dies
(bench/runner/lifeline.py), so a killed Snakemake leaves no cell running beside later ones.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from bench.records import atomic, record, seal
from bench.runner import launch, lifeline, simengine
from bench.cells import matrix

CELLS = pytest.StashKey[dict]()
WHY = pytest.StashKey[str]()   # why collection failed, for the --cell-out record
DOC = pytest.StashKey[dict]()  # pytest-benchmark's JSON document, kept in memory for --cell-out
RECORDS = pytest.StashKey[list]()   # the records of the cells this session ran (test_cells.py)
GiB = 2**30


def memory_lines(records: list[dict]) -> list[str]:
    """One line per cell: status, peak allocated, reserved (measured on cuda, modelled in sim) and the
    verdict per GPU: what ``pytest bench -k zero3`` is run for, not only wall times."""
    def gib(v):
        return f"{v / GiB:.2f}" if isinstance(v, (int, float)) else "-"
    out = []
    for rec in records:
        reserved = rec.get("reserved_peak_bytes") or rec.get("modelled_reserved_peak_bytes")
        verdicts = ", ".join(f"{g} {v}" for g, v in sorted((rec.get("verdicts") or {}).items()))
        out.append(f"{rec.get('cell', '?')}: {rec.get('status', '?')}, peak {gib(rec.get('peak_bytes'))} GiB, reserved "
                   f"{gib(reserved)} GiB{' (modelled)' if not rec.get('reserved_peak_bytes') and reserved else ''}"
                   + (f"; {verdicts}" if verdicts else ""))
    return out


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    records = config.stash.get(RECORDS, [])
    if records:
        terminalreporter.section("memory per cell (the records; --benchmark-json keeps them whole)")
        for line in memory_lines(records):
            terminalreporter.write_line(line)


def pytest_addoption(parser):
    group = parser.getgroup("ft-membench")
    group.addoption("--matrix", default=os.environ.get("FT_MEMBENCH_MATRIX", str(matrix.DEFAULT_MATRIX)),
                    help="matrix YAML to expand into cells (default: matrix/default.yaml)")
    group.addoption("--worker-logs", default="results/logs",
                    help="folder for each cell's worker log, <cell>.worker.log")
    group.addoption("--cell", default=None, help="run exactly this cell id (no substring matching)")
    group.addoption("--cell-out", default=None,
                    help="with --cell: write the cell's benchmark JSON here atomically, whatever happens")
    group.addoption("--sim-engine", default=os.environ.get(simengine.ENV),
                    help="unix socket of the workflow's warm sim engine (bench/runner/simengine.py; default: "
                         f"${simengine.ENV}, which the Snakefile sets): sim cells run there, others fresh")


XDIST_WORKER_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def pytest_configure(config):
    drop_inherited_xdist_worker_env(config)
    out = config.getoption("cell_out")
    if out is None:
        return
    if config.getoption("cell") is None:
        raise pytest.UsageError("--cell-out needs --cell ID")
    try:  # pytest-benchmark's JSON goes beside it first: a missing folder would cost the record
        Path(out).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise pytest.UsageError(f"--cell-out {out}: cannot create its folder: {exc.strerror or exc}") from None
    if not config.getoption("benchmark_json"):  # it must be set for the JSON to be made; we keep it in memory
        config.option.benchmark_json = Path(os.devnull)   # (a file beside --cell-out was left on a full disk)
    lifeline.watch_parent()


def drop_inherited_xdist_worker_env(config) -> None:
    """Forget xdist worker variables this session inherited without being an xdist worker.

    pytest-xdist sets ``PYTEST_XDIST_WORKER`` in each worker's environment, and every process
    such a worker starts inherits it: a Snakemake job or ``pytest bench`` run from a test under
    ``pytest -n``. pytest-benchmark (configured after this hook: its hook is trylast) reads that
    variable as "I am an xdist worker", disables itself and writes no JSON, and the cell's
    record would be lost. A real worker of this session has ``config.workerinput`` and keeps it.
    """
    if hasattr(config, "workerinput"):
        return
    for name in XDIST_WORKER_ENV:
        os.environ.pop(name, None)


def cells_of(config) -> dict:
    if CELLS not in config.stash:
        try:
            config.stash[CELLS] = matrix.load(config.getoption("matrix"))
        except matrix.MatrixError as exc:
            config.stash[WHY] = str(exc)
            raise pytest.UsageError(str(exc)) from None
    return config.stash[CELLS]


def pytest_generate_tests(metafunc):
    if "cell_spec" in metafunc.fixturenames:
        cells = cells_of(metafunc.config)
        only = metafunc.config.getoption("cell")
        if only is not None:
            if only not in cells:
                why = f"--cell {only}: no such cell in {metafunc.config.getoption('matrix')}"
                metafunc.config.stash[WHY] = why
                raise pytest.UsageError(why)
            cells = {only: cells[only]}
        metafunc.parametrize("cell_spec", list(cells.values()), ids=list(cells))


def pytest_collection_modifyitems(items):
    """A cell's study is a keyword too: ``pytest bench -k torchtune`` runs the sim-torchtune-3b study."""
    for item in items:
        spec = getattr(getattr(item, "callspec", None), "params", {}).get("cell_spec")
        if spec:
            item.extra_keyword_matches.add(spec["study"])


@pytest.fixture
def worker_log(request, cell_spec):
    return os.path.join(request.config.getoption("worker_logs"), f"{cell_spec['cell']}.worker.log")


@pytest.fixture
def cell_records(request) -> list:
    """The session's list of cell records, for ``pytest_terminal_summary``."""
    return request.config.stash.setdefault(RECORDS, [])


@pytest.fixture
def cell_runner(request):
    """``run(spec, log) -> record``: a sim cell through the warm engine when one is given and
    takes it (the record of the cell run alone in a fresh process, bench/runner/simengine.py), else
    (and for every cpu/cuda cell) its own fresh worker process (bench/runner/launch.py)."""
    sock = request.config.getoption("sim_engine")

    def run(spec: dict, log_path) -> dict:
        rec = simengine.run_cell(spec, log_path, sock) if sock and not spec["skip_reason"] else None
        if rec is None:
            return launch.run_cell(spec, log_path)
        print(f"{spec['cell']}: record from the warm sim engine at {sock}", file=sys.stderr)
        return rec
    return run


def pytest_benchmark_update_json(config, benchmarks, output_json):
    """pytest-benchmark's document, before it writes it (to os.devnull under --cell-out)."""
    config.stash[DOC] = output_json


def pytest_sessionfinish(session, exitstatus):
    """Runs after pytest-benchmark has made its JSON (its hook is a wrapper that saves first)."""
    config = session.config
    out = config.getoption("cell_out")
    if out is None:
        return
    cell = config.getoption("cell")
    doc = usable(config.stash.get(DOC, None), cell)
    if doc is None:
        reason = f"pytest ended with exit status {int(exitstatus)} and left no benchmark record"
        if config.stash.get(WHY, None):   # the cause pytest printed, kept in the row (not only in the log)
            reason += f": the cell could not be collected: {config.stash[WHY]}"
        doc = failure_doc(config, cell, reason)
    session.exitstatus = 0 if write_record(config, cell, out, doc) else 1


def failure_doc(config, cell: str, reason: str) -> dict:
    spec = config.stash.get(CELLS, {}).get(cell)
    rec = record.failure(spec, "error", reason) if spec else record.orphan(cell, reason)
    return {"benchmarks": [{"name": f"test_cell[{cell}]", "extra_info": rec}]}


def write_record(config, cell: str, out, doc: dict) -> bool:
    """Write ``doc`` to ``out``; on a full disk a small failure record in its place; False (and one
    line on stderr) when neither could be written. Never a traceback, never a partial file."""
    try:
        atomic.write_json(out, seal.sealed(doc))   # what is read back is what was written (bench/records/seal.py)
        return True
    except OSError as exc:   # atomic's WriteError: one line naming the path, no temp file left
        first = exc
    status = doc["benchmarks"][0]["extra_info"].get("status")
    reason = f"the cell's {status} record could not be written: {first}"
    try:
        atomic.write_json(out, seal.sealed(failure_doc(config, cell, reason)))
        say(f"bench: {first}; a failure record saying so was written instead")
        return True
    except OSError as exc:
        say(f"bench: {exc}; cell {cell} has no record")
        return False


def say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:   # stderr is the rule log, on the same full disk
        pass


def usable(doc, cell: str):
    """pytest-benchmark's document (made plain JSON) if it holds ``cell``'s record, else None."""
    try:
        from pytest_benchmark.utils import safe_dumps
        doc = json.loads(safe_dumps(doc))
        return doc if doc["benchmarks"][0]["extra_info"]["cell"] == cell else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None
