"""What the numbers leave out: the short 'not included' list near the top of the page.

Each item is said only when it applies to this run (read from the table: its modes, the
records' details), so the list never claims a gap the run does not have.
"""
from __future__ import annotations

import pandas as pd

from report.fmt import details, knobs


def _any(df, test) -> bool:
    return any(test(r) for _, r in df.iterrows())


def section(df: pd.DataFrame, fits: pd.DataFrame | None = None) -> dict:
    items = []
    modes = set(df["mode"])
    if "cuda" not in modes:
        items.append("No GPU measurement in this run: every full-size number is simulated (fake tensors) and every "
                     "speed shown is modelled; only the small CPU models were run for real (GPU runs: "
                     "`ft-membench measure`, matrix/cuda-h200.yaml).")
    sim = df[df["mode"] == "sim"]
    reserves = {details(r).get("verdict_reserve_bytes") for _, r in sim.iterrows()} - {None}
    if reserves:
        items.append("The CUDA context and kernels are a fixed reserve of "
                     + " / ".join(f"{b / 2**20:.0f} MiB" for b in sorted(reserves) if isinstance(b, (int, float)))
                     + " per card, for memory outside the caching allocator: the most measured with NVML (742-758 MiB "
                     "on an H200, 834 MiB on an H100: results/reference/cuda-h200, cuda-h100); it varies with driver and "
                     "GPU, and another card or driver may hold more. cuBLAS's workspaces come beside it, per card: 2 x 32 MiB "
                     "on Hopper (sm90), 2 x 8.125 MiB on other GPUs (torch's defaults; in the allocator's memory, no "
                     "tensor of the trace; 64-66 MiB measured on every H100/H200 cell).")
    if _any(df, lambda r: knobs(r).get("dist")):
        items.append("DeepSpeed's communication streams' own allocator pools and its all-gather and prefetch buckets "
                     "of multi-GPU cells (FSDP2's streams are in: each rank's own traced step, with or without CPU offload, "
                     "replayed with a pool per stream, within 1% of one rank's reserved memory on an H100); ZeRO is each "
                     "rank's own DeepSpeed program (equal to real DeepSpeed ranks on a tiny model at 2 and 4, "
                     "unchecked on a GPU; QLoRA under ZeRO-3 with the checkpoint it runs), but on one GPU, worked out by "
                     "formula (marked 'analytic'). NCCL's device buffers are in the need, "
                     "modelled from NCCL's defaults for the world size and the card's interconnect (76 MiB to about "
                     "1 GiB a GPU), not measured.")
    items.append("Other processes on the card (a display, a second job) and the memory nvidia-smi shows above "
                 "the CUDA total.")
    items.append("The data loader, the tokenizer and host memory during training; checkpoint saving.")
    if not sim.empty and not _any(sim, lambda r: isinstance(details(r).get("speed_model"), dict)):
        items.append("Speed: no speed model in these records, so no step time is estimated and recipes are "
                     "not ranked by speed.")
    if fits is None:
        items.append("The largest sequence and batch that fit: not searched in this run (the fits search, "
                     "results/fits.csv, was not given).")
    return {"title": "Not included", "lines": items}
