"""Host memory in the answer and the verdict (bench/estimate/hostmem.py, ``ft-membench fit
--host-mem``): the need per node from a record's own fields, judged only when the size is given."""
import json

import pytest

from bench.estimate import hostmem, loadplan
from bench.fit import guard

GIB = 2**30


def sharded(offloaded=None, paging=None, placement="fsdp-meta-offload", host=72 * GIB, n=2):
    return {"status": "ok", "mode": "sim", "world_size": n,
            "details": {"load_phase": {"placement": placement, "placements": {placement: {"host_bytes": host}}},
                        "offloaded_bytes": offloaded or {}, "paging": paging or {}}}


def test_the_need_is_the_runtime_plus_the_larger_of_the_load_and_the_step():
    rec = sharded({"parameters": 18 * GIB, "optimizer": GIB}, n=2)
    got = hostmem.need(rec, "rtx-4090")
    assert got["parts"] == {"runtime": 2 * hostmem.RUNTIME_BYTES, "load": 72 * GIB, "offloaded": 38 * GIB, "paged": 0}
    assert got["bytes"] == 2 * hostmem.RUNTIME_BYTES + 72 * GIB and got["phase"] == "load"
    step_heavy = hostmem.need(sharded({"optimizer": 50 * GIB}, host=10 * GIB, n=2), "g")
    assert step_heavy["bytes"] == 2 * hostmem.RUNTIME_BYTES + 100 * GIB and step_heavy["phase"] == "step"


def test_paged_optimizer_state_counts_on_the_gpu_it_pages_on():
    rec = sharded(paging={"t4": {"paged_out_bytes": 3 * GIB}}, host=0, n=1)
    assert hostmem.need(rec, "t4")["parts"]["paged"] == 3 * GIB
    assert hostmem.need(rec, "a100-80gb")["parts"]["paged"] == 0


def test_a_failed_or_measured_record_has_no_modelled_need():
    assert hostmem.need(dict(sharded(), status="oom"), "g") is None
    assert hostmem.need(dict(sharded(), mode="cuda"), "g") is None


@pytest.mark.parametrize("text, value", [("128GB", 128 * 10**9), ("96GiB", 96 * GIB), ("64G", 64 * GIB),
                                         ("512MB", 512 * 10**6), ("1.5TiB", int(1.5 * 2**40)), ("4096", 4096)])
def test_sizes_are_read_with_their_units(text, value):
    assert hostmem.parse_bytes(text) == value


@pytest.mark.parametrize("bad", ["", "lots", "-5GB", "0GB", "12 parsecs", "1e300GB"])
def test_a_bad_size_is_refused(bad):
    with pytest.raises(ValueError):
        hostmem.parse_bytes(bad)


def test_the_guard_fails_a_recipe_that_fits_the_gpus_but_not_the_host():
    line = {"technique": "qlora+fsdp-offload+gc+w2", "verdict": "fits", "record": sharded({"parameters": 18 * GIB})}
    assert guard.exit_code([line], "rtx-4090", asked=True) == guard.OK  # shown, not judged
    assert guard.exit_code([line], "rtx-4090", asked=True, host_bytes=64 * 10**9) == guard.NO_FIT
    assert guard.exit_code([line], "rtx-4090", asked=True, host_bytes=128 * GIB) == guard.OK
    said = "\n".join(guard.host_lines([line], "rtx-4090", 64 * 10**9))
    assert "more than the 59.60 GiB given" in said and "at its load" in said
    obj = guard.recipe_object(line, "rtx-4090", 20 * GIB, 64 * 10**9)["host_memory"]
    assert obj["verdict"] == "oom" and obj["given_bytes"] == 64 * 10**9 and obj["need_bytes"] > 64 * 10**9


def test_one_gpu_recipes_with_the_same_need_share_a_line_and_others_keep_theirs():
    one = sharded(host=14 * GIB, n=1, placement="full-per-rank")
    lines = [{"technique": t, "verdict": "fits", "record": one} for t in ("lora", "qlora+gc")]
    lines.append({"technique": "qlora+fsdp-offload+gc+w2", "verdict": "fits", "record": sharded()})
    lines.append({"technique": "bf16", "verdict": "fits", "record": sharded(host=30 * GIB, n=1, placement="full-per-rank")})
    said = guard.host_lines(lines, "rtx-4090", None)[1:]
    assert said[0].startswith("  2 one-GPU recipes (lora, qlora+gc): needs ") and "load 14.00 GiB" in said[0]
    assert said[1].startswith("  bf16: needs ") and said[2].startswith("  qlora+fsdp-offload+gc+w2: needs ")
    assert len(said) == 3


def test_the_cli_refuses_a_bad_host_size_before_anything_runs(capsys):
    from bench.cli import main
    assert main(["fit", "tiny-llama", "--gpu", "rtx-4090", "--host-mem", "lots", "--json"]) == guard.BAD_INPUT
    assert "--host-mem" in capsys.readouterr().err


