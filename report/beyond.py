"""What ft-membench does not simulate yet, as others measured it: the published corpus's runs of preference and RL
stages (DPO, GRPO, PPO...) and of tensor, context, sequence and pipeline parallelism (``Row.beyond``). Never
imports torch.

``section(df)`` lists them by kind, each as its source reported it (figure, measure, GPUs, outcome, address):
GPU measurements by others, beside no figure of ours, the targets of the stages and parallelisms to come. The
same rows stand under `ft-membench fit`'s refusal of a config of that kind (bench/fit/beyond.py).
"""
from __future__ import annotations

import pandas as pd

from bench.corpus import published, scoreboard
from bench.fit.beyond import WORDS


def rows_by_kind() -> list[dict]:
    """[{"kind", "rows": [...]}] in WORDS' order, each row a dict the template draws."""
    rows = [r for r in published.load() if r.beyond]
    out = []
    for kind, words in WORDS.items():
        mine = [r for r in rows if r.beyond[0] == kind]   # a row under its first kind (405B: tensor, then pipeline)
        if not mine:
            continue
        out.append({"kind": words, "rows": [{
            "row": r.id, "model": r.model, "recipe": r.recipe, "also": ", ".join(WORDS[k] for k in r.beyond[1:]),
            "gpus": f"{r.n_gpus} x {r.gpu}" if (r.n_gpus or 1) > 1 else (r.gpu or "not named"),
            "figure": (f"{r.value:g} {r.unit}" + ("" if r.measure == "not-stated" else f" ({r.measure})")
                       if r.value_kind == "peak" else f"the card: {r.value:g} {r.unit}"),
            "outcome": r.outcome, "url": scoreboard.source_url(r) or r.source} for r in mine]})
    return out


def section(df: pd.DataFrame):
    groups = rows_by_kind()
    if not groups:
        return None
    return {"kind": "beyond", "title": "Not simulated yet: what others measured of preference and RL stages and of "
                                       "tensor, context, sequence and pipeline parallelism",
            "groups": groups,
            "note": ("ft-membench simulates supervised steps under data parallelism (ZeRO, FSDP); a DPO, GRPO or PPO "
                     "config, or one with tensor, context, sequence or pipeline parallelism, gets no answer from it "
                     "(ft-membench fit exits 2 and lists these rows beside its refusal). Each row is a GPU "
                     "measurement or an outcome as its source published it (matrix/published/corpus.yaml, held out): "
                     "no figure of ours stands beside it, and none is scored. 'the card' rows say what ran or ran out "
                     "of memory on that card, not a peak.")}
