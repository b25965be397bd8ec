"""accelerate's config file (``accelerate launch --config_file FILE``, what ``accelerate config`` writes):
the launcher's half of a run whose training half is ``--config``.

TRL's and axolotl's multi-GPU recipes keep the sharding engine and the process count there, not in the
training config (TRL's ``examples/accelerate_configs/deepspeed_zero3.yaml``, ``fsdp2.yaml``;
``accelerate launch --config_file ... trl sft --config sft.yaml``). Read without it, such a run is answered
as one process. ``merged`` turns the launcher's settings into the training-config keys the HF Trainer
ends up with, so the format's reader (hf.py, axolotl.py, llamafactory.py) reads them by its one rule:

- ``distributed_type: FSDP`` and ``fsdp_config`` -> ``fsdp`` / ``fsdp_config`` (bench/cells/trainconfig/
  fsdpmode.py reads the version, the sharding strategy, offload, activation checkpointing);
- ``distributed_type: DEEPSPEED`` and ``deepspeed_config`` (``zero_stage``, ``offload_optimizer_device``,
  ``offload_param_device``, or ``deepspeed_config_file``, relative to the launch file) -> ``deepspeed``;
- ``num_processes`` -> the processes (the world size of the sharding engine);
- ``mixed_precision`` -> ``bf16``/``fp16`` where the training config sets neither true: transformers'
  TrainingArguments keeps the launcher's ``ACCELERATE_MIXED_PRECISION`` unless ``bf16``/``fp16`` is set
  (training_args.py ``__post_init__``);
- ``parallelism_config_*`` and ``megatron_lm_config``: refused as the training config's are (parallel.py).

Where both files set the engine, the training config's settings are the ones the Trainer applies
(``TrainingArguments.fsdp``/``deepspeed`` set accelerate's environment after the launcher), so the launcher's
are listed as ignored; two different engines, or two process counts, are refused: one run cannot be both.
Every other launcher setting is listed, with why it does not change the answer. Torch-free.
"""
from __future__ import annotations

from pathlib import Path

from bench.cells.trainconfig.recipe import Invalid, _true

ENGINE_KEYS = ("fsdp", "fsdp_config", "deepspeed")
LAUNCHER_ONLY = ("compute_environment", "debug", "machine_rank", "main_process_ip", "main_process_port",
                 "main_training_function", "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster",
                 "tpu_use_sudo", "use_cpu", "gpu_ids", "enable_cpu_affinity", "dynamo_config", "downcast_bf16",
                 "ipex_config", "mpirun_config")
KNOWN_TYPES = ("NO", "MULTI_GPU", "FSDP", "DEEPSPEED")


def _stage(value) -> int:
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or int(text) not in (0, 1, 2, 3):
        raise Invalid("deepspeed_config.zero_stage", value, "ZeRO's stage is 0, 1, 2 or 3")
    return int(text)


def _deepspeed(cfg: dict, folder: Path):
    """The launcher's DeepSpeed settings as a DeepSpeed config (or the path of the one it names)."""
    if cfg.get("deepspeed_config_file"):
        path = Path(str(cfg["deepspeed_config_file"])).expanduser()
        return str(path if path.is_absolute() else folder / path)
    zero = {"stage": _stage(cfg.get("zero_stage", 0))}
    for key, name in (("offload_optimizer_device", "offload_optimizer"), ("offload_param_device", "offload_param")):
        device = str(cfg.get(key) or "none").strip().lower()
        if device not in ("none", "cpu", "nvme"):
            raise Invalid(f"deepspeed_config.{key}", cfg.get(key), "one of none, cpu, nvme")
        if device != "none":
            zero[name] = {"device": device}
    return {"zero_optimization": zero}


