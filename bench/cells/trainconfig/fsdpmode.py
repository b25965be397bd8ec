"""FSDP as a training config asks for it: which engine (FSDP1 or FSDP2), which sharding, offload, and
FSDP's own activation checkpointing, in the catalogue's terms (``fsdp1``, ``fsdp``, ``fsdp-offload``, ``gc``).

The settings are read where the libraries read them:

- transformers' ``fsdp`` (a string or list of ``FSDPOption``: ``full_shard``, ``shard_grad_op``,
  ``no_shard``, ``hybrid_shard``, ``hybrid_shard_zero2``, ``offload``, ``auto_wrap``; axolotl passes the
  same list) and its ``fsdp_config`` (keys with or without the ``fsdp_`` prefix, which transformers strips:
  ``version``, ``sharding_strategy``, ``reshard_after_forward``, ``offload_params``, ``activation_checkpointing``);
- accelerate's config file (``fsdp_config`` with ``fsdp_version``, ``fsdp_sharding_strategy`` as a name or
  accelerate's number 1-5, ``fsdp_reshard_after_forward``, ``fsdp_offload_params``,
  ``fsdp_activation_checkpointing``, ``fsdp_auto_wrap_policy``), which bench/cells/trainconfig/launch.py hands
  here as the same keys.

What the catalogue simulates is full sharding (FSDP1's FULL_SHARD, FSDP2's ``reshard_after_forward=True``),
FSDP2 with CPU offload, and no sharding as data parallelism. Anything else is refused naming the key
(``Invalid``, exit 2): SHARD_GRAD_OP (ZeRO-2-like: every unit's parameters stay gathered from forward to
backward) and FSDP2 without resharding after forward hold more than full sharding, so the full-shard answer
would be low, the direction in which a guard says "fits" and the run dies; HSDP replicates across nodes
(bench/cells/trainconfig/parallel.py refuses its accelerate spelling too); FSDP1 with CPU offload
(``CPUOffload(offload_params=True)``) is not simulated, and answered as FSDP1 on the GPU it would be high by
every shard it moves; units other than the decoder layers (NO_WRAP, SIZE_BASED_WRAP) are not simulated either.
Torch-free.
"""
from __future__ import annotations

from bench.cells.trainconfig.recipe import Invalid, Recipe, _true

# accelerate's FSDP_SHARDING_STRATEGY, in its order (utils/constants.py: 1 FULL_SHARD ... 5 HYBRID_SHARD_ZERO2)
STRATEGIES = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2")
NOT_SIMULATED = {
    "shard_grad_op": "SHARD_GRAD_OP keeps every unit's parameters gathered from its forward to its backward "
                     "(ZeRO-2-like), more than full sharding holds; answered as full shard the figure would be low",
    "hybrid_shard": "HYBRID_SHARD (HSDP) shards within a node and replicates across nodes, which ft-membench does not "
                    "simulate",
    "hybrid_shard_zero2": "HYBRID_SHARD_ZERO2 (HSDP with SHARD_GRAD_OP within a node) is not simulated",
}

# accelerate's FSDP_AUTO_WRAP_POLICY: the catalogue's units are the decoder layers (TRANSFORMER_BASED_WRAP, the
# default of transformers' fsdp_config); accelerate's own default, where its config names none, is NO_WRAP
WRAPS = {"NO_WRAP": "NO_WRAP makes the whole model one FSDP unit, gathered whole in forward and backward; "
                    "ft-membench simulates one unit per decoder layer (TRANSFORMER_BASED_WRAP), and answered so the "
                    "figure would be low (accelerate's default where its config names no fsdp_auto_wrap_policy)",
         "SIZE_BASED_WRAP": "SIZE_BASED_WRAP units by parameter count (min_num_params) are not simulated; "
                            "ft-membench's units are the decoder layers (TRANSFORMER_BASED_WRAP)"}


def _config(doc: dict, recipe: Recipe) -> dict:
    """``fsdp_config`` with transformers' normalisation: the ``fsdp_`` prefix dropped. transformers also takes
    the path of a JSON file there: read as the DeepSpeed file is (bounded, relative to the config's folder)."""
    cfg = doc.get("fsdp_config")
    if isinstance(cfg, str) and cfg.strip():
        import json
        from pathlib import Path
        from bench.cells.trainconfig.reading import ReadError, read_text
        path = Path(cfg).expanduser()
        path = path if path.is_absolute() else Path(recipe.file).parent / path
        try:
            cfg = json.loads(read_text(path, "FSDP config"))
        except ReadError as exc:
            raise Invalid("fsdp_config", doc["fsdp_config"], str(exc)) from None
        except ValueError as exc:
            raise Invalid("fsdp_config", doc["fsdp_config"], f"the FSDP config {path} is not valid JSON: "
                                                           f"{' '.join(str(exc).split())}") from None
    if not isinstance(cfg, dict):
        return {}
    return {(k[5:] if isinstance(k, str) and k.startswith("fsdp_") else k): v for k, v in cfg.items()}


