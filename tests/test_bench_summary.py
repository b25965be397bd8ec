"""`pytest bench -k zero3` shows memory, not only wall times."""
from bench import conftest


def test_the_summary_gives_each_cells_peak_reserved_and_verdicts():
    rec = {"cell": "tiny-llama__sim__zero3+w2", "status": "ok", "peak_bytes": 3 * 2**30,
           "modelled_reserved_peak_bytes": int(3.5 * 2**30), "verdicts": {"rtx-4090": "fits", "t4": "fits"}}
    [line] = conftest.memory_lines([rec])
    assert line == "tiny-llama__sim__zero3+w2: ok, peak 3.00 GiB, reserved 3.50 GiB (modelled); rtx-4090 fits, t4 fits"
    cpu = {"cell": "tiny-llama__cpu__zero3", "status": "ok", "peak_bytes": 2**30}
    assert conftest.memory_lines([cpu]) == ["tiny-llama__cpu__zero3: ok, peak 1.00 GiB, reserved - GiB"]


def test_the_hook_is_registered():
    assert callable(conftest.pytest_terminal_summary)
