"""The report's "Your data, your peak" section: one real dataset's epoch, padded and packed
(bench/dataset/study.py writes it), as a line chart of the reserved memory step by step, the
answer in words, and what to change.

Every reader checks what it reads: ``read`` returns (doc, None) or (None, why), and a file that is
stale (another engine digest than this code's, bench/dataset/ changed, or a dataset or tokenizer
changed since) or cut is shown as such, never as an answer.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import seaborn as sns

from report import GIB, plots

MiB = 2 ** 20

ROOT = Path(__file__).resolve().parents[1]
FORMAT = 1
TITLE = "Your data, your peak: an epoch of a real dataset, padded and packed"


def read(path) -> tuple[dict | None, str | None]:
    from bench.cells import inputs
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return None, f"{path}: cannot read it ({exc})"
    try:
        if doc["format"] != FORMAT:
            return None, f"{path}: format {doc['format']}, this report reads {FORMAT}"
        for part in ("padding", "packing"):
            ep = doc[part]["epoch"]
            assert isinstance(ep["by_step"], list) and ep["by_step"] and ep["verdict"] in ("fits", "tight", "oom")
            assert all(isinstance(s["reserved_bytes"], int) and isinstance(s["step"], int) for s in ep["by_step"])
        made, here = doc["versions"]["ft_membench_engine"], inputs.engine_digest()
    except (KeyError, TypeError, AssertionError):
        return None, f"{path}: not a dataset-epoch study (a key is missing or of the wrong type)"
    if made != here:
        return None, (f"{path} is stale: made by engine {made[:8]}, this code is {here[:8]}; "
                      "rerun `snakemake --cores 1 results/dataset/epoch.json`")
    from bench.dataset import study
    if doc.get("code_sha256") != study.code_digest():
        return None, (f"{path} is stale: bench/dataset/ changed since it was made; "
                      "rerun `snakemake --cores 1 results/dataset/epoch.json`")
    for rel, sha in doc["inputs_sha256"].items():
        f = ROOT / rel
        if not f.is_file() or hashlib.sha256(f.read_bytes()).hexdigest() != sha:
            return None, f"{path} is stale: {rel} changed since it was made; rerun the study"
    return doc, None


def _g(b) -> str:
    return f"{b / GIB:.2f} GiB"


def long(doc: dict) -> pd.DataFrame:
    rows = []
    for part, label in (("padding", "padded to the longest sample"), ("packing", "packed rows")):
        for s in doc[part]["epoch"]["by_step"]:
            rows.append({"step": s["step"], "gib": s["reserved_bytes"] / GIB, "series": f"{label}: reserved"})
            rows.append({"step": s["step"], "gib": s["allocated_bytes"] / GIB, "series": f"{label}: allocated peak"})
    return pd.DataFrame(rows)


def figure(doc: dict):
    data = long(doc)
    cap, q = doc["padding"]["epoch"]["capacity_bytes"] / GIB, doc["padding"]
    with plots.drawing():
        fig, (ax,) = plots.grid(1, wrap=1, width=8.5, height=3.8)
        sns.lineplot(data=data, x="step", y="gib", hue="series", style="series", markers=True, dashes=False,
                     errorbar=None, ax=ax, markersize=4)
        ax.axhline(cap, color="#333", ls="--", lw=1)
        ax.text(0, cap, f" {q['gpu']}: {cap:.2f} GiB for the allocator", color="#333", va="bottom", fontsize=8)
        ax.set(xlabel="training step (the epoch, in the trainer's order)", ylabel="GiB",
               title=f"{q['model']} {q['technique']}, batch {q['batch']}, max_length {q['max_length']}, {q['gpu']}")
        ax.legend(fontsize=7, title=None)
    return fig


def lines(doc: dict) -> list[str]:
    pad, pack = doc["padding"], doc["packing"]
    ep, info = pad["epoch"], pad["dataset"]
    out = [f"{info['source']}: {info['samples']} samples, tokenized with {info['tokenizer']}: longest "
           f"{info['longest']} tokens, {info['truncated_samples']} truncated at {info['max_length']}."]
    from bench.dataset import epoch
    rises = " → ".join(f"{_g(s['reserved_bytes'])} (step {s['step']}, width {s['width']})"
                       for s in epoch.rises(ep["staircase"])[:8])
    out.append(f"Padded ({ep['steps']} steps, random sampling, seed {pad['seed']}): reserved climbs {rises}. Verdict: "
               f"{ep['verdict']}" + (f" at step {ep['first_oom']['step']}" if ep["first_oom"] else "")
               + (": no allocation fails, but only because the allocator releases its cache once it reaches the card"
                  if ep["verdict"] == "tight" else "") + ".")
    pk = pack["epoch"]
    out.append(f"Packed ({pk['steps']} steps of {pad['batch']} × {pad['max_length']} tokens): {_g(pk['reserved_peak_bytes'])} "
               f"reserved, flat. Verdict: {pk['verdict']}.")
    for f in pad["to_change"]:
        out.append(f"What to change: {f['change']}" + (f" (cuts {f['samples_cut']} samples, {f['tokens_share']:.1%} of "
                                                      "the tokens)" if "samples_cut" in f else "")
                   + (f": {_g(f['reserved_peak_bytes'])}" if f.get("reserved_peak_bytes") else "")
                   + (", fits." if f.get("survives") else ", does not fit."))
    need = pad.get("host_need")
    if need:
        data = (f" and the data's {need['data_bytes'] / MiB:.0f} MiB at its larger phase (tokenizing or training, "
                "modelled from the load paths below)" if need.get("data_bytes") is not None else "")
        out.append(f"Host memory on the node (modelled, an upper bound): {_g(need['need_bytes'])}: the recipe's "
                   f"{_g(need['recipe_bytes'])} (its runtime, and the larger of its load and its step's offloaded state){data}.")
    return out


HOST_PATHS = {
    "json-lists": "json.loads per line into Python lists, tokenized into lists of ids",
    "datasets-map": "datasets.load_dataset('json') (Arrow, memory-mapped), .map(tokenize, batched=True)",
    "datasets-map-num-proc-2": "the same with num_proc=2",
    "dataloader-workers-0": "the tokenized Arrow dataset through a DataLoader (batch 4, padded), no workers",
    "dataloader-workers-2": "the same with num_workers=2, prefetch_factor 2",
}


def read_host(path) -> tuple[dict | None, str | None]:
    """The host-memory measurements, checked (bench/dataset/hostshare.py ``read``)."""
    from bench.dataset import hostshare
    return hostshare.read(path)


def host_rows(doc: dict) -> list[dict]:
    scales = sorted({r["scale"] for r in doc["rows"]})
    out = []
    for path, what in HOST_PATHS.items():
        got = {r["scale"]: r for r in doc["rows"] if r["path"] == path}
        if not got:
            continue
        slope = doc.get("growth", {}).get(path)
        out.append({"path": path, "what": what,
                    "cells": [f"{got[k]['peak_above_baseline_bytes'] / MiB:.0f}" if k in got else "—" for k in scales],
                    "growth": "—" if slope is None else f"{slope:.1f}"})
    return out


def section(path, host=None) -> dict | None:
    """The section, or a note of why the study is missing, stale or unreadable; None without a path."""
    if path is None:
        return None
    doc, why = read(path)
    extra = {"host": None, "host_sizes": [], "host_note": None}
    if host is not None:
        hd, hwhy = read_host(host)
        extra = {"host": None, "host_sizes": [], "host_note": hwhy} if hd is None else {
            "host": host_rows(hd), "host_sizes": [f"{r['dataset_bytes'] / MiB:.1f} MiB" for r in
                                                 sorted({r["scale"]: r for r in hd["rows"]}.values(), key=lambda r: r["scale"])],
            "host_note": (f"cpu-measured on this project's machine ({hd['machine']['cpus']} cores, Python "
                          f"{hd['machine']['python']}; datasets {hd['versions']['datasets']}, pyarrow "
                          f"{hd['versions']['pyarrow']}): {hd['dataset']} repeated, tokenized with {hd['tokenizer']}. "
                          "Peak proportional set size (shared pages divided) of the process and its children, sampled "
                          f"every {int(hd['sample_s'] * 1000)} ms, above what it holds once its libraries are imported; "
                          "growth: MiB of that peak per MiB of dataset (least squares). Pages of a memory-mapped Arrow "
                          "file count once read, though the kernel can drop them under pressure. pin_memory is off: no "
                          "GPU here.")}
    if doc is None:
        return {"kind": "dataset_epoch", "title": TITLE, "lines": [f"Not shown: {why}"], "image": None, **extra}
    return {"kind": "dataset_epoch", "title": TITLE, "lines": lines(doc), **extra,
            "image": plots.data_uri(plots.png(figure(doc))),
            "alt": "line chart of reserved and allocated memory per training step, padded against packed",
            "caption": (f"Each step of one epoch of {doc['padding']['dataset']['source']}, in the order a "
                        "transformers Trainer draws it: the caching allocator's reserved memory uncapped (what it would "
                        "hold on a card big enough) and each step's allocated peak. How: " + doc["padding"]["how"] + "."),
            "provenance": "simulated steps, modelled allocator (bench/dataset/)"}
