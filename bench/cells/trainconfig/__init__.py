"""Training configs people already have, read into one question for ``ft-membench fit``.

``read(path, fmt=None)`` returns a Recipe (bench/cells/trainconfig/recipe.py): the model id as written,
the catalogue techniques, the technique options, batch, sequence length, processes, what was
mapped and every setting ignored with its reason. The format is told from the keys (``FORMATS``
order: torchtune's ``_component_`` builders, axolotl's ``base_model``/``micro_batch_size``/
``sequence_len``, LLaMA-Factory's ``finetuning_type``/``cutoff_len``/``template``/
``quantization_bit``, then TRL/transformers TrainingArguments), or named (``fmt``). JSON or YAML.
A file that cannot be read (read as the matrix is: bench/cells/trainconfig/reading.py), is not a
mapping, matches no format, or sets a memory-relevant key to a value that cannot be what it
means (recipe.py's ``Invalid``), or configures a preference or RL stage (DPO, GRPO, PPO...: stage.py)
or a parallelism other than data parallelism (tensor, context, sequence, pipeline; HSDP: parallel.py),
is a ConfigError naming the file, the key and the reason. Torch-free.
"""
from __future__ import annotations

from pathlib import Path

from bench.cells.trainconfig import axolotl, hf, launch, llamafactory, parallel, reading, stage, torchtune
from bench.cells.trainconfig.recipe import Invalid, Recipe, deepspeed_fp16

FORMATS = {"torchtune": torchtune.read, "axolotl": axolotl.read, "llamafactory": llamafactory.read, "trl": hf.read}


PROCESS_KEYS = ("num_processes", "nproc_per_node", "world_size")


class ConfigError(ValueError):
    """A config that cannot be used: the message names the file and why; ``beyond``: the stage or parallelism it
    asks for that ft-membench does not simulate (``Invalid.beyond``), else None."""

    def __init__(self, message: str, beyond: str | None = None):
        super().__init__(message)
        self.beyond = beyond


def detect(doc: dict) -> str | None:
    if any(isinstance(v, dict) and "_component_" in v for v in doc.values()):
        return "torchtune"
    if {"base_model", "micro_batch_size", "sequence_len", "sample_packing"} & set(doc):
        return "axolotl"
    if {"finetuning_type", "cutoff_len", "template", "quantization_bit", "lora_target"} & set(doc):
        return "llamafactory"
    if {"model_name_or_path", "per_device_train_batch_size", "optim", "output_dir", "max_seq_length",
            "gradient_checkpointing", "use_peft"} & set(doc):
        return "trl"
    return None


def _mapping(path: Path, flag: str) -> dict:
    try:   # as the matrix is read: a bounded regular file, the strict safe loader (trainconfig/reading.py)
        doc = reading.load(path, flag)
    except reading.ReadError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{flag} {path}: a {'training' if flag == '--config' else 'launch'} config is a mapping "
                          f"of settings, not {type(doc).__name__}")
    return doc


def read(path, fmt: str | None = None, launch_path=None) -> Recipe:
    """``launch_path``: accelerate's config file the run is launched with (trainconfig/launch.py)."""
    path = Path(path).expanduser()
    doc = _mapping(path, "--config")
    fmt = fmt or detect(doc)
    origin, skipped = {}, []
    if launch_path is not None:
        launch_path = Path(launch_path).expanduser()
        launch_doc = _mapping(launch_path, "--launch-config")
        try:
            parallel.check(launch_doc)
            doc, origin, skipped = launch.merged(doc, launch_doc, str(launch_path), fmt)
        except Invalid as exc:
            raise ConfigError(f"--launch-config {launch_path}: {exc}", exc.beyond) from None
    try:   # a preference or RL stage: an SFT answer would be too low (trainconfig/stage.py); tensor, context,
        stage.check(doc, fmt)   # sequence or pipeline parallelism, or HSDP: another run's answer (trainconfig/parallel.py)
        parallel.check(doc)
    except Invalid as exc:
        raise ConfigError(f"--config {path}: {exc}", exc.beyond) from None
    if fmt is None:
        raise ConfigError(f"--config {path}: not a TRL/transformers, axolotl, LLaMA-Factory or torchtune config "
                          f"(none of their keys); name the format with --format")
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt}: one of {', '.join(FORMATS)}")
    try:
        recipe = FORMATS[fmt](doc, str(path))
    except Invalid as exc:   # a memory-relevant value that cannot be what the config means
        top = exc.key.split(".", 1)[0]
        if top in origin:    # set by the launch file: named there
            raise ConfigError(f"--launch-config {launch_path}: {origin[top].split(': ', 1)[1]}"
                              f"{exc.key[len(top):]}: {exc.shown}: {exc.reason}") from None
        raise ConfigError(f"--config {path}: {exc}") from None
    for key in PROCESS_KEYS:  # processes, where the config states them (accelerate/torchrun spellings)
        if isinstance(doc.get(key), int) and not isinstance(doc[key], bool) and doc[key] >= 1:
            recipe.ignored = [i for i in recipe.ignored if i["key"] != key]
            recipe.world = doc[key]
            recipe.took(key, doc[key], f"{doc[key]} processes (w{doc[key]} with ZeRO/FSDP)")
            break
    deepspeed_fp16(recipe)
    for item in recipe.mapped + recipe.ignored:   # what the launch file set is named as it is written there
        top = item["key"].split(".", 1)[0]
        if top in origin:
            item["key"] = origin[top] + item["key"][len(top):]
    for key, value, why in skipped:
        recipe.skip(f"{launch_path.name}: {key}", value, why)
    try:
        recipe.techniques()
    except ValueError as exc:
        raise ConfigError(f"--config {path}: its settings make no valid recipe: {exc}") from None
    return recipe
