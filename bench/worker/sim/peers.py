"""Peers: what DeepSpeed's and accelerate's own estimators say about a cell's model, beside ours.

    compare(spec, ours) -> list of {"source", "what", "bytes", "ours_bytes", "difference"}

Both peers run here, in the sim worker's process, on the true parameter counts of the cell's
architecture (built on the meta device from matrix/models/<model>.json):

- DeepSpeed ``estimate_zero2_model_states_mem_needs_all_cold`` and
  ``estimate_zero3_model_states_mem_needs_all_cold`` (the ``*_all_live`` variants dedupe
  parameters by data pointer and miscount meta models). They print a table; the per-GPU bytes
  of the no-offload row come from the function they call (``estimate_zero*_model_states_mem_needs``)
  and are checked against the printed figure.
- accelerate's ``estimate-memory``: offline only from Python, with
  ``accelerate.commands.estimate.verify_on_hub`` replaced (it asks the hub first); its own
  ``gather_data`` builds the model and computes the "Training using Adam" column.

``ours`` is the cell's model states per GPU (parameters + gradients + optimizer state at the
optimizer step's peak), plus its activations and temporaries at the peak, which no peer
estimates; each row's ``difference`` says where the gap comes from.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
import types
from pathlib import Path

GiB = 2**30


def counts(model_config: str) -> dict:
    """True parameter counts of the architecture: total (shared once), largest module's own
    parameters (DeepSpeed's "largest layer") and the output head's."""
    import torch
    import transformers
    from bench.worker.models import load_config
    config = load_config(model_config, "eager")  # counts do not depend on attention; every model has eager
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest, name = max((sum(p.numel() for p in m.parameters(recurse=False)), n) for n, m in model.named_modules())
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is model.get_input_embeddings().weight
    return {"total": total, "largest_layer": largest, "largest_layer_name": name,
            "head": 0 if head is None or tied else head.weight.numel()}


def deepspeed_figures(c: dict, n: int) -> dict:
    """DeepSpeed's ZeRO-2 and ZeRO-3 per-GPU model-state bytes for the counts ``c`` on ``n`` GPUs,
    each checked against the figure its ``*_all_cold`` estimator prints."""
    from deepspeed.runtime.zero.stage3 import (estimate_zero3_model_states_mem_needs,
                                               estimate_zero3_model_states_mem_needs_all_cold)
    from deepspeed.runtime.zero.stage_1_and_2 import (estimate_zero2_model_states_mem_needs,
                                                      estimate_zero2_model_states_mem_needs_all_cold)
    total, largest = c["total"], c["largest_layer"]
    z2 = estimate_zero2_model_states_mem_needs(total, num_gpus_per_node=n, cpu_offload=False)[1]
    z3 = estimate_zero3_model_states_mem_needs(total, largest, num_gpus_per_node=n, cpu_offload=False,
                                               cpu_offload_params=False, zero_init=True)[1]
    printed2 = _printed_gpu_gib(estimate_zero2_model_states_mem_needs_all_cold, (total,), n, "offload_optimizer=none")
    printed3 = _printed_gpu_gib(estimate_zero3_model_states_mem_needs_all_cold, (total, largest), n,
                                "offload_param=none, offload_optimizer=none, zero_init=1")
    for est, printed in ((z2, printed2), (z3, printed3)):
        if printed is None or abs(est / GiB - printed) > 0.006:
            raise RuntimeError(f"DeepSpeed printed {printed} GB, its function gave {est / GiB:.3f} GiB")
    return {"z2": z2, "z3": z3, "printed2": printed2, "printed3": printed3}


def deepspeed_rows(c: dict, n: int, ours: dict, figures: dict) -> list[dict]:
    total, largest = c["total"], c["largest_layer"]
    z2, z3, printed2, printed3 = figures["z2"], figures["z3"], figures["printed2"], figures["printed3"]
    mixed = (f"DeepSpeed assumes 16-bit weights with fp32 master weights, fp32 gradient copies and "
             f"fp32 Adam moments: 2 B/param on every GPU plus 18 B/param / {n} GPU(s)")
    return [
        _row("deepspeed estimate_zero2_model_states_mem_needs_all_cold",
             f"ZeRO-2 model states per GPU, {n} GPU(s), no offload ({printed2:.2f} GB printed)", z2, ours,
             f"{mixed} = {z2 / total:.2f} B/param over {total / 1e9:.2f}B params"),
        _row("deepspeed estimate_zero3_model_states_mem_needs_all_cold",
             f"ZeRO-3 model states per GPU, {n} GPU(s), no offload, zero_init ({printed3:.2f} GB printed)", z3, ours,
             f"DeepSpeed counts 18 B/param / {n} GPU(s) plus 4 B x the largest layer ({largest / 1e6:.0f}M "
             f"params, {c['largest_layer_name']}) gathered = {z3 / total:.2f} B/param"),
    ]


def _printed_gpu_gib(fn, args, n: int, options: str):
    """Run a DeepSpeed ``*_all_cold`` estimator and read its per-GPU figure for ``options``."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(*args, num_gpus_per_node=n)
    for line in buf.getvalue().splitlines():
        if line.strip().endswith(options):
            return float(re.findall(r"([0-9.]+)GB", line)[1])
    return None


def accelerate_data(spec: dict) -> list:
    """accelerate's ``gather_data`` rows for the cell's architecture (float32 and float16), offline."""
    import accelerate.commands.estimate as est
    raw = {k: v for k, v in json.loads(Path(spec["model_config"]).read_text()).items() if not k.startswith("_")}
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text(json.dumps(raw))
        offline = types.SimpleNamespace(config={}, library_name="transformers")
        saved, est.verify_on_hub = est.verify_on_hub, lambda repo, token=None: offline
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                data = est.gather_data(types.SimpleNamespace(
                    model_name=tmp, library_name="transformers", dtypes=["float32", "float16"],
                    trust_remote_code=False))
        finally:
            est.verify_on_hub = saved
    return [list(row) for row in data]


def accelerate_rows(c: dict, ours: dict, data: list) -> list[dict]:
    rows = []
    for dtype, _largest, size, training in data:
        adam = max(training.values())
        base = int(size) // (4 if dtype == "float32" else 2)
        rule = ("4 x the fp32 weights (weights, gradients, two Adam moments: 16 B/param)" if dtype == "float32"
                else "the largest single component, not a sum (the fp32 Adam moments: 8 B/param)")
        rows.append(_row(f"accelerate estimate-memory ({dtype} row)", "Training using Adam", int(adam), ours,
                         f"accelerate builds the model without its output head ({c['head'] / 1e6:.0f}M params "
                         f"fewer: {base / 1e9:.2f}B) and reports {rule}"))
    return rows


def _row(source: str, what: str, nbytes: int, ours: dict, why: str) -> dict:
    return {"source": source, "what": what, "bytes": int(nbytes), "ours_bytes": int(ours["model_states"]),
            "difference": f"{why}. {ours['explain']}"}


def ours_summary(spec: dict, states: dict, peak_breakdown: dict, peak_phase: str, params_total: int,
                 params_trainable: int) -> dict:
    """Our model-state bytes and the sentence that says what they hold and what we add."""
    ms = states["parameters"] + states["gradients"] + states["optimizer"]
    trains = "every parameter trains" if params_trainable == params_total else \
        f"{params_trainable / 1e6:.1f}M of {params_total / 1e9:.2f}B params train ({'+'.join(spec['techniques'])})"
    explain = (f"Ours: {ms / GiB:.2f} GiB of model states = weights {states['parameters'] / GiB:.2f} + gradients "
               f"{states['gradients'] / GiB:.2f} + optimizer {states['optimizer'] / GiB:.2f} GiB per GPU "
               f"({trains}). No peer counts what ours adds at its peak (in the {peak_phase} phase): "
               f"activations {peak_breakdown['activations'] / GiB:.2f} GiB, temporaries "
               f"{peak_breakdown['temporaries'] / GiB:.2f} GiB (in the optimizer step: the foreach update's "
               f"intermediates; in backward: gradients of activations), other {peak_breakdown['other'] / GiB:.2f} GiB")
    return {"model_states": ms, "explain": explain}


def gather(spec: dict) -> dict:
    """What the peers say of the cell's architecture, before any comparison with ours: it reads
    the model config and world size only, so it may run while the step is simulated
    (bench/worker/sim/simulate.py ``run``)."""
    c = counts(spec["model_config"])
    return {"counts": c, "deepspeed": deepspeed_figures(c, spec["world_size"]), "accelerate": accelerate_data(spec)}


def compare(spec: dict, ours: dict, gathered: dict | None = None) -> list[dict]:
    g = gathered or gather(spec)
    c = g["counts"]
    return deepspeed_rows(c, spec["world_size"], ours, g["deepspeed"]) + accelerate_rows(c, ours, g["accelerate"])
