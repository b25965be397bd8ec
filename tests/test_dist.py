"""World sizes above 1: torchrun launch, per-rank records merged into one, failures as records.

    pytest tests/test_dist.py -q          # the real runs are marked slow (about 1.5 min)

The merge tests use hand-made rank records (bench/runner/ranks.py is plain Python); the slow tests
run real ZeRO-3 and FSDP2 cells at world sizes 1 and 2 on CPU (gloo, 127.0.0.1).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.records import checks, record
from bench.runner import launch, ranks
from bench.cells import matrix

TINY = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"]}


def load(matrix_file, **studies):
    return matrix.load(matrix_file(studies))


# -- launch: what gets started ---------------------------------------------------------------
def test_torchrun_only_for_multirank_cpu_and_cuda_cells(matrix_file):
    cells = load(matrix_file, c={**TINY, "techniques": ["zero3", "zero3+w2"]},
                 s={"mode": "sim", "models": ["tiny-llama"], "gpus": ["h100-80gb"], "techniques": ["zero3+w4"]})
    spec_p, out_p = Path("spec.json"), Path("rec.json")
    w2 = launch.worker_command(cells["tiny-llama__cpu__zero3+w2"], spec_p, out_p)
    assert w2[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert w2[w2.index("--nproc_per_node") + 1] == "2"
    assert w2[w2.index("--master_addr") + 1] == "127.0.0.1"
    assert 0 < int(w2[w2.index("--master_port") + 1]) < 65536
    assert w2[-4:] == ["-m", "bench.worker", "spec.json", "rec.json"]
    plain = [sys.executable, "-m", "bench.worker", "spec.json", "rec.json"]
    assert launch.worker_command(cells["tiny-llama__cpu__zero3"], spec_p, out_p) == plain
    assert launch.worker_command(cells["tiny-llama__sim__zero3+w4"], spec_p, out_p) == plain  # sim: one process


def test_worker_alone_refuses_a_world_size_it_was_not_given(matrix_file, tmp_path):
    spec = load(matrix_file, c={**TINY, "techniques": ["zero3+w2"]})["tiny-llama__cpu__zero3+w2"]
    spec_p, out_p = tmp_path / "spec.json", tmp_path / "rec.json"
    spec_p.write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    subprocess.run([sys.executable, "-m", "bench.worker", str(spec_p), str(out_p)], env=env,
                   capture_output=True, check=True)
    rec = json.loads(out_p.read_text())
    assert rec["status"] == "error" and "bench.runner.launch" in rec["reason"]


# -- merge: one record from N ------------------------------------------------------------------
def rank_record(spec, rank, peak, tokens=100, seconds=2.0, status="ok"):
    rec = record.blank(spec)
    third = peak // 3
    rec.update(status=status, reason="" if status == "ok" else f"{status} here",
               peak_bytes=peak, step_s_median=seconds / 2, tokens_per_s=tokens / seconds,
               host_peak_rss_bytes=1000 + rank, load_host_peak_rss_bytes=500, wall_s=10.0 + rank,
               breakdown_bytes={"parameters": third, "gradients": third, "optimizer": peak - 2 * third,
                                "activations": 0, "temporaries": 0, "other": 0},
               phase_peak_bytes=dict.fromkeys(record.PHASES, peak), params_total=3000, params_trainable=3000,
               details={"rank": rank, "timed_tokens": tokens, "timed_s": seconds,
                        "optimizer_state_dtypes": ["float32"], "final_loss": 10.0, "losses": [10.0],
                        "timing_load": {"own_cores": 0.9, "other_cores": 1.0, "contended_above_cores": 0.25}})
    return rec


@pytest.fixture
def w2_spec(matrix_file):
    return load(matrix_file, c={**TINY, "techniques": ["zero3+w2"]})["tiny-llama__cpu__zero3+w2"]


def test_merge_takes_the_largest_rank_and_adds_up_tokens(w2_spec):
    recs = [rank_record(w2_spec, 0, 900, tokens=100, seconds=2.0),
            rank_record(w2_spec, 1, 1200, tokens=120, seconds=2.5)]
    rec = ranks.merge(w2_spec, recs)
    assert checks.problems(rec) == []
    assert rec["status"] == "ok" and rec["peak_bytes"] == 1200 and rec["details"]["peak_rank"] == 1
    assert rec["breakdown_bytes"] == recs[1]["breakdown_bytes"]
    assert rec["tokens_per_s"] == pytest.approx(220 / 2.5)
    assert rec["step_s_median"] == 1.25 and rec["host_peak_rss_bytes"] == 1001
    assert [(r["rank"], r["peak_bytes"], r["status"]) for r in rec["details"]["ranks"]] == [(0, 900, "ok"), (1, 1200, "ok")]
    assert rec["details"]["ranks"][0]["breakdown_bytes"] == recs[0]["breakdown_bytes"]


def test_merge_without_timed_tokens_leaves_throughput_unmeasured(w2_spec):
    recs = [rank_record(w2_spec, k, 900) for k in range(2)]
    del recs[1]["details"]["timed_tokens"]
    assert ranks.merge(w2_spec, recs)["tokens_per_s"] is None


def test_one_rank_out_of_memory_makes_the_cell_oom(w2_spec):
    recs = [rank_record(w2_spec, 0, 900, status="error"), rank_record(w2_spec, 1, 900, status="oom")]
    rec = ranks.merge(w2_spec, recs)
    assert rec["status"] == "oom" and rec["reason"].startswith("rank 1:")
    assert [r["status"] for r in rec["details"]["ranks"]] == ["error", "oom"]
    assert checks.problems(rec) == []


def test_a_rank_without_record_makes_the_cell_an_error(w2_spec):
    rec = ranks.merge(w2_spec, [rank_record(w2_spec, 0, 900), None], "worker killed by SIGKILL", "last lines")
    assert rec["status"] == "error" and "[1]" in rec["reason"] and "SIGKILL" in rec["reason"]
    assert rec["log_tail"] == "last lines" and rec["details"]["ranks"][1]["status"] is None
    assert checks.problems(rec) == []


# -- real runs on CPU ---------------------------------------------------------------------------
@pytest.mark.slow
def test_world_size_2_shards_model_states(matrix_file, tmp_path):
    names = ("zero3", "zero3+w2", "fsdp", "fsdp+w2")
    cells = load(matrix_file, c={**TINY, "techniques": list(names)})
    from tests.helpers import launch_all
    recs = dict(zip(names, launch_all([cells[f"tiny-llama__cpu__{name}"] for name in names], tmp_path)))
    for name, rec in recs.items():
        assert rec["status"] == "ok", f"{name}: {rec['reason']}\n{rec['log_tail']}"
        assert checks.problems(rec) == []
    for one, two in (("zero3", "zero3+w2"), ("fsdp", "fsdp+w2")):
        rec, single = recs[two], recs[one]["breakdown_bytes"]
        per_rank = rec["details"]["ranks"]
        assert [r["rank"] for r in per_rank] == [0, 1] and all(r["status"] == "ok" for r in per_rank)
        assert rec["peak_bytes"] == max(r["peak_bytes"] for r in per_rank) < recs[one]["peak_bytes"]
        assert rec["tokens_per_s"] == pytest.approx(sum(r["timed_tokens"] for r in per_rank)
                                                    / max(r["timed_s"] for r in per_rank))
        for r in per_rank:  # each rank keeps half the optimizer state and gradients of one process
            assert r["breakdown_bytes"]["optimizer"] == pytest.approx(single["optimizer"] / 2, rel=0.02), two
            # gradients at most half: at w1 ZeRO-3's peak falls in the optimizer step, where
            # DeepSpeed holds an fp32 copy of the gradient partition beside its flat buffer
            assert r["breakdown_bytes"]["gradients"] <= single["gradients"] / 2 * 1.05, two


@pytest.mark.slow
def test_zero_ranks_run_past_a_stale_extension_lock_and_build_nothing(matrix_file, tmp_path, monkeypatch):
    """A process killed while holding torch's extension lock leaves it behind; DeepSpeed's CPU
    shared-memory op (inference only) is not loaded, so no ZeRO cell waits on that lock."""
    ext = tmp_path / "torch_extensions"
    stale = ext / "py_cpu" / "deepspeed_shm_comm" / "lock"
    stale.parent.mkdir(parents=True)
    stale.touch()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(stale.parent.parent))
    cell = {**load(matrix_file, c={**TINY, "techniques": ["zero2+w2"]})["tiny-llama__cpu__zero2+w2"], "timeout_s": 120}
    rec = launch.run_cell(cell, tmp_path / "zero2.log")
    assert rec["status"] == "ok", f"{rec['reason']}\n{rec['log_tail']}"
    assert sorted(p.name for p in stale.parent.iterdir()) == ["lock"]  # nothing built beside it
    assert "built successfully" not in (tmp_path / "zero2.log").read_text()


@pytest.mark.slow
def test_ranks_out_of_memory_give_one_oom_record(matrix_file, tmp_path):
    gpus = {"tiny-cpu": {"kind": "cpu", "memory_bytes": 20_000_000}}  # < the model's 78 MB of fp32 weights
    cells = matrix.load(matrix_file({"c": {**TINY, "gpus": ["tiny-cpu"], "techniques": ["zero3+w2"]}}, gpus=gpus))
    rec = launch.run_cell(cells["tiny-llama__tiny-cpu__zero3+w2"], tmp_path / "w.log")
    assert rec["status"] == "oom", rec["reason"]
    assert rec["world_size"] == 2 and len(rec["details"]["ranks"]) == 2
    assert "oom" in [r["status"] for r in rec["details"]["ranks"]]
    assert checks.problems(rec) == []


def processes_mentioning(text: str) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and text.encode() in (proc / "cmdline").read_bytes():
                out.append(int(proc.name))
        except OSError:
            pass
    return out


@pytest.mark.slow
def test_a_cell_over_its_time_limit_leaves_a_record_and_no_rank_behind(matrix_file, tmp_path):
    gpus = {"hang-cpu": {"kind": "cpu", "memory_bytes": 2**34}}  # a name only this test's processes carry
    # 500 steps cannot finish in 10 s on any machine, so the limit, not luck, ends the cell
    studies = {"c": {**TINY, "gpus": ["hang-cpu"], "techniques": ["zero3+w2"], "timeout_s": 5, "steps": 500}}
    spec = matrix.load(matrix_file(studies, gpus=gpus))["tiny-llama__hang-cpu__zero3+w2"]
    assert spec["timeout_s"] == 10  # 5 s x world size 2: ranks are running, the step is not done
    rec = launch.run_cell(spec, tmp_path / "w.log")
    assert rec["status"] == "timeout" and "10 s" in rec["reason"]
    assert len(rec["details"]["ranks"]) == 2
    assert checks.problems(rec) == []
    assert processes_mentioning("hang-cpu") == []
