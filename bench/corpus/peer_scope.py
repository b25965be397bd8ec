"""Which corpus rows each model-state estimator is built to answer: its own benchmark. Torch-free.

DeepSpeed's ``estimate_zero{2,3}_model_states_mem_needs_all_cold`` and ``accelerate
estimate-memory`` count model states of a full fine-tune with 32-bit Adam (parameters, gradients,
two Adam states): DeepSpeed's per GPU under its own ZeRO stage, accelerate's for one process at
the dtype of its row. Scored on a LoRA or QLoRA peak, such a figure is off by the adapter's
design, not by the estimator's error (a ZeRO-2 model-state estimate read 149.7% off that way).
A row outside a peer's scope is "not covered", with the reason (``why_not``).

fitcheck-llm and the rules of thumb are not here: each says itself what it cannot answer
(bench/corpus/peer_fitcheck.py, bench/corpus/peer_rules.py).
"""
from __future__ import annotations

from bench.cells import techniques as tech
from bench.corpus.row import Row

ADAM32 = ("adamw", "adamw-fused")
_MIXED = ("amp-bf16", "amp-fp16", "bf16")


def _full_adam(k: dict) -> str | None:
    if k["adapter"]:
        return f"a {k['adapter']} row: the estimator counts a full fine-tune's model states"
    if k["optimizer"] not in ADAM32:
        return f"the row steps {k['optimizer']}: the estimator counts 32-bit Adam states"
    return None


def _zero(stage: str):
    def check(k: dict) -> str | None:
        why = _full_adam(k)
        if why:
            return why
        if k["dist"] != stage:
            return f"the row runs {k['dist'] or 'no DeepSpeed'}: the estimator answers DeepSpeed {stage.upper()} runs"
        return None
    return check


def _accelerate(fp32: bool):
    def check(k: dict) -> str | None:
        why = _full_adam(k)
        if why:
            return why
        if k["dist"] not in (None, "ddp"):
            return f"the row shards with {k['dist']}: the estimator answers one unsharded copy"
        if fp32 != (k["precision"] == "fp32"):
            return (f"the row trains in {k['precision']}: this is the estimator's "
                    f"{'fp32' if fp32 else 'fp16'} row")
        return None
    return check


# tool name on the board -> (its own benchmark in words, why a row is outside it or None)
SCOPE = {
    "DeepSpeed ZeRO-2 estimator": ("full fine-tunes with 32-bit Adam under DeepSpeed ZeRO-2", _zero("zero2")),
    "DeepSpeed ZeRO-3 estimator": ("full fine-tunes with 32-bit Adam under DeepSpeed ZeRO-3", _zero("zero3")),
    "accelerate estimate-memory (fp32)": ("unsharded fp32 full fine-tunes with 32-bit Adam", _accelerate(True)),
    "accelerate estimate-memory (fp16)": ("unsharded 16-bit full fine-tunes with 32-bit Adam", _accelerate(False)),
}


def why_not(tool: str, row: Row) -> str | None:
    """Why ``tool`` is not built to answer ``row`` (a "not covered" reason), or None."""
    if tool not in SCOPE:
        return None
    what, check = SCOPE[tool]
    if not row.techniques:
        return f"not its benchmark ({what}): the recipe does not map to our techniques"
    why = check(tech.knobs(row.techniques.split("+")))
    return None if why is None else f"not its benchmark ({what}): {why}"