def test_a_loads_host_need_covers_what_the_h200_run_held_while_loading():
    """The H200's QLoRA load of Llama-3.2-1B (results/reference/cuda-h200) read its fp32 checkpoint
    through host memory: 5.64 GB of host RSS at the load, against about 1.1 GB for a model built on
    the GPU. The need for that load (the checkpoint as stored, read once, and the runtime) is not
    under it, and not far over."""
    from pathlib import Path
    from bench.records import results
    root = Path(__file__).resolve().parents[1] / "results" / "reference" / "cuda-h200"
    rec = results.read(root, only="llama-3.2-1b__h200__qlora+gc").records["llama-3.2-1b__h200__qlora+gc"]
    measured = rec["load_host_peak_rss_bytes"]
    stored = 4 * rec["params_total"]  # the fp32 checkpoint it read: one file, under a shard's 5 GB
    assert loadplan.largest_shard(stored) == stored
    sim = {"status": "ok", "mode": "sim", "world_size": 1,
           "details": {"load_phase": {"checkpoint_bytes": stored, "largest_shard_bytes": loadplan.largest_shard(stored)}}}
    need = hostmem.need(sim, "h200")
    assert need["phase"] == "load" and measured <= need["bytes"] <= 1.4 * measured


def test_70b_fsdp_qlora_with_offload_needs_well_over_100_gb_of_host_memory():
    """Users report 70B FSDP + QLoRA with CPU offload needing well over 100 GB of host RAM;
    axolotl's maintainer, training 70B FSDP + QLoRA on 2 x RTX 4090: "Needs somewhere between
    125GB-250GB system/CPU RAM. it crashed with exitcode -9 @ 125GB RAM" (axolotl PR #1742, comment of
    2024-07-13; without offload our rank does not fit a 4090, so the offload cell is the run). The
    reference record's need says so, from rank 0's read of the bf16 checkpoint and the shards."""
    from pathlib import Path
    from bench.records import results
    root = Path(__file__).resolve().parents[1] / "results" / "reference"
    cell = "llama-3.1-70b__sim__qlora+fsdp-offload+gc+w2"
    need = hostmem.need(results.read(root, only=cell).records[cell], "rtx-4090")
    assert 125 * 10**9 < need["bytes"] <= 250 * 10**9 and need["phase"] == "load"
    assert hostmem.judge(need["bytes"], 128 * 10**9) == "oom"


def one_process(checkpoint: int, shard: int | None = None) -> dict:
    load = {"checkpoint_bytes": checkpoint, **({} if shard is None else {"largest_shard_bytes": shard})}
    return {"status": "ok", "mode": "sim", "world_size": 1, "details": {"load_phase": load}}


def test_one_process_holds_its_largest_shard_and_a_small_checkpoint_whole():
    """A single process loads one shard file at a time (loadplan.largest_shard: min(checkpoint, 5 GB));
    a checkpoint under 5 GB is one file, held whole; a record made before largest_shard_bytes counts
    its whole checkpoint_bytes."""
    big, small = 140 * 10**9, 3 * 10**9
    assert loadplan.largest_shard(big) == loadplan.SHARD_BYTES == 5 * 10**9
    assert loadplan.largest_shard(small) == small
    assert hostmem.need(one_process(big, loadplan.largest_shard(big)), "g")["parts"]["load"] == 5 * 10**9
    assert hostmem.need(one_process(small, loadplan.largest_shard(small)), "g")["parts"]["load"] == small
    assert hostmem.need(one_process(big), "g")["parts"]["load"] == big  # an older record: the whole checkpoint


def test_a_sharded_cell_keeps_its_placements_host_bytes():
    """FSDP's rank 0 and ZeRO's ranks hold the checkpoint whole: the placement's host_bytes, never a shard."""
    rec = sharded(host=131 * GIB, n=2, placement="fsdp-meta")
    rec["details"]["load_phase"].update(checkpoint_bytes=131 * GIB, largest_shard_bytes=5 * 10**9)
    assert hostmem.need(rec, "g")["parts"]["load"] == 131 * GIB


@pytest.mark.parametrize("as_folder", [False, True])
def test_the_checkpoint_is_read_from_a_config_file_or_a_models_folder(tmp_path, as_folder):
    """A model with its own code (trust_remote_code) is given as its folder: the config.json in it."""
    from bench.worker.sim import simulate
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "torch_dtype": "bfloat16"}))
    path = tmp_path if as_folder else tmp_path / "config.json"
    assert simulate.checkpoint({"model_config": str(path)}, 4 * 10**9) == {
        "checkpoint_bytes": 8 * 10**9, "largest_shard_bytes": 5 * 10**9}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))  # no dtype: transformers' fp32
    assert simulate.checkpoint({"model_config": str(path)}, 10**6) == {
        "checkpoint_bytes": 4 * 10**6, "largest_shard_bytes": 4 * 10**6}


