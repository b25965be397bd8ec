"""Claims checked: the quantitative statements of common fine-tuning advice, set against this run.

Each claim is one entry of ``CLAIMS``: the statement, its ``limits`` (the numbers its check
applies; the page's thresholds text is formatted from the same numbers, so the two cannot
disagree), the cells that would measure it, and a check function over the long-form table and
those limits (report/claim_checks.py; the pipeline-stage claim's in report/stage_claim.py).
A check returns one result per mode that has evidence (modes are never pooled: a simulated
number does not vote with a measured one); each result holds the evidence lines, a verdict
(holds | partly | does not hold | not measurable here | not measured here) and why. A claim with no evidence in any
mode gets one "not measured here" row naming the cells that would measure it.
"""
from __future__ import annotations

import pandas as pd

from bench.records.noise import CPU_THROUGHPUT_BAND
from report import stage_claim
from report.claim import UNMEASURED, Claim
from report.claim_checks import (adam8bit, adam_vs_fp16, gc_time, lora_states, low_cpu_mem, mixed_precision, padding_steps,
                                 qlora_70b, zero3_linear)
from report.fmt import DASH

CLAIMS = (
    Claim("mixed-precision", "Mixed precision roughly halves the memory of weights and gradients.",
          {"halved": (0.4, 0.6)},
          "halved: new/old within ×{halved[0]:.2f}-{halved[1]:.2f}, per category; holds if weights and "
          "gradients both halve",
          "pairs X vs X+bf16 / X+amp-bf16 / X+amp-fp16 (e.g. baseline and bf16)", mixed_precision),
    Claim("gc-time", "Gradient checkpointing costs about 20-30% in time.",
          {"holds": (15, 35), "partly": (5, 50), "cpu_noise": CPU_THROUGHPUT_BAND * 100},
          "holds: median step-time increase (sim: the speed model's, modelled) {holds[0]:g}-{holds[1]:g}%; "
          "partly: {partly[0]:g}-{partly[1]:g}%; cpu: not measurable here when the median change is within "
          "the measured run-to-run noise, ±{cpu_noise:g}%",
          "pairs X vs X+gc (e.g. baseline and gc)", gc_time),
    Claim("adam-8bit", "8-bit Adam saves about three quarters of the optimizer state.",
          {"holds": (65, 85), "partly": (50, 95)},
          "holds: median optimizer-category saving {holds[0]:g}-{holds[1]:g}%; partly: {partly[0]:g}-{partly[1]:g}%; "
          "pairs pooled only with the same optimizer-state dtype before (fp32 → 8-bit apart from bf16 → 8-bit)",
          "pairs X vs X+adamw8bit or X+paged-adamw8bit", adam8bit),
    Claim("adam-2x", "Adam's state is about twice the size of the fp16 weights.",
          {"holds": (1.6, 2.4)},
          "holds per cell: optimizer bytes / (2 bytes × trainable params) within {holds[0]:g}-{holds[1]:g}; "
          "cells with AdamW and precision techniques only", "baseline, bf16 or amp-* cells with AdamW", adam_vs_fp16),
    Claim("low-cpu-mem-usage", "from_pretrained(low_cpu_mem_usage=True) lowers host memory while loading.",
          {"holds": (10, 100), "partly": (2, 10), "ignored_from_major": 5},
          "holds: median load-time host peak RSS ≥{holds[0]:g}% lower than ckpt-load; "
          "partly: {partly[0]:g}-{partly[1]:g}%; not measurable here with transformers ≥{ignored_from_major} "
          "(it ignores the flag)",
          "pairs X+ckpt-load vs X+low-cpu-mem-usage (cpu or cuda)", low_cpu_mem),
    Claim("qlora-70b", "QLoRA lets a 65-70B model fine-tune on one 48 GB GPU.",
          {"params_b": (60, 80), "gpu_gib": (44, 48)},
          "holds: a qlora cell of a {params_b[0]:g}-{params_b[1]:g}B-parameter model fits a "
          "{gpu_gib[0]:g}-{gpu_gib[1]:g} GiB GPU (verdict 'fits'); partly: 'tight'",
          "sim cells llama-3.1-70b__sim__qlora… with verdicts for l40s / rtx-a6000", qlora_70b),
    Claim("zero3-linear", "ZeRO-3 per-GPU memory falls about linearly with the number of GPUs.",
          {"linear": (0.75, 1.33), "falls": 0.9},
          "holds: per-GPU peak × N / peak at N=1 within {linear[0]:g}-{linear[1]:g} at every N; partly: model "
          "states do, or the peak falls below ×{falls:g} at every N",
          "zero3 and zero3+w<N> cells of one model at two or more N (cpu w1/w2, sim)", zero3_linear),
    Claim("padding-steps", "With padding, peak memory climbs in steps as longer batches arrive.",
          {"spread": 0.05, "packing_share": 0.5},
          "holds: per-step peaks (after step 1) spread ≥{spread:.0%} and the running max rises again after "
          "step 2, and packing's spread is under {packing_share:.0%} of padding's; partly: one of these fails",
          "X+padding cells (with X+packing to contrast), two or more steps", padding_steps),
    Claim("lora-states", "LoRA cuts gradient and optimizer memory by more than 90%.",
          {"holds": (90, 100), "partly": (70, 90)},
          "holds: median saving of gradients + optimizer ≥{holds[0]:g}%; partly: {partly[0]:g}-{partly[1]:g}%",
          "pairs X vs X+lora", lora_states),
    stage_claim.CLAIM,  # the pipeline-stage claim, beside its section (report/stage_claim.py)
)


def evaluate(df: pd.DataFrame, claims: tuple | None = None) -> list[dict]:
    """One row per (claim, mode with evidence), or per claim with none: the claims table
    (every claim of ``CLAIMS`` as it is when called)."""
    rows = []
    for claim in CLAIMS if claims is None else claims:
        found = claim.check(df, claim.limits) if len(df) else []
        if not found:
            found = [{"mode": DASH, "provenance": DASH, "verdict": UNMEASURED, "models": [], "cells": [],
                      "evidence": [], "why": f"no comparable cells in this run; measured by: {claim.needs}"}]
        rows += [{"key": claim.key, "statement": claim.statement, "thresholds": claim.thresholds} | f for f in found]
    return rows


def section(df: pd.DataFrame):
    return {"kind": "claims", "title": "Claims checked", "rows": evaluate(df),
            "note": "Each row sets one statement of common advice against this run's cells, one mode at a "
                    "time (a simulated number never votes with a measured one). The check and its thresholds "
                    "are in report/claims.py and report/claim_checks.py."}


