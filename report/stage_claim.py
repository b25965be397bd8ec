"""The claim about vLLM's gpu_memory_utilization in a fine-tuning pipeline, checked against the
simulated stage plans (report/stages.py). Never imports torch.

"Lowering gpu_memory_utilization from 0.95 to 0.8 lets the scoring stage run on a 48 GB card."
For each model and 44-48 GiB card, the scoring stage (the vllm cells at ``FROM`` and ``TO``,
otherwise alike) is planned alone, beside the inference process and beside the fine-tune
process that has not released its memory. The claim holds where the engine does not start at
``FROM`` and starts at ``TO``. Whether it can: vLLM requires free memory >= utilization x the
card at start-up, so lowering it helps exactly when another process holds between
(1 - FROM) and (1 - TO) of the card, less the CUDA context; the evidence gives that window.
"""
from __future__ import annotations

from bench.cells import workloads
from report import GIB
from report.claim import HOLDS, NOT, PARTLY, Claim, in_range, result
from report.fmt import fmt_gib
from report.stages import stage_plans

LIMITS = {"from": 0.95, "to": 0.8, "gpu_gib": (44, 48)}  # one home: the page text and the verdict read these
SCENARIOS = (("alone", "alone"), ("beside_generate", "beside inference"), ("beside_train", "beside the fine-tune"))


def window(total: int, FROM: float, TO: float) -> str:
    lo = total * (1 - FROM) - workloads.CUDA_CONTEXT_BYTES
    hi = total * (1 - TO) - workloads.CUDA_CONTEXT_BYTES
    return f"{fmt_gib(max(lo, 0))}-{fmt_gib(hi)} GiB"


def check(df, t):
    FROM, TO = t["from"], t["to"]
    plans = [p for p in stage_plans(df)
             if in_range(p["alone"]["total_bytes"] / GIB, t["gpu_gib"]) and p["util"] in (FROM, TO)]
    by_key: dict = {}
    for p in plans:
        rest = "+".join(x for x in p["technique"].split("+") if not x.startswith("util"))
        by_key.setdefault((p["model"], p["gpu"], rest), {})[p["util"]] = p
    evidence, outcomes, rows = [], [], []
    for (model, gpu, rest), pair in sorted(by_key.items()):
        if FROM not in pair or TO not in pair:
            continue
        rows += [pair[FROM]["train"], pair[FROM]["generate"]]
        said, helped = [], []
        for key, label in SCENARIOS:
            hi, lo = pair[FROM][key], pair[TO][key]
            if hi is None or lo is None:
                continue
            helped.append(not hi["starts"] and lo["starts"])
            said.append(f"{label}: {FROM} {'starts' if hi['starts'] else 'fails'}, {TO} "
                        f"{'starts' if lo['starts'] else 'fails'}")
        outcomes.append(HOLDS if any(helped) else NOT)
        evidence.append(f"{model} {rest} on {gpu}: " + "; ".join(said) +
                        f" (lowering helps when another process holds {window(pair[FROM]['alone']['total_bytes'], FROM, TO)})")
    rows = [r for r in rows if r is not None]
    sim_rows = df[(df["mode"] == "sim") & df["technique"].map(lambda t: "vllm" in t.split("+"))]
    if not outcomes or not len(sim_rows):
        return []
    verdict = HOLDS if all(o == HOLDS for o in outcomes) else PARTLY if HOLDS in outcomes else NOT
    return [result([r for _, r in sim_rows.iterrows()], verdict, evidence,
                   f"vLLM starts only if the card's free memory is at least utilization × the card; at {FROM} "
                   f"another process may hold at most {1 - FROM:.0%} of the card less the CUDA context, at {TO} "
                   f"{1 - TO:.0%}. Lowering helps only for a co-resident process in that window, and only if the "
                   "KV space left at the lower value still holds one max_model_len sequence.")]


CLAIM = Claim("vllm-util", "Lowering gpu_memory_utilization from 0.95 to 0.8 lets the scoring stage run on a "
              "48 GB card.", LIMITS,
              "holds on a {gpu_gib[0]}-{gpu_gib[1]} GiB card where vLLM does not start at {from} and starts at {to} "
              "(alone, beside the inference process, or beside the fine-tune process not released); partly: on "
              "some cards/models",
              "sim vllm+util0.95 and vllm+util0.8 cells with the fine-tune and generate cells of the same model",
              check)
