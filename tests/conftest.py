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


# The modules that take longest on the README's two processes (--durations on a fresh clone), longest
# first. pytest-xdist's loadscope hands out modules in collection order; collected alphabetically these
# came last and the run waited on one process for minutes. Started first, the short ones fill the gaps.
LONGEST_FIRST = ("test_techniques_runs", "test_recipes_runs", "test_sim_deepspeed", "test_sim_ranks", "test_fits",
                 "test_sim_fsdp1", "test_sim_layers", "test_cli_rows", "test_composition", "test_reproduce",
                 "test_sim_nosync", "test_dist", "test_warm_cells", "test_fit_guard", "test_sim_reserved",
                 "test_dataset_free", "test_sim_masks", "test_dataset_hostload", "test_workflow", "test_dataset_epoch",
                 "test_sim_cells", "test_one_rank", "test_modelref", "test_dataset_ranks", "test_simengine")


def pytest_collection_modifyitems(config, items):
    """The longest modules first (``LONGEST_FIRST``), the rest in their order; and skip
    @pytest.mark.cuda tests where torch sees no CUDA device (torch is imported only when such a
    test was collected)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.path.stem, len(rank)), order[id(item)]))
    cuda_items = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_items:
        return
    import torch
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False")
    for item in cuda_items:
        item.add_marker(skip)