def _words(value) -> list[str]:
    """transformers' ``fsdp`` option words: a space-separated string, a list, or axolotl's ``true``."""
    if value is True or value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split()
    return [str(w).strip().lower() for w in items if str(w).strip()]


def _strategy(key: str, value) -> str:
    text = str(value).strip().lower()
    if text.isdigit() and 1 <= int(text) <= len(STRATEGIES):
        return STRATEGIES[int(text) - 1]
    if text in STRATEGIES:
        return text
    raise Invalid(key, value, f"not an FSDP sharding strategy ({', '.join(s.upper() for s in STRATEGIES)} or 1-5)")


def fsdp_dist(doc: dict, key: str, recipe: Recipe) -> None:
    """FSDP as accelerate runs it, into ``recipe.dist`` (and ``recipe.gc``): FSDP1 (``FullyShardedDataParallel``)
    unless the config asks for version 2 (``fsdp_version``/``version`` 2, at the top or in ``fsdp_config``:
    accelerate's FullyShardedDataParallelPlugin defaults to 1); its sharding, offload and activation
    checkpointing as the module docstring says. Invalid for what is not simulated."""
    cfg = _config(doc, recipe)
    cfg_key = "fsdp_config"
    version = cfg.get("version", doc.get("fsdp_version", 1))
    two = str(version).strip() == "2"
    words = _words(doc.get(key)) if key == "fsdp" else []
    # the sharding strategy and the setting it came from (the last one read wins, as transformers applies them)
    strategy, where, value = next((w for w in words if w in STRATEGIES), None), key, doc.get(key)
    for name in ("sharding_strategy", "reshard_after_forward"):
        setting = cfg.get(name)
        if setting is None or (name == "reshard_after_forward" and setting is True):
            continue
        where, value = f"{cfg_key}.{name}", setting
        if setting is False:   # reshard_after_forward: false is SHARD_GRAD_OP under FSDP1
            if two:
                raise Invalid(where, setting, "FSDP2 without resharding after forward keeps every unit's parameters "
                                              "gathered until its backward, more than full sharding holds; answered as "
                                              "full shard the figure would be low, and ft-membench does not simulate it")
            strategy = "shard_grad_op"
        else:   # a name or accelerate's number (accelerate >= 1.6 takes one in reshard_after_forward too)
            strategy = _strategy(where, setting)
    if strategy in NOT_SIMULATED:
        raise Invalid(where, value, NOT_SIMULATED[strategy])
    policy = str(cfg.get("auto_wrap_policy") or "TRANSFORMER_BASED_WRAP").strip().upper()
    if policy != "TRANSFORMER_BASED_WRAP":
        raise Invalid(f"{cfg_key}.auto_wrap_policy", cfg.get("auto_wrap_policy"), WRAPS.get(policy, "not an FSDP wrap policy"))
    offload_key = "offload" if "offload" in words else (f"{cfg_key}.offload_params"
                                                         if _true(cfg.get("offload_params")) else None)
    if _true(cfg.get("activation_checkpointing")):
        recipe.gc = True
        recipe.took(f"{cfg_key}.activation_checkpointing", cfg["activation_checkpointing"],
                    "gc (FSDP's activation checkpointing of each decoder layer)")
    if strategy == "no_shard":
        recipe.took(where, "no_shard", "no sharding: each rank holds the whole model, as DDP")
        return
    if offload_key and not two:
        raise Invalid(offload_key, True, "FSDP1 with CPU offload (CPUOffload(offload_params=True)) is not simulated; "
                                         "FSDP2's (fsdp_version: 2, fsdp-offload) is. Answered as FSDP1 on the GPU the "
                                         "figure would be high by every shard it moves")
    recipe.dist = "fsdp-offload" if offload_key else "fsdp" if two else "fsdp1"
    recipe.took(key, doc.get(key) or f"({key})", {"fsdp-offload": "fsdp-offload (FSDP2 with CPU offload)",
                                                  "fsdp": "fsdp (FSDP2: version 2)",
                                                  "fsdp1": "fsdp1 (FSDP1: accelerate's default fsdp_version 1)"}[recipe.dist])
    if offload_key:
        recipe.took(offload_key, True, "fsdp-offload: parameter, gradient and optimizer shards in host memory")
