"""The fits search (bench/search/fits.py, bench/estimate/interp.py) and the warm sim worker (bench/search/simpool.py).

Fast tests hold the pieces that need no simulation: the interpolation's exactness checks on
made-up traces, the per-GPU bisection against a scan of the grid. Slow tests simulate a tiny
model for real: the interpolated trace against full simulations at shapes it never sampled,
the search's answers against every grid point simulated, and a warm worker's record against
the same cell run alone in a fresh process.
"""
import json
import random

import pytest

from bench.estimate import interp, verdicts
from bench.runner import launch
from bench.search import fits, fits_csv, shapes
from bench.cells import inputs, matrix
from bench.records import identical
from bench.search.simpool import SimPool

MiB = 2**20
BLAS = verdicts.blas_workspace_bytes({"kind": "cuda"})  # a made-up card's cuBLAS workspaces (non-sm90)


def made_up(sizes: list[int], kinds=None) -> dict:
    n = len(sizes)
    kinds = kinds or [1] * n
    return {"columns": {"kind": kinds, "serial": list(range(n)), "bytes": sizes, "step": [0] * n,
                        "phase": [0] * n, "op": [0] * n, "category": [0] * n},
            "ops": ["(direct)"], "reset_at": 0, "dropped_events": 0, "categories": ["other"], "phases": ["other"]}


def test_interpolation_is_exact_for_a_quadratic_family():
    def sizes(s):
        return [4096, 2 * s * 4096, 8 * s * s + 512 * s, 1000]
    fit = interp.AxisFit.from_traces({s: made_up(sizes(s)) for s in (256, 512, 1024, 2048)}, degree=2)
    assert fit.at(131072)["columns"]["bytes"] == sizes(131072)
    assert fit.at(768)["columns"]["bytes"] == sizes(768)


