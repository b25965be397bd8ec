"""Fixtures shared by the test suite (helpers themselves: tests/helpers.py)."""
from __future__ import annotations

import pytest

from tests.helpers import write_matrix


@pytest.fixture(scope="session", autouse=True)
def cpu_half_gemm():
    """The tests' in-process cpu runs multiply bf16 as every cpu cell's worker does
    (bench/worker/cpu_gemm.py): in fp32 inside the kernel where this CPU has no bf16 GEMM."""
    import torch

    from bench.worker import cpu_gemm
    cpu_gemm.install(torch)


@pytest.fixture
def matrix_file(tmp_path):
    """Factory: matrix_file({study: {...}}) -> path of a matrix YAML in tmp_path."""
    return lambda studies, **top: write_matrix(tmp_path, studies, **top)


def pytest_collection_modifyitems(config, items):
    """Skip @pytest.mark.cuda tests where torch sees no CUDA device (torch is imported only
    when such a test was collected)."""
    cuda_items = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_items:
        return
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False")
    for item in cuda_items:
        item.add_marker(skip)