def test_70b_qlora_on_one_48gb_card_needs_one_shard_of_host_memory_not_the_checkpoint():
    """Llama-3.1-70B qlora+gc on one RTX A6000 (the QLoRA paper's one 48 GB GPU): the process reads
    its 131 GiB bf16 checkpoint one shard file at a time (the Hub's: 30 files of at most 5 GB), so its
    host need is the runtime and one 5 GB shard, about 6.4 GiB, and ``--host-mem 64GB`` passes it.

    The load_phase is the engine's (``simulate.checkpoint`` of the record's config and
    params_total): a reference record made before largest_shard_bytes lacks the field (the
    reference is rebuilt with this engine), and is completed here as the engine writes it."""
    from pathlib import Path
    from bench.records import results
    from bench.worker.sim import simulate
    root = Path(__file__).resolve().parents[1]
    cell = "llama-3.1-70b__sim__qlora+gc"
    rec = results.read(root / "results" / "reference", only=cell).records[cell]
    load = rec["details"]["load_phase"]
    got = simulate.checkpoint({"model_config": str(root / "matrix" / "models" / "llama-3.1-70b.json")},
                              rec["params_total"])
    assert got["checkpoint_bytes"] == load["checkpoint_bytes"] > 130 * GIB  # the whole bf16 checkpoint
    assert load.get("largest_shard_bytes", got["largest_shard_bytes"]) == got["largest_shard_bytes"] == 5 * 10**9
    load.update(got)
    need = hostmem.need(rec, "rtx-a6000")
    assert need["parts"] == {"runtime": hostmem.RUNTIME_BYTES, "load": 5 * 10**9, "offloaded": 0, "paged": 0}
    assert need["bytes"] == hostmem.RUNTIME_BYTES + 5 * 10**9 and 6.3 * GIB < need["bytes"] < 6.5 * GIB
    assert hostmem.judge(need["bytes"], hostmem.parse_bytes("64GB")) == "fits"
    line = {"technique": "qlora+gc", "verdict": rec["verdicts"]["rtx-a6000"], "record": rec}
    assert guard.exit_code([line], "rtx-a6000", asked=True, host_bytes=hostmem.parse_bytes("64GB")) == guard.OK
    assert "within the 59.60 GiB given" in guard.host_lines([line], "rtx-a6000", hostmem.parse_bytes("64GB"))[1]


def test_each_placement_holds_on_the_host_what_its_readers_hold():
    """zero.Init: rank 0 alone reads the checkpoint, whole (transformers 5.23 maps it to "meta" on the
    others); a rank that loads its own copy (ZeRO-1/2, QLoRA under ZeRO-3, the same-device pitfall) holds
    one shard file at a time; an offloading engine adds the shards it keeps. Qwen2.5-7B's 15.2 GB bf16
    checkpoint at 8 ranks: 15.2 GB for zero.Init, where one copy a rank said 121.9 GB."""
    stored, weights, n = 15_231_233_024, 15_231_233_024, 8
    host = {p: loadplan.per_gpu_bytes(p, weights, 10**9, 4 * 10**8, n, stored)[1] for p in loadplan.PLACEMENTS}
    assert host["zero-init"] == host["fsdp-meta"] == stored
    assert host["zero-init-offload"] == host["fsdp-meta-offload"] == stored + weights
    assert host["full-per-rank"] == host["same-device"] == n * loadplan.SHARD_BYTES


def test_what_no_engine_shards_is_on_every_gpu_at_load():
    """bitsandbytes' quantization state stays whole on every rank; QLoRA under ZeRO-3 loads the whole
    4-bit model onto each GPU first (bench/worker/sim/simulate.py engine_placement)."""
    from bench.worker.sim import simulate
    plain = {p: loadplan.per_gpu_bytes(p, 40 * GIB, GIB, GIB // 2, 4)[0] for p in loadplan.PLACEMENTS}
    quant = {p: loadplan.per_gpu_bytes(p, 40 * GIB, GIB, GIB // 2, 4, replicated=GIB)[0] for p in loadplan.PLACEMENTS}
    assert all(quant[p] - plain[p] == GIB for p in loadplan.PLACEMENTS if p != "same-device")
    assert quant["same-device"] - plain["same-device"] == 4 * GIB
    assert plain["zero-init-offload"] == GIB and plain["full-per-rank"] == 40 * GIB
    knobs = {"adapter": "qlora", "dist": "zero3"}
    assert simulate.engine_placement(knobs) == "full-per-rank"
    assert simulate.engine_placement(dict(knobs, dist="zero3-offload")) == "full-per-rank"
    assert simulate.engine_placement(dict(knobs, adapter="lora")) == "zero-init"
    assert simulate.engine_placement(dict(knobs, adapter="lora", dist="zero3-offload")) == "zero-init-offload"
    assert simulate.engine_placement(dict(knobs, dist="fsdp")) == "fsdp-meta"
    assert simulate.engine_placement(dict(knobs, adapter=None, dist="zero2")) == "full-per-rank"
