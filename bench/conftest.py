"""The benchmark suite's matrix: one parametrized test per cell of the matrix YAML.

    pytest bench                       # every cell of matrix/default.yaml
    pytest bench -k zero3              # the cells whose id contains zero3
    pytest bench --matrix my.yaml      # another matrix
    pytest bench --collect-only -q     # list the cells

The ids come from bench.matrix, the one loader: a bad matrix fails collection with the
file, key and reason before any cell runs.
"""
from __future__ import annotations

import os

import pytest

from bench import matrix


def pytest_addoption(parser):
    group = parser.getgroup("ft-membench")
    group.addoption("--matrix", default=os.environ.get("FT_MEMBENCH_MATRIX", str(matrix.DEFAULT_MATRIX)),
                    help="matrix YAML to expand into cells (default: matrix/default.yaml)")
    group.addoption("--worker-logs", default="results/logs",
                    help="folder for each cell's worker log, <cell>.worker.log")


def pytest_generate_tests(metafunc):
    if "cell_spec" in metafunc.fixturenames:
        try:
            cells = matrix.load(metafunc.config.getoption("matrix"))
        except matrix.MatrixError as exc:
            raise pytest.UsageError(str(exc)) from None
        metafunc.parametrize("cell_spec", list(cells.values()), ids=list(cells))


@pytest.fixture
def worker_log(request, cell_spec):
    return os.path.join(request.config.getoption("worker_logs"), f"{cell_spec['cell']}.worker.log")