def merged(doc: dict, launch: dict, launch_file: str, fmt: str | None) -> tuple[dict, dict, list[tuple]]:
    """(the training config with the launcher's settings in, {training key: the launch setting it came from},
    [(launch key, value, why it is not read)]). ``Invalid`` names the launch file's key."""
    if fmt == "torchtune":
        raise Invalid("--launch-config", launch_file, "torchtune runs under `tune run` (torchrun), not accelerate "
                                                      "launch: give the processes with --gpus")
    out, origin, skipped = dict(doc), {}, []
    name = Path(launch_file).name
    kind = str(launch.get("distributed_type", "NO")).strip().upper()
    if kind not in KNOWN_TYPES:
        raise Invalid("distributed_type", launch.get("distributed_type"),
                      f"ft-membench answers {', '.join(KNOWN_TYPES)} (GPU data parallelism, FSDP, DeepSpeed)")
    if kind == "FSDP" or kind == "DEEPSPEED":
        engine = {"fsdp": "fsdp", "fsdp_config": "fsdp", "deepspeed": "deepspeed"}
        theirs = {engine[k] for k in ENGINE_KEYS if doc.get(k)}
        ours = "fsdp" if kind == "FSDP" else "deepspeed"
        if theirs and theirs != {ours}:
            raise Invalid("distributed_type", kind, f"the training config sets {', '.join(sorted(theirs))}: one run "
                                                    "has one sharding engine; make the two files agree")
        if theirs:
            skipped.append(("distributed_type", kind, f"the training config's {ours} settings are the ones the "
                                                       "Trainer applies"))
        elif kind == "FSDP":
            out["fsdp"] = True
            cfg = launch.get("fsdp_config") if isinstance(launch.get("fsdp_config"), dict) else {}
            # accelerate's FullyShardedDataParallelPlugin: no fsdp_auto_wrap_policy is NO_WRAP (one unit)
            out["fsdp_config"] = {"fsdp_auto_wrap_policy": "NO_WRAP", **cfg}
            origin.update(fsdp=f"{name}: distributed_type", fsdp_config=f"{name}: fsdp_config")
        else:
            cfg = launch.get("deepspeed_config") if isinstance(launch.get("deepspeed_config"), dict) else {}
            out["deepspeed"] = _deepspeed(cfg, Path(launch_file).expanduser().absolute().parent)
            origin["deepspeed"] = f"{name}: deepspeed_config"
    n = launch.get("num_processes")
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise Invalid("num_processes", n, "not a positive integer")
        stated = next((doc[k] for k in ("num_processes", "nproc_per_node", "world_size") if k in doc), None)
        if stated is not None and stated != n:
            raise Invalid("num_processes", n, f"the training config states {stated} processes: make the two agree")
        if stated is None:
            out["num_processes"] = n
            origin["num_processes"] = f"{name}: num_processes"
    machines = launch.get("num_machines")
    if isinstance(machines, int) and machines > 1:
        skipped.append(("num_machines", machines, "the host memory is answered for every rank on one node"))
    precision = str(launch.get("mixed_precision") or "no").strip().lower()
    if precision in ("bf16", "fp16"):
        if fmt == "axolotl":
            skipped.append(("mixed_precision", precision, "axolotl sets the precision from its own bf16/fp16"))
        elif not (_true(doc.get("bf16")) or _true(doc.get("fp16"))):
            out[precision] = True
            origin[precision] = f"{name}: mixed_precision"
        else:
            skipped.append(("mixed_precision", precision, "the training config's bf16/fp16 is what the Trainer runs"))
    elif precision not in ("no", "none"):
        raise Invalid("mixed_precision", launch.get("mixed_precision"), "ft-membench answers no, bf16 or fp16")
    read = {"distributed_type", "fsdp_config", "deepspeed_config", "num_processes", "num_machines", "mixed_precision"}
    for key, value in launch.items():
        if key in read or (key.startswith("parallelism_config") or key == "megatron_lm_config"):
            continue
        skipped.append((key, value, "a launcher setting with no bearing on a rank's memory" if key in LAUNCHER_ONLY
                        else "not a setting of the training step's memory that ft-membench models"))
    return out, origin, skipped