def test_interpolation_refuses_what_is_not_one_family():
    with pytest.raises(interp.NotExact, match="kind events"):
        interp.AxisFit.from_traces({1: made_up([1, 2]), 2: made_up([1, 2], [1, 0]), 3: made_up([1, 2])}, degree=1)
    # a size that is not a polynomial of the degree (a chunk count that changes with the shape)
    with pytest.raises(interp.NotExact, match="event 0"):
        interp.AxisFit.from_traces({s: made_up([s * (s // 3 + 1)]) for s in (1, 2, 3, 4)}, degree=1)
    with pytest.raises(interp.NotExact, match="need 3"):
        interp.AxisFit.from_traces({1: made_up([1]), 2: made_up([2])}, degree=1)


def test_bisection_per_gpu_matches_a_scan_of_the_grid():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 60)
        peaks, total = [], rng.randint(0, 50)
        for _ in range(n):
            total += rng.randint(0, 30)
            peaks.append(total)
        caps = {f"g{i}": rng.randint(0, peaks[-1] + 40) for i in range(5)}
        calls = []

        def peak_at(k, calls=calls, peaks=peaks):
            calls.append(k)
            return peaks[k - 1]
        got = fits._largest(peak_at, n, caps)
        for gpu, cap in caps.items():
            ok = [k for k in range(1, n + 1) if peaks[k - 1] <= cap]
            want = (None, "none") if not ok else (n, "beyond") if ok[-1] == n else (ok[-1], "fits")
            assert got[gpu] == want, (peaks, cap)
        assert len(set(calls)) == len(calls)  # every peak asked once, shared by the GPUs


def test_not_searched_cells_are_error_rows_with_their_reason():
    cells = matrix.load()
    spec = cells["qwen2.5-7b__sim__vllm+util0.9"]
    doc = fits.search(spec, simulate=None)
    assert {r["seq_answer"] for r in doc["rows"]} == {"error"}
    assert "not a training workload" in doc["rows"][0]["reason"]
    assert len(doc["rows"]) == len(spec["verdict_gpus"])
    # sharded cells are searched, however long their simulation takes: the same cells on every machine
    # (a wall-time rule once left the slowest 70B ZeRO-3 search out of a rebuild under load)
    for cid in ("qwen2.5-7b__sim__zero3+w8", "llama-3.1-70b__sim__qlora+fsdp+gc+w2",
                "llama-3.1-70b__sim__qlora+zero3+gc+w4"):
        assert fits.not_searched(cells[cid]) is None
    import inspect
    assert list(inspect.signature(fits.not_searched).parameters) == ["spec"]  # nothing but the cell decides


def on_tiny_llama(spec: dict) -> dict:
    """``spec`` with tiny-llama's config in place of its model's, digested as the matrix would
    (the worker refuses a config that is not the one the spec digested: bench/cells/inputs.py pin)."""
    path = matrix.DEFAULT_MATRIX.parent / "models" / "tiny-llama.json"
    return dict(spec, model_config=str(path),
                inputs_sha256=dict(spec["inputs_sha256"], model_config=inputs.digest(json.loads(path.read_text()))))


def tiny_spec(seq=512) -> dict:
    spec = on_tiny_llama(matrix.load()["qwen2.5-7b__sim__lora+gc+bf16"])
    spec.update(seq_len=seq)
    # made-up cards sized so that every kind of answer shows on tiny-llama's grid (256..2048)
    spec["verdict_gpus"] = {f"g{m}": {"kind": "cuda", "memory_bytes": verdicts.RESERVE_BYTES + BLAS + m * MiB}
                            for m in (100, 300, 700, 3000)}
    return spec


def test_an_axis_that_cannot_be_searched_leaves_the_other_answered():
    """Batch traces that are not one family (odd batches allocate once more) and a bisection
    past the exact-search budget: the batch answer is what the bisection knew when the budget ran
    out (a bracket, "at least 4, below 8"; before, an error row), the sequence answer
    still stands."""
    from bench.estimate import replay
    spec = tiny_spec()

    def simulate(s, _log=None):
        b, n = s["batch_size"], s["seq_len"]
        sizes = [b * n * 128 * 1024, 2 * MiB] + ([MiB] if b % 2 else [])
        trace = made_up(sizes)
        return {"status": "ok", "_trace": trace,
                "modelled_reserved_peak_bytes": replay.replay(trace, "", points=1)["reserved_peak_bytes"]}
    doc = fits.search(spec, simulate)
    assert set(doc["not_exact"]) == {"batch"}
    for r in doc["rows"]:
        assert r["batch_answer"] in ("fits", "bracketed") and fits_csv.row_problems(r) == []
        assert r["seq_answer"] in ("fits", "beyond", "none") and "seq axis" not in r["reason"]
    bracketed = [r for r in doc["rows"] if r["batch_answer"] == "bracketed"]
    assert bracketed and all(fits_csv.answer_text(r, "batch").startswith(
        f"at least batch {r['max_batch_at_seq']} x 512 tokens, below batch {r['batch_below']}") for r in bracketed)
    assert {r["seq_answer"] for r in doc["rows"]} >= {"fits", "beyond"}


def made_up_simulator(quadratic: bool):
    """A simulator of made-up traces: every size linear in batch x length, plus, with
    ``quadratic``, an L x L attention-score-like event; batch 1 allocates once more (as real
    steps do), so the batch axis is fitted from batches 2, 3 and 4. Returns (simulate, shapes asked)."""
    from bench.estimate import replay
    asked = []

    def simulate(s, _log=None):
        b, n = s["batch_size"], s["seq_len"]
        asked.append((b, n))
        sizes = [b * n * 96 * 1024, 3 * MiB, b * n * n * 64 if quadratic else 4096] + ([MiB] if b == 1 else [])
        trace = made_up(sizes)
        return {"status": "ok", "_trace": trace,
                "modelled_reserved_peak_bytes": replay.replay(trace, "", points=1)["reserved_peak_bytes"]}
    return simulate, asked


@pytest.mark.parametrize("quadratic", [False, True])
def test_the_seq_line_spares_a_simulation_only_where_it_is_the_family(quadratic):
    """A length axis that is a line is fitted through 256 and the study's length and checked at
    the longest sampled length, with one simulation fewer; a quadratic one fails that line and
    gets the fourth length and the quadratic. Either way every answer and its peak evidence is
    the one a replay of the simulated shape itself gives."""
    spec = tiny_spec(seq=512)
    simulate, asked = made_up_simulator(quadratic)
    doc = fits.search(spec, simulate)
    seqs = fits.seq_points(512, fits_csv.seq_limit(spec))
    assert len(seqs) == 4
    seq_asked = sorted(n for b, n in asked if b == 1)
    assert seq_asked == (seqs if quadratic else [seqs[0], 512, seqs[-1]])
    assert len(asked) == (7 if quadratic else 6)   # + batches 2, 3 and 4
    assert doc["not_exact"] == {}
    how = doc["rows"][0]["how"]
    assert f"seq: traces interpolated exactly from simulations at {seqs[:3] if quadratic else [seqs[0], 512]}" in how
    truth, _ = made_up_simulator(quadratic)
    for row in doc["rows"]:
        for axis, key, shape in (("seq", "max_seq_at_batch1", lambda k: (1, k)),
                                 ("batch", "max_batch_at_seq", lambda k: (k, 512))):
            if row[key] is None:
                continue
            b, n = shape(row[key])
            assert row[f"peak_at_max_{axis}_bytes"] == truth(dict(spec, batch_size=b, seq_len=n))[
                "modelled_reserved_peak_bytes"]
    assert {r["seq_answer"] for r in doc["rows"]} >= {"fits"}


@pytest.mark.slow
def test_search_answers_equal_every_grid_point_simulated(tmp_path):
    spec = tiny_spec()
    with SimPool() as pool:
        doc = fits.search(spec, pool.run_cell)
        assert doc["not_exact"] == {}, doc["not_exact"]  # both axes interpolated
        brute = {}
        for s in range(256, fits_csv.seq_limit(spec) + 1, 256):
            rec = pool.run_cell(dict(spec, seq_len=s, batch_size=1))
            brute[("seq", s)] = rec
            if s in (768, 1792):  # shapes the fit never sampled: the interpolated trace is the simulated one
                fit = shapes.Shapes(spec, pool.run_cell)
                fit.axis("seq", [(1, x) for x in fits.seq_points(512, 2048)], degree=2)
                assert fit.fits["seq"].at(s)["columns"] == rec["_trace"]["columns"]
        for b in range(1, 9):
            brute[("batch", b)] = pool.run_cell(dict(spec, batch_size=b))
    rows = {r["gpu"]: r for r in doc["rows"]}
    for gpu in spec["verdict_gpus"]:
        row = rows[gpu]
        ok = [s for (axis, s), rec in brute.items() if axis == "seq" and rec["verdicts"][gpu] == "fits"]
        if not ok:
            assert row["seq_answer"] == "none" and row["max_seq_at_batch1"] is None
            assert fits_csv.answer_text(row, "seq") == "does not fit at batch 1 x 256 tokens"
        else:
            assert row["max_seq_at_batch1"] == max(ok)
            assert row["seq_answer"] == ("beyond" if max(ok) == 2048 else "fits")
            assert row["peak_at_max_seq_bytes"] == brute[("seq", max(ok))]["modelled_reserved_peak_bytes"]
            if max(ok) < 2048:
                assert row["peak_at_next_seq_bytes"] == brute[("seq", max(ok) + 256)]["modelled_reserved_peak_bytes"]
        okb = [b for (axis, b), rec in brute.items() if axis == "batch" and rec["verdicts"][gpu] == "fits"]
        if okb and max(okb) < 8:
            assert row["max_batch_at_seq"] == max(okb)
            assert row["peak_at_next_batch_bytes"] == brute[("batch", max(okb) + 1)]["modelled_reserved_peak_bytes"]
        elif not okb:
            assert row["batch_answer"] == "none"
    assert {r["seq_answer"] for r in doc["rows"]} == {"none", "fits", "beyond"}
    # a card too small for the smallest shape: two simulations say so, no search
    with SimPool() as pool:
        small = fits.search(dict(spec, verdict_gpus={"g100": spec["verdict_gpus"]["g100"]}), pool.run_cell)
    row = small["rows"][0]
    assert len(small["simulated"]) == 2 and row["seq_answer"] == row["batch_answer"] == "none"
    assert row["peak_at_next_seq_bytes"] == brute[("seq", 256)]["modelled_reserved_peak_bytes"]
    assert row["peak_at_next_batch_bytes"] == brute[("batch", 1)]["modelled_reserved_peak_bytes"]
    assert fits_csv.answer_text(row, "batch") == "does not fit at batch 1 x 512 tokens"


@pytest.mark.slow
@pytest.mark.parametrize("technique", ["zero3+w4", "qlora+fsdp-offload+gc+w2"])
def test_a_rank_cell_is_searched_over_its_rank_s_interpolated_traces(technique):
    """A ZeRO/FSDP-offload cell's per-rank figure is its rank's own program (the ZeRO rank that peaks,
    FSDP's rank 0): the search interpolates that rank's traces. At shapes it never simulated, that
    equals the full simulation's per-rank reserved peak to the byte, and every answer's evidence is a
    simulated shape's figure."""
    spec = on_tiny_llama(matrix.load()[("qwen2.5-7b" if "zero" in technique else "llama-3.1-70b") + f"__sim__{technique}"])
    spec.update(seq_len=512)
    with SimPool() as pool:
        own = pool.run_cell(spec)
        caps = sorted({shapes.judged_bytes(own) // MiB * k // 4 for k in (3, 5, 7)})
        spec["verdict_gpus"] = {f"g{m}": {"kind": "cuda", "memory_bytes": verdicts.RESERVE_BYTES + BLAS + m * MiB}
                                for m in caps}
        doc = fits.search(spec, pool.run_cell)
        assert doc["not_exact"] == {}, doc["not_exact"]   # both axes interpolated, not simulated shape by shape
        sampled = {(e["batch"], e["seq"]) for e in doc["simulated"]}
        assert len(sampled) <= 7
        claimed = {}   # every answer's evidence at a shape the search did not simulate: (batch, seq) -> peak
        for row in doc["rows"]:
            for axis, k_key in (("seq", "max_seq_at_batch1"), ("batch", "max_batch_at_seq")):
                for k, peak in ((row[k_key], row[f"peak_at_max_{axis}_bytes"]),
                                ((row[k_key] or 0) + (256 if axis == "seq" else 1), row[f"peak_at_next_{axis}_bytes"])):
                    shape = (1, k) if axis == "seq" else (k, 512)
                    if k and peak is not None and shape not in sampled:
                        assert claimed.setdefault(shape, peak) == peak
        assert claimed   # at least one answer rests on the rule over an interpolated trace
        for (batch, seq), peak in claimed.items():
            rec = pool.run_cell(dict(spec, batch_size=batch, seq_len=seq, cross_check=False))
            assert peak == shapes.judged_bytes(rec), (batch, seq)
    assert {r["seq_answer"] for r in doc["rows"]} & {"fits", "beyond"}


@pytest.mark.slow
def test_warm_worker_record_is_the_fresh_process_record():
    # compile+bf16: a compiled step, whose frees once followed the cyclic collector's timing
    cells = matrix.load()
    with SimPool() as pool:   # one warm server for the three: each cell runs in its own fork of it
        for tech in ("lora+gc+bf16", "qlora+gc", "compile+bf16"):
            spec = on_tiny_llama(cells[f"qwen2.5-7b__sim__{tech}"])
            fresh = launch.run_cell(spec)
            pool.run_cell(tiny_spec())  # another cell first: nothing carries over from one fork to the next
            warm = pool.run_cell(spec)
            warm.pop("_trace")
            assert fresh["status"] == "ok"
            assert identical.compare(fresh, warm) == []


@pytest.mark.parametrize("args, says", [
    (["nosuch", "--gpu", "rtx-4090"], "unknown model 'nosuch'"),
    (["qwen2.5-7b", "--gpu", "nosuch"], "unknown gpu 'nosuch'"),
    (["qwen2.5-7b", "--gpu", "rtx-4090", "--seq", "-5"], "--seq -5: must be between"),
    (["qwen2.5-7b", "--gpu", "rtx-4090", "--batch", "100000000"], "--batch 100000000: must be between"),
    (["qwen2.5-7b", "--gpu", "rtx-4090", "--techniques", "lora+bogus"], "unknown technique 'bogus'"),
])
def test_fit_command_bad_input_is_one_line_and_exit_2(args, says):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "bench.cli", "fit", *args], capture_output=True, text=True,
                         cwd=launch.ROOT)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ft-membench: ") and says in lines[0], out.stderr
    assert out.stdout == ""


def test_collect_writes_one_row_per_sim_cell_and_gpu(tmp_path):
    import csv
    import json
    cells = matrix.load()
    spec = cells["qwen2.5-7b__sim__vllm+util0.9"]  # not searched: its rows carry the reason
    doc = fits.search(spec, simulate=None)
    doc.update(cell=spec["cell"], inputs_sha256=spec["inputs_sha256"])
    (tmp_path / "one.json").write_text(json.dumps(doc))
    out = tmp_path / "fits.csv"
    n = fits_csv.collect([tmp_path / "one.json"], cells, out)
    rows = list(csv.DictReader(out.open()))
    assert n == len(rows) == sum(len(s["verdict_gpus"]) for s in cells.values() if s["mode"] == "sim")
    assert list(rows[0]) == list(fits_csv.COLUMNS)
    mine = [r for r in rows if r["cell"] == spec["cell"]]
    assert mine and all("not a training workload" in r["reason"] for r in mine)
    others = [r for r in rows if r["cell"] != spec["cell"]]
    assert all(r["reason"] == "no fits file" and r["seq_answer"] == "error" for r in others)
    assert all(r["provenance"] == "simulated" for r in rows)


def test_fit_command_answers_from_a_fits_table_of_the_same_inputs(tmp_path):
    import subprocess
    import sys
    spec = matrix.load()["qwen2.5-7b__sim__lora+gc+bf16"]
    vals = {"max_seq_at_batch1": 3840, "seq_answer": "fits", "max_batch_at_seq": None, "batch_answer": "none"}
    doc = {"cell": spec["cell"], "inputs_sha256": spec["inputs_sha256"], "rows": [fits_csv.row(spec, "rtx-4090", vals)]}
    (tmp_path / "one.json").write_text(__import__("json").dumps(doc))
    fits_csv.collect([tmp_path / "one.json"], {spec["cell"]: spec}, tmp_path / "fits.csv")
    # a results folder's fits.csv beside the records it was searched from: their versions are its
    # versions (bench/records/reuse.py), as in a workflow's results/
    # (the reference's record, as made by this code: its engine digest is this one)
    from bench.records import reuse
    kept = __import__("json").loads((launch.ROOT / "results/reference/cells" / f"{spec['cell']}.json").read_text())
    kept["benchmarks"][0]["extra_info"]["versions"] = reuse.versions()
    (tmp_path / "cells").mkdir()
    from bench.records import seal   # written as the harness writes it: sealed (bench/records/seal.py)
    (tmp_path / "cells" / f"{spec['cell']}.json").write_text(__import__("json").dumps(seal.sealed(kept)))
    cmd = [sys.executable, "-m", "bench.cli", "fit", "qwen2.5-7b", "--gpu", "rtx-4090", "--techniques",
           "lora+gc+bf16", "--no-search", "--results", str(tmp_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=launch.ROOT, check=True).stdout
    assert "3840 tokens" in out and "does not fit at batch 1 x 2048 tokens" in out
    assert f"fits {tmp_path}/fits.csv" in out
    # beside it, the weights-and-Adam estimators on the same model, from the record's details.peers
    peers = {p["source"]: p["bytes"] for p in __import__("json").loads(
        (launch.ROOT / "results/reference/cells" / f"{spec['cell']}.json").read_text()
    )["benchmarks"][0]["extra_info"]["details"]["peers"]}
    assert f"accelerate estimate-memory (float32 row): Training using Adam: " \
           f"{peers['accelerate estimate-memory (float32 row)'] / 2**30:.2f} GiB" in out
    # another shape is another question: the same table does not answer it
    out = subprocess.run([*cmd, "--seq", "1024"], capture_output=True, text=True, cwd=launch.ROOT, check=True).stdout
    assert f"fits {tmp_path}/fits.csv" not in out


@pytest.mark.slow
def test_a_killed_warm_server_is_replaced_and_the_answers_go_on():
    """A killed warm server is replaced; the answers computed so far are kept (fit used to crash, losing them)."""
    import os
    import signal
    spec = tiny_spec(seq=256)
    with SimPool() as pool:
        first = pool.run_cell(spec)
        os.killpg(pool._all[0].proc.pid, signal.SIGKILL)
        second = pool.run_cell(spec)
    assert first["status"] == second["status"] == "ok"
    assert first["peak_bytes"] == second["peak_bytes"]


def test_fit_answers_from_a_study_record_for_a_gpu_the_study_judged(tmp_path):
    """The question is asked against every GPU profile; the 70B study judged five. For one of
    them its record and search answer (inputs digested as that study's: bench/fit/stored.py's judged_on), for a
    GPU the study never judged they do not."""
    from bench.fit import cells, stored
    from bench.records import checks, reuse
    spec = next(iter(cells.specs("llama-3.1-70b", "rtx-a6000", ["qlora+gc"], None, None).values()))
    path = matrix.DEFAULT_MATRIX.parent.parent / "results" / "reference" / "cells" / "llama-3.1-70b__sim__qlora+gc.json"
    rec, where = stored.stored_record(spec, [path], reuse.versions(), "rtx-a6000")
    assert where == str(path) and rec["verdicts"]["rtx-a6000"] == "fits"
    assert stored.stored_record(spec, [path], reuse.versions(), "t4") == (None, None)
    assert checks.gate(rec, spec)  # against the question's own GPUs the record is another experiment
    doc, source = stored.stored_fits(stored.judged_on(spec, rec, "rtx-a6000"), tmp_path, "rtx-a6000")
    assert source.endswith("reference/fits.csv") and doc["rows"][0]["max_seq_at_batch1"] is not None


def test_fit_bounds_are_the_matrix_bounds_and_gpu_names_any_case():
    """'--seq 1' is taken, as the usage's 'between 1 and ...' says; 'RTX-4090' names a GPU in any case; --help
    lists the GPUs."""
    import subprocess
    import sys
    from bench.fit import cells, question
    with pytest.raises(question.Usage, match="--seq 1: must be between 2 and"):
        cells.specs("qwen2.5-7b", "rtx-4090", ["lora"], 1, None)
    assert "rtx-4090" in cells.cuda_profiles() and "cpu" not in cells.cuda_profiles()
    out = subprocess.run([sys.executable, "-m", "bench.cli", "fit", "--help"], capture_output=True, text=True,
                         cwd=launch.ROOT)
    assert "rtx-4090" in out.stdout and "any case" in out.stdout


def test_fit_columns_hold_long_names_and_reasons():
    """A technique longer than 28 characters never shifts the columns after it, and a long reason is never cut
    mid-word in its column: it is printed whole under the row."""
    from bench.fit import table
    reason = "not searched: zero3 at world size 8: the verdict is an analytic per-rank partitioning"
    assert table.fitted(reason, 47).rstrip().endswith("(below)") and len(table.fitted(reason, 47)) == 47
    assert table.fitted("3840 tokens", 47) == f"{'3840 tokens':<47}"


def test_a_search_that_ran_out_of_budget_reports_its_bracket():
    """A bracket found is the answer: a search that simulated 11264 tokens (fits) and 12288 (does not) and then
    ran out of budget says "at least 11264, below 12288", never "not searched"."""
    peaks = {k: k * 10 for k in range(1, 129)}  # monotone; cap 445 -> the largest that fits is 44
    budget = {"left": 5}

    def peak_at(k):
        if k not in asked:
            if budget["left"] == 0:
                raise shapes.SearchError("seq axis: interpolation not exact (x) and an exact search needs more than 5")
            budget["left"] -= 1
            asked.append(k)
        return peaks[k]
    asked = []
    got = fits._largest(peak_at, 128, {"g": 445})
    lo, answer, hi = got["g"]
    assert answer == "bracketed" and lo <= 44 < hi and peaks[lo] <= 445 < peaks[hi]
    spec = matrix.load()["qwen2.5-7b__sim__lora"]
    row = fits_csv.row(spec, "rtx-4090", {"seq_answer": "bracketed", "max_seq_at_batch1": 11264,
                                          "seq_below": 12288, "batch_answer": "fits", "max_batch_at_seq": 2})
    assert fits_csv.answer_text(row, "seq").startswith("at least 11264 tokens, below 12288 tokens")
    assert fits_csv.row_problems(row) == []


def test_progress_lines_of_an_exact_search_say_at_most():
    """Progress of an exact search says "of at most n", never "n/n ... the last one" followed by "n+1/n+1"."""
    from bench.search.progress import Pace
    said = []
    pace = Pace(7, said.append, "x search")
    for i in range(7):
        pace.done(f"s{i}", 1.0)
    pace.plan(pace.count + 6, at_most=True)
    pace.done("s7", 1.0)
    assert "simulation 7/7" in said[6] and "the last one planned" in said[6]  # a plan, not a promise
    assert "simulation 8 of at most 13" in said[7] and "the last one" not in said[7]
