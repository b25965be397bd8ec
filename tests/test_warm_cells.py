"""The warm cpu pool (tests/warm_cells.py) gives the launcher's record: the suite runs its
tiny cpu cells through it (tests/helpers.py ``launch_all``), so what those tests hold is what
``python -m bench.worker`` (and torchrun's ranks) measure in fresh processes."""
import pytest

from bench.records import identical
from bench.runner import launch
from tests.warm_cells import CpuPool
from bench.cells import matrix
from tests.helpers import write_matrix

pytestmark = pytest.mark.slow
# one rank fp32 with peft (which imports bitsandbytes while the tracker counts: its NF4 tables are the
# cell's 144 B, as in a fresh process) and FSDP2 at world size 2 (two forks, torchrun's variables)
CELLS = ["lora", "fsdp+w2"]


def bytes_differences(fresh: dict, warm: dict) -> list:
    """identical.compare's differences, throughput left out: the two ran at different moments of
    a loaded machine, and the fork changes nothing that is timed (the steps). At world size 2 the
    allocator replay's sampled timeline and the per-phase peaks are left out too: gloo frees its copy
    of a collective's input from its own thread, at a moment of its own (tests/rank_traces.py), so
    a phase's peak may or may not catch that copy (seen once in a full suite: the optimizer phase's
    peak 192,864,580 B warm against 219,829,064 B fresh, the step's peak and breakdown equal); the
    step's peak, the breakdowns, the replay's figures and every rank's entry are compared."""
    multirank = fresh["world_size"] > 1
    return [d for d in identical.compare(fresh, warm) if d.field.split(".")[-1] not in identical.THROUGHPUT
            and not (multirank and d.field.startswith(("allocator_model.timeline.", "phase_peak_bytes.")))]


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warm")
    study = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": CELLS, "batch_size": 2,
             "seq_len": 32}
    cells = matrix.load(write_matrix(folder, {"s": study}))
    return {t: cells[f"tiny-llama__cpu__{t}"] for t in CELLS}


def test_a_warm_fork_gives_the_fresh_process_record(specs, tmp_path):
    with CpuPool(jobs=1) as pool:  # one server: each cell in its own fork after the one before
        warm = pool.run_many([(specs[t], tmp_path / "warm" / f"{t}.log") for t in CELLS])
    for t, rec in zip(CELLS, warm):
        fresh = launch.run_cell(specs[t], tmp_path / "fresh" / f"{t}.log")
        assert fresh["status"] == rec["status"] == "ok", (rec["reason"], fresh["reason"])
        assert bytes_differences(fresh, rec) == [], t
    ranks = warm[CELLS.index("fsdp+w2")]["details"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["status"] == "ok" for r in ranks)
    log = (tmp_path / "warm" / "fsdp+w2.log").read_text()
    assert log.count("record: ok") == 2  # both ranks' lines in the cell's log, as torchrun's


def test_a_cell_over_its_limit_is_a_timeout_and_the_server_goes_on(specs, tmp_path):
    with CpuPool(jobs=1) as pool:
        late = pool.run_cell({**specs["fsdp+w2"], "timeout_s": 2}, tmp_path / "late.log")
        after = pool.run_cell(specs["lora"], tmp_path / "after.log")
    assert late["status"] == "timeout" and "limit of 2 s" in late["reason"]
    assert [r["status"] for r in late["details"]["ranks"]] == [None, None]
    assert after["status"] == "ok"


def test_only_cpu_cells_come_to_the_pool(specs):
    with pytest.raises(ValueError, match="cpu cells only"):
        CpuPool().run_cell({**specs["lora"], "mode": "sim"})
