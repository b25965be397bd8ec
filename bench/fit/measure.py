"""``ft-membench measure``: the asked recipes run for real on this machine's GPU, beside sim's
prediction of the same cells. Torch-free: the runs happen in worker processes (bench/runner/launch.py).

    ft-membench measure qwen2.5-0.5b --gpu h200 --techniques lora+gc+bf16,bf16

Each recipe is the fit command's question (model, ``--config``, techniques, shape) as two cells of
the matrix loader: the sim cell ``<model>__sim__<techniques>`` (answered from stored records or
simulated now, as ``fit`` does) and the cuda cell ``<model>__<gpu>__<techniques>``, run here: one
warm-up and three steps, capped to ``--gpu``'s memory where the card is larger
(bench/worker/gpumem.py), ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` and NVML's
used memory. What comes out, per recipe:

- predicted and measured: allocated peak, reserved peak (modelled / measured), the verdict (sim's
  fits/tight/oom; the run's ok/oom), each error signed (predicted / measured - 1);
- the cuda record in ``RESULTS/measured/cells/<cell>.json`` (pytest-benchmark's layout, read by
  ``bench.records.results``), its worker log beside it;
- ``RESULTS/measured/corpus-rows.yaml``: the measurement as rows of matrix/published/corpus.yaml
  (source_kind own-run, role held-out, the prediction as its first score): give it back by adding
  them to the corpus.

``--device cpu``: the same command, cells and worker on this machine's CPU (the matrix's cpu cells, real
tensors on small models): what runs in CI without a GPU. Its figures are printed beside the prediction but
are no GPU measurement (sim models a CUDA device), and give no corpus rows.

``--ranks rank0``: a recipe of several GPUs (FSDP2 or FSDP1) runs as its rank 0 alone on this one GPU over
torch's fake process group (bench/worker/onerank.py): the rank's own memory on a real allocator,
without NCCL's buffers (sim's need adds them) or the collectives; the record and the corpus rows say so.

Exit status: 0 every recipe ran (fits or ran out of memory: both are measurements); 1 a run
failed, timed out or was skipped (no CUDA device: the reason says so); 2 bad input.
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

import yaml

from bench.records.stated import need_bytes
from bench.records import atomic
from bench.runner import launch

GIB = 2**30


def run(cuda_cells: dict, predicted: list[dict], gpu: str, results: Path, say=print) -> list[dict]:
    """One comparison per recipe (``compare``), each cuda cell run here and its record written."""
    by_recipe = {"+".join(s["techniques"]): s for s in cuda_cells.values()}
    folder = Path(results) / "measured"
    out = []
    for line in predicted:
        spec = by_recipe[line["technique"]]
        say(f"  measuring {spec['cell']} on this machine's {'CPU' if spec['mode'] == 'cpu' else 'GPU'} ...")
        rec = launch.run_cell(spec, folder / "logs" / f"{spec['cell']}.worker.log")
        atomic.write_json(folder / "cells" / f"{spec['cell']}.json",
                          {"benchmarks": [{"name": f"measure[{spec['cell']}]", "extra_info": rec,
                                           "params": {"cell_spec": spec}}]})
        out.append(compare(line, rec, gpu))
    rows = [r for c in out for r in corpus_rows(c)]
    if rows:
        atomic.write_text(folder / "corpus-rows.yaml", yaml.safe_dump(rows, sort_keys=False, width=120))
    return out


def _err(pred, meas):
    return pred / meas - 1 if isinstance(pred, (int, float)) and isinstance(meas, (int, float)) and meas else None


def compare(line: dict, rec: dict, gpu: str) -> dict:
    """Predicted beside measured for one recipe (see the module docstring)."""
    pred = line.get("record") or {}
    cuda = (rec.get("details") or {}).get("cuda") or {}
    nvml = cuda.get("nvml") or {}
    used = nvml.get("device_used_peak_bytes")
    before = cuda.get("device_used_before_bytes")
    need, _ = need_bytes(pred, gpu) if pred else (None, False)
    measured = {"status": rec.get("status"), "reason": rec.get("reason"),
                "allocated_peak_bytes": rec.get("peak_bytes") if rec.get("status") == "ok" else None,
                "reserved_peak_bytes": rec.get("reserved_peak_bytes") if rec.get("status") == "ok" else None,
                "device_used_peak_bytes": used - before if isinstance(used, int) and isinstance(before, int) else None,
                "device": cuda.get("physical_device"), "provenance": rec.get("provenance")}
    predicted = {"verdict": line.get("verdict"), "allocated_peak_bytes": pred.get("peak_bytes"),
                 "reserved_peak_bytes": pred.get("modelled_reserved_peak_bytes"), "need_bytes": need,
                 "engine": (pred.get("versions") or {}).get("ft_membench_engine"), "provenance": pred.get("provenance")}
    ran = measured["status"] in ("ok", "oom")
    return {"technique": line["technique"], "cell": rec.get("cell"), "gpu": gpu, "record": rec,
            "predicted": predicted, "measured": measured,
            "errors": {k: _err(predicted[k], measured[k]) for k in ("allocated_peak_bytes", "reserved_peak_bytes")},
            "verdict_agrees": (predicted["verdict"] in ("fits", "tight")) == (measured["status"] == "ok") if ran else None}


def corpus_rows(c: dict) -> list[dict]:
    """The measurement as corpus rows (matrix/published/corpus.schema.json), allocated and reserved."""
    rec, m, p = c["record"], c["measured"], c["predicted"]
    if m["status"] != "ok" or rec.get("provenance") != "cuda-measured":   # a CPU run is no GPU measurement: no corpus row
        return []
    rows = []
    program = (rec.get("details") or {}).get("rank_program")
    alone = (f" as its rank 0 of {rec['world_size']} alone over torch's fake process group (collectives not run, "
             "NCCL's buffers not allocated)") if program else ""
    for measure, key in (("allocated", "allocated_peak_bytes"), ("reserved", "reserved_peak_bytes")):
        if m[key] is None:
            continue
        err = c["errors"][key]
        rows.append({
            "id": f"own-{rec['model']}-{rec['gpu']}-{'-'.join(rec['techniques'])}-b{rec['batch_size']}-s{rec['seq_len']}-"
                  f"{measure[:5]}"[:64].lower().replace("_", "-"),
            "role": "held-out", "source": "ft-membench cuda run", "read_at": _dt.date.today().isoformat(),
            "source_kind": "own-run", "model": rec["model"], "model_config": rec["model"],
            "recipe": f"ft-membench measure on {m['device']}{alone}", "techniques": "+".join(rec["techniques"]),
            "batch_size": rec["batch_size"], "seq_len": rec["seq_len"], "gpu": m["device"] or rec["gpu"],
            "gpu_profile": rec["gpu"], "n_gpus": rec.get("world_size") or 1, "measure": measure, "value_kind": "peak",
            "value": round(m[key] / GIB, 3), "unit": "GiB", "value_gib": round(m[key] / GIB, 3), "tokens_per_s": None,
            "outcome": "fits", "unmatched": None,
            "notes": f"torch.cuda.max_memory_{measure} over 1 warm-up and 3 steps; versions {rec.get('versions')}",
            "first_score": {"error_pct": round(err * 100, 2) if err is not None else None,
                            "predicted_gib": round(p[key] / GIB, 3) if p[key] is not None else None,
                            "verdict": p["verdict"], "engine_digest": p["engine"] or "0" * 16,
                            "date": _dt.date.today().isoformat()}})
    return rows


def _gib(n) -> str:
    return f"{n / GIB:8.2f}" if isinstance(n, (int, float)) else "       -"


def _pct(e) -> str:
    return f"{e * 100:+6.1f}%" if isinstance(e, (int, float)) else "      -"


def render(comparisons: list[dict], results: Path) -> str:
    head = (f"{'technique':28s} {'predicted':>9s} {'measured':>9s}  "
            f"{'alloc GiB pred':>14s} {'meas':>8s} {'err':>7s}  {'reserved pred':>13s} {'meas':>8s} {'err':>7s}")
    on_cpu = any((c["record"] or {}).get("mode") == "cpu" for c in comparisons)
    out = ["predicted: sim (stored or simulated now; reserved modelled); measured: " + (
        "this machine's CPU (cpu-measured: real tensors in host memory; sim models a CUDA device's allocations, "
        "kernels and caching allocator, so the two differ by the device as well as by sim's error, and the CPU "
        "has no reserved peak: the run checks the command end to end, it is no GPU measurement)" if on_cpu
        else "this machine's GPU (cuda-measured)"), "", head, "-" * len(head)]
    for c in comparisons:
        p, m, e = c["predicted"], c["measured"], c["errors"]
        out.append(f"{c['technique']:28s} {p['verdict'] or '-':>9s} {m['status'] or '-':>9s}  "
                   f"{_gib(p['allocated_peak_bytes']):>14s} {_gib(m['allocated_peak_bytes'])} "
                   f"{_pct(e['allocated_peak_bytes'])}  {_gib(p['reserved_peak_bytes']):>13s} "
                   f"{_gib(m['reserved_peak_bytes'])} {_pct(e['reserved_peak_bytes'])}")
        if m["status"] not in ("ok", "oom"):
            out.append(f"    not measured: {m['reason']}")
        elif c["verdict_agrees"] is False:
            out.append(f"    the verdicts disagree: sim said {p['verdict']}, the run ended {m['status']}")
    out += ["", f"records: {Path(results) / 'measured' / 'cells'}; " + (
        "no corpus rows from a CPU run" if on_cpu else
        f"corpus rows to give back: {Path(results) / 'measured' / 'corpus-rows.yaml'} (add them to "
        "matrix/published/corpus.yaml)")]
    return "\n".join(out)
