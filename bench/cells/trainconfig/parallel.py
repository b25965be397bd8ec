"""A config that shards a model by tensor, context, sequence or pipeline parallelism, or replicates
its FSDP shards (HSDP), is refused.

ft-membench simulates data parallelism (ZeRO, FSDP: every process holds a 1/N shard of the states
and its own whole micro-batch). The other parallelisms change what one GPU holds in ways that rule
does not give:
- tensor parallelism shards each linear layer's weight and its activations across the group, and
  adds the collectives' outputs (transformers' ``tp_plan``, accelerate's ``tp_size``, axolotl's
  ``tensor_parallel_size``, torchtune's ``tensor_parallel_dim``);
- context and sequence parallelism split each sequence across the group (ring attention's buffers,
  Ulysses' all-to-all): a rank holds a fraction of the activations (accelerate's ``cp_size`` and
  ``sp_size``, axolotl's ``context_parallel_size`` and its older ``sequence_parallel_degree``,
  torchtune's ``context_parallel_dim``);
- pipeline parallelism puts a stage of the layers on each GPU, and the schedule keeps several
  micro-batches' activations in flight on the first stage;
- replicated shards (HSDP, ``dp_replicate_size`` > 1) shard the states over a group smaller than the
  processes: answered as FSDP over every process, the states would come out too small.

Answered as the data-parallel run the config's other keys describe, such a config would get another
run's figure; for HSDP a figure too low, so the guard could say "fits" for a run that dies. So it gets
no answer: ``check`` raises recipe.Invalid naming the key. A
degree of 1 (or none) is no parallelism and passes. Torch-free.
"""
from __future__ import annotations

from bench.cells.trainconfig.recipe import Invalid

WHAT = {
    "tensor": "tensor parallelism (each linear layer's weight and activations split across the group, and the "
              "collectives' outputs)",
    "context": "context parallelism (each sequence split across the group, with ring attention's buffers)",
    "sequence": "sequence parallelism (each sequence split across the group, with Ulysses' all-to-all buffers)",
    "pipeline": "pipeline parallelism (a stage of the layers per GPU, and the micro-batches' activations the "
                "schedule keeps in flight)",
    "replicate": "replicated FSDP shards (HSDP: the states shard over a group smaller than the processes, so an "
                 "FSDP answer over every process would be too low)",
}
# a config key -> the parallelism a degree above 1 asks for, in every format that spells it so
DEGREE_KEYS = {
    "tensor_parallel_size": "tensor", "tp_size": "tensor", "tensor_parallel_dim": "tensor",
    "context_parallel_size": "context", "cp_size": "context", "context_parallel_dim": "context",
    "sequence_parallel_degree": "context",   # axolotl's name for its ring-attention context parallelism
    "sequence_parallel_size": "sequence", "sp_size": "sequence", "ulysses_sequence_parallel_size": "sequence",
    "pipeline_parallel_size": "pipeline", "pp_size": "pipeline", "pipeline_parallel_dim": "pipeline",
    "dp_replicate_size": "replicate", "data_parallel_replicate_dim": "replicate",
}
PLAN_KEYS = ("tp_plan", "tensor_parallel_plan")   # transformers' from_pretrained(tp_plan=...), torchtune's
NESTED = ("parallelism_config", "model_init_kwargs", "model_kwargs")  # where TRL/accelerate put them
ACCELERATE_PREFIX = "parallelism_config_"   # accelerate's config file: parallelism_config_tp_size, ...


def _degree(key: str, value):
    """The parallel degree a value states: an int (or digit string) >= 1; None when unset."""
    if value is None or value is False:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise Invalid(key, value, "a parallel degree is a whole number of processes (1: none)")
    n = int(str(value).strip())
    if n < 1:
        raise Invalid(key, value, "a parallel degree is at least 1 (1: none)")
    return n


def _refuse(key: str, value, kind: str) -> None:
    raise Invalid(key, value, f"{WHAT[kind]}, which ft-membench does not simulate: it simulates data parallelism "
                              f"(ZeRO, FSDP). Answered as the data-parallel run this config's other keys describe, "
                              f"the figure would be another run's, and no answer is given. To ask about the run "
                              f"without it, set {key.rsplit('.', 1)[-1]} to 1 or remove it", beyond=kind)


def _settings(doc: dict, path: str = ""):
    """(key as written, its name without accelerate's prefix, value), at the top and in NESTED mappings."""
    for key, value in doc.items():
        where = f"{path}.{key}" if path else str(key)
        if isinstance(value, dict) and key in NESTED:
            yield from _settings(value, where)
        elif isinstance(key, str):
            yield where, key.removeprefix(ACCELERATE_PREFIX), value


def check(doc: dict) -> None:
    """Invalid when ``doc`` asks for a parallelism other than data parallelism (module docstring)."""
    for where, name, value in _settings(doc):
        if name in DEGREE_KEYS and (_degree(where, value) or 1) > 1:
            _refuse(where, value, DEGREE_KEYS[name])
        if name in PLAN_KEYS and value not in (None, False, "", "none", "None"):
            _refuse(where, value if isinstance(value, str) else f"({type(value).__name__})", "tensor")
