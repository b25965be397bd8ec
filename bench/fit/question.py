"""The fit command's question from what the user gives: a MODEL argument (a matrix name, a
config path, a Hugging Face id) and/or ``--config FILE`` (a TRL/transformers, axolotl,
LLaMA-Factory or torchtune training config, bench/cells/trainconfig), with ``--launch-config FILE``
(accelerate's config file it runs under, bench/cells/trainconfig/launch.py).

``question`` returns the model argument the matrix loader resolves (a Hub id's config.json is
first put in the local Hub cache by bench/cells/hubmodel.py, or the id is answered by the matrix model
of the same repository), the techniques, the technique options, the shape, the recipe read from
the config (None without one) and the notes saying how the model was found. Every problem is a
``Usage`` error (exit status 2). Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.cells import hubmodel, trainconfig
from bench.cells.modelref import MODELS_DIR, ModelError


class Usage(ValueError):
    """Bad input: the message is the one line printed."""


@dataclass
class Question:
    model: str                     # what the matrix loader resolves
    asked: str                     # the model as the user or the config wrote it
    techniques: list[str] | None   # None: the default study's list
    seq: int | None
    batch: int | None
    options: dict = field(default_factory=dict)
    recipe: object = None          # trainconfig.Recipe or None
    notes: list[str] = field(default_factory=list)


def anchored(text: str, base: Path) -> str:
    """``text`` as the matrix loader should read it: a relative local path (a ``.json``, a ``.``
    or ``~`` path, or one that exists under ``base``) made absolute against ``base`` (the user's
    working directory for MODEL, the config file's folder for its ``model_name_or_path``); a
    matrix model name or a Hugging Face id unchanged. The loader reads the one-study matrix from
    a temp folder, which is no base for the user's paths."""
    if not isinstance(text, str) or not text or "@" in text:
        return text
    try:
        path = Path(text).expanduser()
        if path.is_absolute():
            return str(path)
        if "/" not in text and (MODELS_DIR / f"{text}.json").is_file():
            return text   # the matrix's own model wins over a folder of the same name, as in the loader
        if text.startswith((".", "~")) or text.endswith(".json") or (base / path).exists():
            return str((base / path).absolute())
    except (OSError, ValueError):   # a name too long for a path is no local file
        pass
    return text


def question(model: str | None, config: str | None, fmt: str | None, techniques: list[str] | None,
             seq: int | None, batch: int | None, trust_remote_code: bool = False,
             launch_config: str | None = None, gpus: int = 1) -> Question:
    recipe = None
    options: dict = {}
    if launch_config and not config:
        raise Usage(f"--launch-config {launch_config}: give the training config it launches with --config")
    if config:
        try:
            recipe = trainconfig.read(config, fmt, launch_config)
            recipe.on_gpus(gpus)
        except trainconfig.ConfigError as exc:   # a stage or parallelism not simulated: what others measured of it
            from bench.fit import beyond
            raise Usage("\n".join([str(exc), *beyond.lines(exc.beyond, model)])) from None
        except trainconfig.Invalid as exc:
            raise Usage(f"--config {config}: {exc}") from None
        if techniques is None:  # the config's one recipe, a '+'-joined combination
            techniques = ["+".join(recipe.techniques())]
        options = recipe.options()
        seq = seq or recipe.seq
        batch = batch or recipe.batch
        if recipe.micro_batches > 1 and techniques == ["+".join(recipe.techniques())]:
            batch = (batch or 1) * recipe.micro_batches  # ga<N> splits the cell's batch into N micro-batches
    asked = model or (recipe.model if recipe else None)
    if not asked:
        raise Usage(f"--config {config}: names no model (give MODEL)" if config else "MODEL or --config is needed")
    base = Path.cwd() if model else Path(config).expanduser().absolute().parent
    q = Question(anchored(asked, base), asked, techniques, seq, batch, options, recipe)
    if model and recipe is not None and recipe.model and recipe.model != model:
        q.notes.append(f"MODEL {model} answers in place of the config's {recipe.model}")
    if q.model == asked and hubmodel.is_hub_id(asked):
        local = hubmodel.local_name(asked)
        if local:
            q.model = local
            q.notes.append(f"{asked}: answered by the matrix model {local} (matrix/models/{local}.json, whose _source "
                           "is the same repository)")
            if "@" in asked:   # the matrix's config is the repository's as recorded there, not that revision's
                q.notes.append(f"{asked}: the revision @{asked.split('@', 1)[1]} is not read: the matrix model's "
                               f"config answers (give that revision's config.json path to answer from it)")
        else:
            try:
                path = hubmodel.ensure_config(asked, trust_remote_code)
            except ModelError as exc:
                raise Usage(str(exc)) from None
            q.notes.append(f"{asked}: config.json from the Hugging Face cache ({path})")
    return q
