"""Beside a refused config, what others measured: the published runs of the stage or parallelism ft-membench
does not simulate.

A DPO, GRPO or PPO config, or one that asks for tensor, context, sequence or pipeline parallelism, gets no
answer (bench/cells/trainconfig/stage.py, parallel.py): answered as the SFT or data-parallel step, its figure
would be another run's. The published corpus (matrix/published/corpus.yaml) holds runs of those kinds, each
row marked with what it does beyond our simulation (``Row.beyond``). ``lines`` gives them under the refusal,
the asked model's first, each as its source reported it: a GPU measurement by others, not a figure of ours.
"""
from __future__ import annotations

import re

from bench.cells.trainconfig import stage
from bench.corpus import published
from bench.corpus.row import Row

WORDS = {"dpo": "DPO", "kto": "KTO", "orpo": "ORPO", "grpo": "GRPO", "ppo": "PPO", "rm": "reward-model",
         "tensor": "tensor-parallel", "context": "context-parallel", "sequence": "sequence-parallel (Ulysses)",
         "pipeline": "pipeline-parallel"}
LIMIT = 8
# a technique name a user may write for a stage -> its kind: the config reader's own names (stage.WHAT, stage.KIN)
WORD_KINDS = {**{k: k for k in stage.WHAT}, **{k.replace("_", "-"): v for k, v in stage.KIN.items()}}
DEGREE_WORDS = {"tp": "tensor", "cp": "context", "sp": "sequence", "pp": "pipeline"}


def kind_of(name: str) -> str | None:
    """The stage or parallelism a technique name asks for that is not simulated yet (``dpo``, ``grpo``, ``tp2``,
    ``cp4``...), else None."""
    m = re.fullmatch(r"(tp|cp|sp|pp)(\d+)", name)
    if m and int(m.group(2)) > 1:
        return DEGREE_WORDS[m.group(1)]
    return WORD_KINDS.get(name)


def refusal(names: list[str], model: str | None) -> str | None:
    """Why a technique combination asks for what ft-membench does not simulate, with what others measured of
    it, or None."""
    for combo in names:
        for name in combo.split("+"):
            kind = kind_of(name)
            if kind:
                what = (f"a {WORDS[kind]} stage" if kind in stage.WHAT
                        else f"{WORDS[kind]} training (a degree above 1)")
                return "\n".join([f"techniques: {combo}: {name!r} asks for {what}, which ft-membench does not simulate "
                                   "yet: it simulates supervised steps under data parallelism (ZeRO, FSDP), and no "
                                   "answer is given", *lines(kind, model)])
    return None


def _local(model: str | None) -> str | None:
    """The matrix model ``model`` names (itself, or a Hub id's matrix model), or None."""
    if not model:
        return None
    if (published.MODELS_DIR / f"{model}.json").is_file():
        return model
    from bench.cells import hubmodel
    return hubmodel.local_name(model) if hubmodel.is_hub_id(model) else None


def _figure(row: Row) -> str:
    cards = f"{row.n_gpus} x {row.gpu}" if (row.n_gpus or 1) > 1 else str(row.gpu or "a GPU not named")
    if row.value_kind == "peak":
        measure = "" if row.measure == "not-stated" else f" {row.measure}"
        return f"{row.value:g} {row.unit}{measure} per GPU on {cards} ({row.outcome})"
    said = {"fits": "ran on", "oom": "out of memory on"}.get(row.outcome, "on")
    return f"{said} {cards} ({row.value:g} {row.unit} a card)"


def _url(row: Row) -> str:
    from bench.corpus import scoreboard
    return scoreboard.source_url(row) or row.source


def lines(kind: str | None, model: str | None, limit: int = LIMIT) -> list[str]:
    """The published runs of ``kind`` (a ``Row.beyond`` word), ``model``'s first, at most ``limit``; [] where
    the corpus has none (or ``kind`` is no such word), one line why where the corpus cannot be read."""
    if kind not in WORDS:
        return []
    try:
        rows = [r for r in published.load() if kind in r.beyond]
    except published.PublishedError as exc:
        return [f"published {WORDS[kind]} runs: the corpus could not be read ({exc})"]
    if not rows:
        return []
    local = _local(model)
    same = [r for r in rows if local and r.model_config_name == local]
    shown = (same + [r for r in rows if r not in same])[:limit]
    head = (f"published {WORDS[kind]} runs, measured by others on GPUs and not simulated here "
            f"(matrix/published/corpus.yaml): {len(rows)}" + (f", {len(same)} of {local}" if local else "")
            + (f"; the first {len(shown)}:" if len(shown) < len(rows) else ":"))
    out = [head]
    for r in shown:
        recipe = r.recipe if len(r.recipe) <= 110 else r.recipe[:107].rsplit(" ", 1)[0] + " ..."
        out.append(f"  {r.id}: {r.model}; {recipe}; {_figure(r)}; {_url(r)}")
    return out
