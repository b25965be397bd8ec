"""The pipeline's stages side by side: fine-tune, inference (generate), scoring (vllm). Never
imports torch.

``section(df)`` (drawn once, after the modes) has two tables:

- generation: each generate cell's peak by category, prefill against decode, KV bytes per
  token and tokens/s (cpu-measured, simulated);
- stages per GPU (simulated): for each model and GPU profile, the fine-tune recipe's need
  (``RECIPE``: simulated peak + the verdict's reserve), inference's need, and for every
  gpu_memory_utilization of the study's vllm cells whether the scoring engine starts alone,
  beside the inference process, and beside the training process that has not released its
  memory (vLLM's start-up rules again, bench/cells/workloads.plan, with that process's need as
  co-resident memory), with vLLM's own message when it does not.

``train_rows(df)``: the rows of the training workload, which the per-mode sections (summary,
recommendations, charts) are about.
"""
from __future__ import annotations

import pandas as pd

from bench.estimate import verdicts
from bench.estimate.measures import blas_bytes
from bench.cells import workloads
from report.fmt import DASH, details, fmt_count, fmt_gib, jcol, knobs, missing, row_gpus

RECIPE = "lora+gc+bf16"   # the fine-tune stage: the recipe the pipeline study trains with


def workload(row) -> str:
    """The row's workload, from the knobs its record carries (a row without them: train)."""
    return knobs(row).get("workload") or "train"


def of_workload(df: pd.DataFrame, name: str) -> pd.Series:
    return df.apply(lambda r: workload(r) == name, axis=1).astype(bool) if len(df) else pd.Series([], dtype=bool)


def train_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[of_workload(df, "train")] if len(df) else df


def generation_rows(df: pd.DataFrame) -> list[dict]:
    rows = []
    gen = df[(df["status"] == "ok") & of_workload(df, "generate")] if len(df) else df
    for _, r in gen.iterrows():
        rows.append({"model": r["model"], "technique": r["technique"], "mode": r["mode"], "provenance": r["provenance"],
                     "shape": f"{r['batch_size']} × ({r['seq_len']} + {details(r).get('new_tokens') or DASH})",
                     "peak": fmt_gib(r["peak_bytes"]), "weights": fmt_gib(r["parameters_bytes"]),
                     "kv": fmt_gib(r["kv_cache_bytes"]), "act": fmt_gib(r["activations_bytes"]),
                     "tmp": fmt_gib(r["temporaries_bytes"]), "prefill": fmt_gib(r["prefill_peak_bytes"]),
                     "decode": fmt_gib(r["decode_peak_bytes"]),
                     "kv_token": fmt_count(details(r).get("kv_bytes_per_token"), "B"),
                     "tps": fmt_count(r["tokens_per_s"]) if not missing(r["tokens_per_s"]) else DASH,
                     "models": [r["model"]], "gpus": row_gpus(r)})
    return rows


def need(row, gpu: str) -> int | None:
    """What a simulated stage holds on its card: peak + the verdict's reserve (context, kernels) + cuBLAS's
    workspaces on ``gpu`` (the record's ``details.blas_workspaces``)."""
    if row is None or missing(row["peak_bytes"]):
        return None
    return int(row["peak_bytes"]) + verdicts.RESERVE_BYTES + blas_bytes(details(row), gpu)


def replan(plan: dict, another: int) -> dict:
    """The same vLLM plan with one more process holding ``another`` bytes of the card (beside
    whatever co-resident memory the cell already names)."""
    return workloads.plan(plan["total_bytes"], plan["gpu_memory_utilization"], plan["weights_bytes"],
                          plan["activation_peak_bytes"], plan["kv_bytes_per_token"], plan["max_model_len"],
                          coresident=plan["coresident_bytes"] + another, cuda_graph=plan["cuda_graph_bytes"],
                          non_torch=plan["non_torch_bytes"], context=plan["context_bytes"])


