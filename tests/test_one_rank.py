"""A cell run as its rank 0 alone (its study's ``ranks: rank0``; bench/worker/onerank.py): the
rank's real program over torch's fake process group, in one process. On the CPU it is held here
against sim's rank 0 (``simulate.run(spec, cuda_model=False)``: cpu kernels, exact bytes) event by
event (world size 2): the same program, real tensors against fake ones. A GPU runs the same code with its own
allocator and FSDP's streams (matrix/cuda-h100.yaml; results/reference/cuda-h100).

Against a real multi-process run (tests/test_sim_ranks.py) two differences were named, gloo's copy
of each reduce-scatter input and the mesh's rank tensor: the fake group makes neither, so here the
traces agree with no tolerance but the named ones of tests/test_sim_fsdp1.py (peft's rotary buffers,
144 B; QLoRA is not run here). FSDP1 (``fsdp1``) runs over the same group as its default one.
"""
import pytest

from bench.estimate import replay
from bench.records import checks
from bench.runner import launch, ranks
from bench.cells import matrix
from bench.cells.matrixfile import MatrixError
from tests.rank_traces import peaks, step_allocations
from tests.test_sim_fsdp1 import tolerance

pytestmark = pytest.mark.slow
CELLS = ["fsdp+w2", "fsdp1+w2", "lora+fsdp1+bf16+gc+w2"]  # against real gloo ranks: tests/test_sim_ranks.py, test_sim_fsdp1.py


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    from bench.worker.sim import simulate
    from tests.helpers import launch_all, write_matrix
    folder = tmp_path_factory.mktemp("onerank")
    study = {"mode": "cpu", "ranks": "rank0", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": CELLS}
    cells = matrix.load(write_matrix(folder, {"s": study}))
    specs = [cells[f"tiny-llama__cpu__{t}"] for t in CELLS]
    assert all(spec["one_rank"] and not ranks.multirank(spec) for spec in specs)
    real = launch_all(specs, folder)
    return {t: (r, simulate.run(s, cuda_model=False)) for t, r, s in zip(CELLS, real, specs)}


@pytest.mark.parametrize("cell", CELLS)
def test_rank0_alone_allocates_as_sims_rank0(pairs, cell):
    real, sim = pairs[cell]
    assert real["status"] == "ok", real["reason"] + real["log_tail"]
    assert checks.problems(real) == []
    program = real["details"]["rank_program"]
    assert program["process_group"] == "fake" and program["world_size"] == real["world_size"] == sim["details"]["rank_program"]["world_size"]
    real_trace = replay.load(real["details"]["trace_file"])
    assert step_allocations(sim["_trace"]) == step_allocations(real_trace)
    (peak, by_phase, at_peak), (sim_peak, sim_phases, sim_at_peak) = peaks(real_trace), peaks(sim["_trace"])
    assert 0 <= peak - sim_peak <= tolerance(cell) and set(at_peak) == set(sim_at_peak)
    assert all(0 <= by_phase[p] - sim_phases[p] <= tolerance(cell) for p in by_phase)
    assert 0 <= real["peak_bytes"] - sim["peak_bytes"] <= tolerance(cell)


def test_rank0_is_for_fsdp_cells_of_cpu_and_cuda_studies(tmp_path):
    from tests.helpers import write_matrix
    zero = {"mode": "cpu", "ranks": "rank0", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["zero3+w2"]}
    with pytest.raises(MatrixError, match=r"studies\.s\.ranks.*rank0 runs FSDP cells"):
        matrix.load(write_matrix(tmp_path, {"s": zero}))
    sim = {"mode": "sim", "ranks": "rank0", "models": ["tiny-llama"], "gpus": ["rtx-4090"], "techniques": ["fsdp+w2"]}
    with pytest.raises(MatrixError, match=r"studies\.s\.ranks.*cpu and cuda"):
        matrix.load(write_matrix(tmp_path, {"s": sim}, name="m2.yaml"))
    bad = {"mode": "cpu", "ranks": "one", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["fsdp+w2"]}
    with pytest.raises(MatrixError, match="ranks"):
        matrix.load(write_matrix(tmp_path, {"s": bad}, name="m3.yaml"))


@pytest.mark.cuda
@pytest.mark.parametrize("techniques", ["fsdp+bf16+w2", "lora+fsdp1+bf16+gc+w2"])
def test_rank0_alone_runs_on_a_gpu_with_its_own_streams(tmp_path, techniques):
    """The same cells on a GPU: FSDP's all-gather and reduce-scatter streams are real CUDA streams,
    the allocator real; the record says it is one rank's program over the fake group."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from tests.helpers import write_matrix
    study = {"mode": "cuda", "ranks": "rank0", "models": ["tiny-llama"], "gpus": ["h100-80gb"],
             "techniques": [techniques]}
    spec = matrix.load(write_matrix(tmp_path, {"s": study}))[f"tiny-llama__h100-80gb__{techniques}"]
    rec = launch.run_cell(spec, tmp_path / "cell.log")
    assert rec["status"] == "ok", rec["reason"] + rec["log_tail"]
    assert checks.problems(rec) == [] and rec["provenance"] == "cuda-measured"
    assert rec["details"]["rank_program"]["process_group"] == "fake"
    assert rec["details"]["rank_program"]["engine"] == ("fsdp1" if "fsdp1" in techniques.split("+") else "fsdp")
    build = rec["details"]["one_rank_build"]
    assert build["reserved_after_release_bytes"] <= build["reserved_bytes"]


def test_fsdp2s_buffers_are_traced_on_its_own_streams(pairs):
    """The allocator replay keeps a pool per stream (bench/estimate/allocator.py), so the trace must say
    which allocations FSDP2 makes on its all-gather copy-in and reduce-scatter streams: the tracker reads
    torch.cpu's current stream, which FSDP2 switches on a cpu device as on a GPU. Without it every
    per-rank reserved figure would fall back to one pool (3.5-13.9% under on the H100)."""
    real, sim = pairs["fsdp+w2"]
    for trace in (sim["_trace"], replay.load(real["details"]["trace_file"])):
        cols = trace["columns"]
        streams = [s for k, s in zip(cols["kind"], cols["stream"]) if k]
        assert set(streams) == {0, 1, 2}
        units, steps = 4 + 1, real["warmup_steps"] + real["steps"]   # tiny-llama's 4 layers and the root
        assert streams.count(2) == units * steps   # one reduce-scatter buffer per unit and step
