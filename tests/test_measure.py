"""``ft-membench measure`` (bench/fit/measure.py): the recipes run for real beside sim's prediction.
The comparison and the corpus rows are plain Python and run everywhere; without a CUDA device
the run is a skipped record that says so, and the command exits 1. On a GPU
(tests/test_cuda.py's marker) the run is real."""
import json

import pytest

from bench.corpus import published
from bench.fit import measure

GIB = 2**30


def measured_record(status="ok", alloc=4 * GIB, reserved=5 * GIB):
    return {"cell": "qwen2.5-0.5b__h200__lora+gc+bf16", "model": "qwen2.5-0.5b", "gpu": "h200",
            "techniques": ["lora", "gc", "bf16"], "batch_size": 1, "seq_len": 2048, "world_size": 1,
            "status": status, "reason": "" if status == "ok" else "CUDA out of memory", "provenance": "cuda-measured",
            "peak_bytes": alloc, "reserved_peak_bytes": reserved, "versions": {"torch": "2.11.0"},
            "details": {"cuda": {"physical_device": "NVIDIA H200", "device_used_before_bytes": GIB,
                                 "nvml": {"device_used_peak_bytes": 7 * GIB}}}}


LINE = {"technique": "lora+gc+bf16", "verdict": "fits",
        "record": {"peak_bytes": int(4.2 * GIB), "modelled_reserved_peak_bytes": int(4.9 * GIB),
                   "details": {"verdict_reserve_bytes": 768 * 2**20}, "versions": {"ft_membench_engine": "abcdef0123456789"},
                   "provenance": "simulated"}}


def test_the_prediction_stands_beside_the_measurement_with_signed_errors():
    c = measure.compare(LINE, measured_record(), "h200")
    assert c["errors"]["allocated_peak_bytes"] == pytest.approx(0.05)
    assert c["errors"]["reserved_peak_bytes"] == pytest.approx(-0.02)
    assert c["measured"]["device_used_peak_bytes"] == 6 * GIB and c["verdict_agrees"] is True
    text = measure.render([c], "results")
    assert "+5.0%" in text and "-2.0%" in text and "corpus-rows.yaml" in text


def test_an_out_of_memory_run_against_a_fits_prediction_is_said():
    c = measure.compare(LINE, measured_record("oom"), "h200")
    assert c["verdict_agrees"] is False and c["errors"]["allocated_peak_bytes"] is None
    assert "the verdicts disagree: sim said fits, the run ended oom" in measure.render([c], "results")
    assert measure.corpus_rows(c) == []


def test_the_measurement_is_given_back_as_held_out_corpus_rows(tmp_path):
    rows = measure.corpus_rows(measure.compare(LINE, measured_record(), "h200"))
    assert [r["measure"] for r in rows] == ["allocated", "reserved"]
    assert all(r["role"] == "held-out" and r["source_kind"] == "own-run" for r in rows)
    assert rows[0]["first_score"]["error_pct"] == pytest.approx(5.0) and rows[0]["value_gib"] == 4.0
    # the rows load as corpus rows: the schema and the cross-field checks hold
    corpus = tmp_path / "corpus.yaml"
    import yaml
    corpus.write_text(yaml.safe_dump({"rows": rows}, sort_keys=False))
    assert [r.id for r in published.load(corpus)] == [r["id"] for r in rows]


def test_without_a_gpu_the_command_says_so_and_exits_1(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    from bench.cli import main
    code = main(["measure", "tiny-llama", "--gpu", "h200", "--techniques", "lora", "--seq", "64",
                 "--results", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["recipes"][0]["measured"]["status"] == "skipped"
    assert "CUDA device" in out["recipes"][0]["measured"]["reason"]
    assert out["recipes"][0]["predicted"]["allocated_peak_bytes"] > 0  # the prediction is there all the same
    assert (tmp_path / "measured" / "cells" / "tiny-llama__h200__lora.json").is_file()


@pytest.mark.slow
def test_on_the_cpu_the_same_command_measures_beside_the_prediction(tmp_path, capsys):
    """``--device cpu``: the same command, cells and worker, run for real on this CPU (the matrix's cpu cell of
    the recipe): its measurement beside sim's prediction, exit 0, and no corpus row (no GPU measurement)."""
    from bench.cli import main
    code = main(["measure", "tiny-llama", "--gpu", "rtx-4090", "--device", "cpu", "--techniques", "lora+gc",
                 "--seq", "64", "--results", str(tmp_path), "--json"])
    out = json.loads(capsys.readouterr().out)
    got = out["recipes"][0]
    assert code == 0 and got["measured"]["status"] == "ok" and got["measured"]["provenance"] == "cpu-measured"
    assert got["cell"] == "tiny-llama__cpu__lora+gc" and got["measured"]["allocated_peak_bytes"] > 0
    assert got["predicted"]["provenance"] == "simulated" and got["predicted"]["allocated_peak_bytes"] > 0
    assert abs(got["errors"]["allocated_peak_bytes"]) < 0.05   # a tiny model: CUDA's rounding moves little
    assert got["measured"]["reserved_peak_bytes"] is None and got["errors"]["reserved_peak_bytes"] is None
    assert (tmp_path / "measured" / "cells" / "tiny-llama__cpu__lora+gc.json").is_file()
    assert not (tmp_path / "measured" / "corpus-rows.yaml").exists()
    text = measure.render([dict(got, record={"mode": "cpu"})], tmp_path)
    assert "no GPU measurement" in text and "no corpus rows from a CPU run" in text


def test_a_bad_question_is_refused_with_a_json_error(capsys):
    from bench.cli import main
    assert main(["measure", "no-such-model", "--gpu", "h200", "--json"]) == 2
    assert "error" in json.loads(capsys.readouterr().out)


def test_one_rank_alone_is_said_in_the_corpus_rows():
    rec = dict(measured_record(), world_size=2, techniques=["fsdp", "lora", "gc", "bf16", "w2"],
               details={**measured_record()["details"], "rank_program": {"process_group": "fake", "rank": 0}})
    rows = measure.corpus_rows(measure.compare(LINE, rec, "h200"))
    assert all("rank 0 of 2 alone" in r["recipe"] and r["n_gpus"] == 2 for r in rows)


def test_rank0_asks_for_fsdp_recipes_of_several_gpus_run_alone():
    from bench.fit import cells
    from bench.fit.question import Usage
    got = cells.specs("tiny-llama", "h200", ["fsdp+lora+w2"], 64, None, mode="cuda", ranks="rank0")
    (spec,) = got.values()
    assert spec["one_rank"] and spec["world_size"] == 2
    with pytest.raises(Usage, match="rank0 runs FSDP cells"):
        cells.specs("tiny-llama", "h200", ["zero3+w2"], 64, None, mode="cuda", ranks="rank0")
