"""Row defects of ``ft-membench fit`` (bench/fit/table.py, bench/cli_format.py), each on the
committed reference records and searches (results/reference/), rendered as the CLI prints them.

    pytest tests/test_cli_rows.py -q
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from bench import cli
from bench.fit import cells, question, table
from bench.estimate import verdicts

REF = Path(__file__).resolve().parent.parent / "results" / "reference"
GiB = 2**30


def rec_of(cell: str) -> dict:
    return json.loads((REF / "cells" / f"{cell}.json").read_text())["benchmarks"][0]["extra_info"]


def fit_row(cell: str, gpu: str) -> dict | None:
    with open(REF / "fits.csv", newline="") as fh:
        return next(({k: (v if v != "" else None) for k, v in r.items()} for r in csv.DictReader(fh)
                     if r["cell"] == cell and r["gpu"] == gpu), None)


def line(cell: str, gpu: str, technique: str | None = None) -> dict:
    rec = rec_of(cell)
    return {"technique": technique or "+".join(rec["techniques"]), "cell": cell, "record": rec, "source": "reference",
            "verdict": rec["verdicts"].get(gpu), "fit": fit_row(cell, gpu), "fits_source": "reference"}


def shown(lines: list[dict], gpu: str) -> str:
    profile = rec_of(lines[0]["cell"])["verdict_gpu_memory_bytes"][gpu]
    return table.render(lines, gpu, {"memory_bytes": profile, "label": gpu}, "model", best=False)


def test_unsearched_rows_print_the_whole_reason_never_cut_mid_word():
    cell = "llama-3.1-8b__sim__lora+bf16+padding-growing"
    out = shown([line(cell, "rtx-4090")], "rtx-4090")
    reason = fit_row(cell, "rtx-4090")["reason"]   # the stored search's own words
    assert reason.startswith("padding-growing batches: ") and len(reason) > 60
    assert " ".join(reason.split()) in " ".join(out.split())   # whole, wherever the row wraps it
    row = next(ln for ln in out.splitlines() if ln.startswith("lora+bf16+padding-growing "))
    assert "distributio " not in row and not row.rstrip().endswith("distributio")


def test_zero_rows_carry_their_per_rank_search():
    """A ZeRO cell is searched per rank in the matrix (bench/estimate/partition.py over interpolated traces)."""
    row = fit_row("qwen2.5-7b__sim__zero3+w8", "h100-80gb")
    assert row["seq_answer"] == "fits" and int(row["max_seq_at_batch1"]) >= 256 and not row["reason"]
    out = shown([line("qwen2.5-7b__sim__zero3+w8", "h100-80gb")], "h100-80gb")
    assert f"{int(row['max_seq_at_batch1'])} tokens" in out and "NCCL's buffers (modelled, in the need)" in out


def test_multi_gpu_speed_is_labelled_per_rank_and_for_the_run():
    out = shown([line("qwen2.5-7b__sim__zero3+w8", "h100-80gb")], "h100-80gb")
    assert "tokens/s per rank" in out and "for the run of 8" in out


def test_vllm_rows_show_their_kv_space_and_vllms_error_whole():
    out = shown([line("llama-3.1-8b__sim__vllm+util0.7", "rtx-4090")], "rtx-4090")
    assert "KV cache 0.80 GiB = 6,528 tokens" in out and "the engine does not start" in out
    assert "vLLM would say: To serve at least one request with the models's max seq len (131072)" in out
    assert "not a training workload (vllm): its memory is planned, not searched" in out   # the fit reason whole


def test_long_technique_names_keep_every_column_in_line():
    long = "lora+bf16+padding-growing+expandable-segments"   # 45 characters
    out = shown([line("llama-3.1-8b__sim__lora+gc", "rtx-4090"),
                 line("llama-3.1-8b__sim__lora+gc", "rtx-4090", technique=long)], "rtx-4090").splitlines()
    head = next(ln for ln in out if ln.startswith("technique "))
    rows = [ln for ln in out if ln.startswith(("lora+gc ", long + " "))]
    assert len(rows) == 2 and {r.index(" oom ") for r in rows} == {head.index(" verdict ")}


def test_an_fp32_recipe_that_does_not_fit_says_its_weights_are_fp32():
    out = shown([line("llama-3.1-8b__sim__lora+gc", "rtx-4090")], "rtx-4090")
    assert "no bf16 in this recipe: weights, gradients and optimizer state are fp32" in out


def test_need_is_the_reports_need_and_says_what_it_includes():
    """The CLI printed the modelled reserved peak, the report that plus the 840 MiB
    reserve: one figure now (bench/estimate/measures.need_bytes), named in the legend."""
    from report import lookup, table
    cell, gpu = "qwen2.5-7b__sim__lora+gc+bf16", "rtx-4090"
    rec = rec_of(cell)
    df = table.to_frame([rec])
    report_need, lower = lookup.need_of(df.iloc[0], gpu)   # on the card: with its cuBLAS workspaces
    assert not lower and report_need == rec["modelled_reserved_peak_bytes"] + verdicts.RESERVE_BYTES + \
        rec["details"]["blas_workspaces"]["by_gpu"][gpu]
    out = shown([line(cell, gpu)], gpu)
    row = next(ln for ln in out.splitlines() if ln.startswith("lora+gc+bf16 "))
    assert f"{report_need / GiB:.2f}" in row.split()
    assert "modelled reserved peak of a step (the allocator's steady state) plus the 840 MiB CUDA reserve" in out
    assert "cuBLAS's workspaces on the card" in out


def test_a_malformed_config_json_is_named_not_an_unknown_model(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",')
    with pytest.raises(question.Usage) as got:
        cells.specs(str(bad), "rtx-4090", ["lora"], None, None)
    assert str(got.value).startswith(f"malformed config.json: {bad}: not valid JSON")
    assert "unknown model" not in str(got.value)


def test_a_sequence_past_the_models_positions_is_refused(tmp_path, capsys):
    """--seq 262144 on a 131072-position model ran without a word. It is refused before anything
    runs, exit 2 (bench/cells/workloads.py, the matrix's own check): a step past the trained context
    is not a workload anyone trains, and llama-3.1's rope_scaling is already counted in its
    max_position_embeddings."""
    assert cli.main(["fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--techniques", "lora+bf16", "--no-search",
                     "--seq", "262144", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "sequence length 262144 is beyond the model's context (max_position_embeddings 131072)" in err


@pytest.mark.slow
def test_a_second_gpu_reuses_the_search_samples_and_answers_the_same(tmp_path, monkeypatch, capsys):
    """Asking about a second GPU simulated the search's sample shapes again (47 s for
    Mistral-7B): their traces do not depend on the GPU. Now they come from the sample cache
    (bench/search/sample_cache.py), and the answer is the one a search without the cache gives."""
    import re
    from bench.search import fits
    from bench.search.simpool import SimPool
    monkeypatch.setenv("FT_MEMBENCH_CACHE", str(tmp_path / "cache"))
    ask = ["fit", "tiny-llama", "--techniques", "lora", "--seq", "256", "--jobs", "1", "--results", str(tmp_path / "r")]
    assert cli.main([*ask, "--gpu", "rtx-4090"]) == 0
    first = re.search(r"searched now \((\d+) sample shapes, (\d+) of them from the sample cache", capsys.readouterr().out)
    assert first and int(first[1]) > 0 and first[2] == "0"
    assert cli.main([*ask, "--gpu", "t4"]) == 0
    second = re.search(r"searched now \((\d+) sample shapes, (\d+) of them from the sample cache", capsys.readouterr().out)
    assert second and second[1] == second[2] == first[1]          # no new simulation
    kept = json.loads((tmp_path / "r" / "fits-cli" / "tiny-llama__sim__lora.b1.s256.t4.json").read_text())
    spec = next(iter(cells.specs("tiny-llama", "t4", ["lora"], 256, None).values()))
    with SimPool(1) as pool:
        fresh = fits.search(dict(spec, verdict_gpus={"t4": spec["verdict_gpus"]["t4"]}), pool.run_cell,
                            simulate_many=pool.run_many)
    fields = ("max_seq_at_batch1", "seq_answer", "max_batch_at_seq", "batch_answer", "peak_at_max_seq_bytes",
              "peak_at_next_seq_bytes", "peak_at_max_batch_bytes", "peak_at_next_batch_bytes")
    assert [{k: r[k] for k in fields} for r in kept["rows"]] == [{k: r[k] for k in fields} for r in fresh["rows"]]
