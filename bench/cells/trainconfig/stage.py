"""A config for a preference or RL stage (DPO and its kin, GRPO, PPO, a reward model) is refused.

ft-membench simulates a supervised (or pre-training) step. A DPO step runs the rejected sequences
beside the chosen ones and a reference model; GRPO generates several completions per prompt and
holds a reference model; PPO holds reward, value and reference models. Answered as the SFT step
that the same config's other keys describe, such a config would get a figure that is too low,
and the guard could say "fits" for a run that dies. So it gets no answer: ``check`` raises
recipe.Invalid naming the key that says which stage, and what the stage adds. Torch-free.

Each format says the stage its own way:
- LLaMA-Factory: ``stage`` (pt and sft are supervised; rm, ppo, dpo, kto are not);
- axolotl: ``rl`` (dpo, ipo, kto, orpo, simpo, grpo, ...), ``reward_model``, ``process_reward_model``;
- TRL: keys only its preference and RL configs have (DPOConfig, KTOConfig, ORPOConfig, CPOConfig,
  GRPOConfig, PPOConfig, RewardConfig in TRL 1.16), for example ``beta``, ``num_generations``,
  ``precompute_ref_log_probs``, ``desirable_weight``;
- torchtune: a loss of ``torchtune.rlhf`` / ``torchtune.modules.rlhf`` (DPOLoss, PPOLoss...), as its
  DPO and PPO recipes' configs set it.
"""
from __future__ import annotations

from bench.cells.trainconfig.recipe import Invalid

WHAT = {
    "dpo": "the rejected sequences beside the chosen ones, and a reference model's forward (the base with the "
           "adapters disabled under PEFT, a second copy otherwise, unless its log-probabilities are precomputed)",
    "kto": "a reference model's forward and a mismatched KL batch beside each batch",
    "orpo": "the rejected sequences beside the chosen ones",
    "grpo": "generation of several completions per prompt (a KV cache, or vLLM beside the trainer) and their "
            "log-probabilities, and a reference model when beta > 0",
    "ppo": "generation, and a reward model, a value model and a reference model beside the policy",
    "rm": "a reward head over the chosen and the rejected sequences",
}
KIN = {"ipo": "dpo", "rso": "dpo", "simpo": "orpo", "cpo": "orpo", "reward": "rm", "gkd": "grpo", "online_dpo": "grpo",
       "rloo": "grpo"}  # a stage WHAT does not name -> the one whose memory it shares

# Keys only TRL's preference/RL configs have (none is a TrainingArguments or SFTConfig key in TRL 1.16)
TRL_KEYS = {
    "precompute_ref_log_probs": "dpo", "ref_model_init_kwargs": "dpo", "rpo_alpha": "dpo", "ref_adapter_name": "dpo",
    "sync_ref_model": "dpo", "ref_model_mixup_alpha": "dpo", "use_weighting": "dpo", "max_prompt_length": "dpo",
    "desirable_weight": "kto", "undesirable_weight": "kto",
    "num_generations": "grpo", "max_completion_length": "grpo", "use_vllm": "grpo", "vllm_mode": "grpo",
    "vllm_gpu_memory_utilization": "grpo", "reward_weights": "grpo", "num_iterations": "grpo",
    "num_ppo_epochs": "ppo", "kl_coef": "ppo", "vf_coef": "ppo", "cliprange_value": "ppo", "reward_model_path": "ppo",
    "center_rewards_coefficient": "rm",
    "beta": "dpo",
}
RLHF_COMPONENTS = {"DPOLoss": "dpo", "RSOLoss": "dpo", "IPOLoss": "dpo", "SimPOLoss": "orpo", "PPOLoss": "ppo"}


PRIORITY = ("grpo", "ppo", "kto", "rm", "dpo")  # a key of several configs (beta) yields to one of its own


def _refuse(key: str, value, stage: str, keys: tuple = ()) -> None:
    kind = KIN.get(stage, stage)
    drop = f"remove the stage's keys ({', '.join(keys)})" if len(keys) > 1 else "remove this key"
    raise Invalid(key, value, f"a {stage.upper()} stage, which ft-membench does not simulate: only a supervised "
                              f"or pre-training step is. Besides that step, {stage.upper()} runs "
                              f"{WHAT.get(kind, 'more than one model or more than one forward per batch')}, so the "
                              f"SFT answer for this config's other settings would be too low, and no answer is "
                              f"given. To ask about the supervised step alone, {drop}", beyond=kind)


def _components(doc, path=""):
    for key, value in doc.items():
        where = f"{path}.{key}" if path else str(key)
        if isinstance(value, dict):
            yield from _components(value, where)
        elif key == "_component_" and isinstance(value, str):
            yield where, value


def check(doc: dict, fmt: str | None) -> None:
    """Invalid when ``doc`` configures a stage that is not a supervised or pre-training step."""
    stage = doc.get("stage")
    if fmt in (None, "llamafactory") and isinstance(stage, str) and stage.lower() not in ("pt", "sft"):
        _refuse("stage", stage, stage.lower())
    if fmt in (None, "axolotl"):
        rl = doc.get("rl")
        if rl not in (None, False, "", "none", "None"):
            _refuse("rl", rl, str(rl).lower())
        for key in ("reward_model", "process_reward_model"):
            if doc.get(key) is True:
                _refuse(key, True, "rm")
    if fmt in (None, "trl"):
        found = [key for key in TRL_KEYS if doc.get(key) is not None]
        if found:
            kind = min((TRL_KEYS[k] for k in found), key=PRIORITY.index)
            key = next(k for k in found if TRL_KEYS[k] == kind)
            _refuse(key, doc[key], kind, tuple(found))
    if fmt in (None, "torchtune"):
        for where, name in _components(doc):
            leaf = name.rsplit(".", 1)[-1]
            if ".rlhf." in name or leaf in RLHF_COMPONENTS:
                _refuse(where, name, RLHF_COMPONENTS.get(leaf, "ppo" if "ppo" in name.lower() else "dpo"))