def first_ok(df, model, predicate):
    """The first ok row of ``model`` for which ``predicate(row)`` holds, or None."""
    hit = df[(df["model"] == model) & (df["status"] == "ok")]
    hit = hit[hit.apply(predicate, axis=1).astype(bool)] if len(hit) else hit
    return hit.iloc[0] if len(hit) else None


def stage_plans(df: pd.DataFrame) -> list[dict]:
    """One entry per (model, gpu, vllm cell): the plan alone, beside inference, beside training."""
    sim = df[df["mode"] == "sim"] if len(df) else df
    out = []
    for _, v in sim[(sim["status"] == "ok") & of_workload(sim, "vllm")].iterrows():
        train = first_ok(sim, v["model"], lambda r: r["technique"] == RECIPE)
        gen = first_ok(sim, v["model"], lambda r: workload(r) == "generate")
        plans = (details(v).get("vllm") or {}).get("plans") or {}
        for gpu, plan in plans.items():
            out.append({"model": v["model"], "gpu": gpu, "technique": v["technique"],
                        "util": plan["gpu_memory_utilization"], "alone": plan,
                        "beside_generate": replan(plan, need(gen, gpu)) if gen is not None else None,
                        "beside_train": replan(plan, need(train, gpu)) if train is not None else None,
                        "train": train, "generate": gen})
    return out


def verdict_of(row, gpu: str) -> str:
    if row is None:
        return DASH
    return (jcol(row, "verdicts") or {}).get(gpu, DASH)


def start_text(plan) -> dict:
    if plan is None:
        return {"text": DASH, "why": "", "tone": ""}
    if plan["starts"]:
        return {"text": f"starts: {plan['kv_tokens']:,} KV tokens, ×{plan['max_concurrent_sequences']} at "
                        f"{plan['max_model_len']:,}", "why": "", "tone": "better"}
    return {"text": "does not start", "why": plan["error"], "tone": "worse"}


def stage_rows(df: pd.DataFrame) -> list[dict]:
    rows = []
    for p in sorted(stage_plans(df), key=lambda p: (p["model"], -p["alone"]["total_bytes"], p["gpu"], -p["util"],
                                                    p["technique"])):
        alone = p["alone"]
        rows.append({"model": p["model"], "gpu": p["gpu"], "technique": p["technique"],
                     "card": fmt_gib(alone["total_bytes"]),
                     "train": f"{fmt_gib(need(p['train'], p['gpu']))} ({verdict_of(p['train'], p['gpu'])})",
                     "generate": f"{fmt_gib(need(p['generate'], p['gpu']))} ({verdict_of(p['generate'], p['gpu'])})",
                     "requested": fmt_gib(alone["requested_bytes"]), "weights": fmt_gib(alone["weights_bytes"]),
                     "act": fmt_gib(alone["activation_peak_bytes"]), "kv": fmt_gib(max(alone["kv_available_bytes"], 0)),
                     "alone": start_text(alone), "beside_generate": start_text(p["beside_generate"]),
                     "beside_train": start_text(p["beside_train"]), "models": [p["model"]], "gpus": [p["gpu"]]})
    return rows


def section(df: pd.DataFrame):
    gen, stages = generation_rows(df), stage_rows(df)
    if not gen and not stages:
        return None
    return {"kind": "stages", "title": "Pipeline stages: fine-tune, inference, scoring",
            "generation": gen, "stages": stages, "recipe": RECIPE,
            "note": (f"Each stage's memory per GPU (simulated). Fine-tune: the {RECIPE} training cell; inference: "
                     "the generate cell; both as simulated peak + the verdict's reserve ("
                     f"{verdicts.RESERVE_BYTES // 2**20} MiB) + cuBLAS's workspaces on the card, with its verdict. Scoring: vLLM's start-up plan at "
                     "each gpu_memory_utilization (requested = utilization × the card; KV cache = requested − "
                     "weights − profiled activations − non-torch memory), alone on the card and beside the other "
                     "stage's process still holding its memory. Rules and source: " + workloads.VLLM_SOURCE +
                     "; CUDA context, non-torch memory and CUDA graphs are modelled (README).")}
