"""Build the model a cell trains: architecture config from matrix/, weights random or loaded
from a local checkpoint, then precision, adapters and checkpointing as the knobs say.

No hub access: configs are files in matrix/models/; checkpoints are made locally from the
random-init model (``checkpoint_dir``) and cached, so ``from_pretrained`` paths (QLoRA's
4-bit load, ``low_cpu_mem_usage``) run for real. A cached checkpoint is found by the digest
of what it was made from (config content, seed, library versions), never by the model's name
alone: an edited config gets a new checkpoint, not the old weights under the new name.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers

from bench.cells import inputs

ATTN = {"sdpa": "sdpa", "eager": "eager", "fa2": "flash_attention_2"}
CACHE = Path(os.environ.get("FT_MEMBENCH_CACHE", Path(__file__).resolve().parents[2] / "results" / "cache"))
KEY_FILE = "ft-membench-key.json"  # beside the weights: what the checkpoint was made from


def load_config(path: str, attn: str, trust_remote_code: bool = False) -> transformers.PretrainedConfig:
    """The architecture config at ``path`` (a config.json: matrix/models/, a local file, a
    Hugging Face cache snapshot). A model_type transformers does not know is built from the
    code beside the file only with ``trust_remote_code`` (the user's opt-in, bench/cells/modelref.py)."""
    raw = {k: v for k, v in json.loads(Path(path).read_text()).items() if not k.startswith("_")}
    if trust_remote_code and raw.get("auto_map", {}).get("AutoConfig"):
        config = transformers.AutoConfig.from_pretrained(Path(path).parent, trust_remote_code=True,
                                                         local_files_only=True)
    else:
        config = transformers.AutoConfig.for_model(**raw)
    config._attn_implementation = ATTN[attn]
    config.use_cache = False
    return config


def param_dtype(knobs: dict) -> torch.dtype:
    """Weights' dtype: bf16 only for pure bf16; autocast keeps fp32 master weights."""
    return torch.bfloat16 if knobs["precision"] == "bf16" else torch.float32


def remote_code(config) -> bool:
    """Whether ``config`` came from a model's own code (loaded only where the user trusted it)."""
    return type(config).__module__.startswith("transformers_modules")


def random_init(config, knobs: dict, device) -> torch.nn.Module:
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=param_dtype(knobs),
                                                              trust_remote_code=remote_code(config))
    return model


def moe_facts(model) -> dict:
    """What a mixture-of-experts model's record says of its experts: transformers' experts
    implementation (``grouped_mm`` by default, the CUDA kernel on sm80+, torch >= 2.9), how many
    parameters sit in fused 3D expert tensors, their dtypes, and whether any is quantized
    (bitsandbytes 4-bit replaces ``nn.Linear`` modules only: fused experts keep their dtype)."""
    experts = [m for m in model.modules() if hasattr(m, "num_experts") and not isinstance(m, torch.nn.Linear)
               and any(p.dim() == 3 for p in m.parameters(recurse=False))]
    if not experts:
        return {}
    params = [p for m in experts for p in m.parameters(recurse=False)]
    quantized = any(getattr(p, "quant_state", None) is not None for p in params)
    dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
    facts = {"experts_implementation": getattr(model.config, "_experts_implementation", None),
             "expert_modules": len(experts), "expert_params": sum(p.numel() for p in params),
             "expert_dtypes": dtypes, "experts_quantized": quantized}
    if not quantized and any(getattr(p, "quant_state", None) is not None for p in model.parameters()):
        facts["note"] = (f"bitsandbytes 4-bit (transformers' replace_with_bnb_linear) quantizes nn.Linear modules "
                         f"only: the fused 3D expert weights ({facts['expert_params']:,} params) stay "
                         f"{'/'.join(dtypes)}, not NF4")
    return {"moe": facts}


def checkpoint_key(config_path: str, seed: int) -> dict:
    """Everything a saved random-init checkpoint depends on: the config's content, the seed,
    and the libraries that drew the weights (torch) and wrote them (transformers)."""
    return {"model_config": json.loads(Path(config_path).read_text()), "seed": seed,
            "transformers": transformers.__version__, "torch": torch.__version__}


def checkpoint_path(model: str, key: dict) -> Path:
    return CACHE / "checkpoints" / f"{model[:64]}-{inputs.digest(key)[:16]}"


def checkpoint_dir(spec: dict) -> Path:
    """A local fp32 checkpoint of the model's random init, saved once per key and reused. It
    is saved by a child process, so that this worker's load-phase host RSS is loading only."""
    path = checkpoint_path(spec["model"], checkpoint_key(spec["model_config"], spec["seed"]))
    if not (path / "config.json").is_file():
        subprocess.run([sys.executable, "-m", "bench.worker.models", spec["model_config"], str(spec["seed"]),
                        spec["model"], str(path)] + (["trust"] if spec.get("trust_remote_code") else []), check=True)
    return path


def save_checkpoint(config_path: str, seed: int, model: str, path: Path, trust_remote_code: bool = False) -> None:
    """python -m bench.worker.models CONFIG.json SEED MODEL OUT_DIR [trust]: save the seeded random
    init there, if OUT_DIR is still the path of the config's content (it was not edited since)."""
    key = checkpoint_key(config_path, seed)
    if checkpoint_path(model, key) != path:
        raise SystemExit(f"{config_path} changed while its checkpoint {path} was being made: run the cell again")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    torch.manual_seed(seed)
    config = load_config(config_path, "sdpa", trust_remote_code)
    transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                  trust_remote_code=remote_code(config)).save_pretrained(tmp)
    (tmp / KEY_FILE).write_text(json.dumps(key, indent=1, sort_keys=True))
    try:
        tmp.rename(path)
    except OSError:  # another worker finished first: theirs is the same bytes
        shutil.rmtree(tmp, ignore_errors=True)


def from_checkpoint(spec: dict, config, knobs: dict, device, **extra) -> torch.nn.Module:
    """``from_pretrained`` on the local checkpoint. transformers 5.x accepts and silently
    drops ``low_cpu_mem_usage`` (it always loads lazily); the flag is still passed, so the
    record's load-phase host RSS shows what it does in the installed version."""
    kwargs = dict(dtype=param_dtype(knobs), attn_implementation=config._attn_implementation,
                  device_map={"": str(device)}, **extra)
    low_cpu = knobs["load"] == "checkpoint-low-cpu-mem-usage"
    if low_cpu:
        kwargs["low_cpu_mem_usage"] = True
    path = checkpoint_dir(spec)
    model = transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=remote_code(config), **kwargs)
    model._bench_load_facts = {"loaded_from": "checkpoint", "name_or_path": str(model.name_or_path),
                               "low_cpu_mem_usage_passed": low_cpu}
    return model


def kbit_extras_dtype(knobs: dict) -> torch.dtype:
    """QLoRA's non-quantized weights (embeddings, norms, LM head): bf16 as torchtune, Unsloth
    and LLaMA-Factory keep them (``qlora``), or fp32 as peft's ``prepare_model_for_kbit_training``
    upcasts them in the original QLoRA recipe (``qlora-fp32``)."""
    return torch.float32 if knobs["kbit_extras"] == "fp32" else torch.bfloat16


def finish_kbit(model, knobs: dict):
    """The base of a QLoRA model after quantization: frozen, its other weights in the
    ``kbit_extras`` dtype (peft's preparation for fp32, a plain cast for bf16)."""
    if knobs["kbit_extras"] == "fp32":
        import peft
        # peft upcasts every 16-bit parameter but bitsandbytes' Params4bit (by class name); the 4-bit
        # weights stored in bf16 (quant_storage) are held aside so that sim's, plain parameters
        # carrying the quant state, stay packed as peft leaves a real load's
        held = [(m, m._parameters.pop("weight")) for m in list(model.modules())
                if getattr(m._parameters.get("weight"), "quant_state", None) is not None
                and m._parameters["weight"].dtype.is_floating_point]
        # checkpointing is enabled by build() like every other cell, non-reentrant
        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
        for m, w in held:
            m._parameters["weight"] = w
        return model
    for p in model.parameters():
        if p.dtype.is_floating_point and p.dtype != torch.bfloat16:
            p.data = p.data.to(torch.bfloat16)
    return model.requires_grad_(False)  # get_peft_model adds trainable adapters


def quant_storage(knobs: dict) -> torch.dtype:
    """The dtype bitsandbytes packs the 4-bit weights in (``bnb_4bit_quant_storage``): uint8, or
    bf16 where FSDP or ZeRO-3 shards them with the model's other bf16 tensors (knob ``quant_storage``,
    set by bench/cells/techniques.py)."""
    return torch.bfloat16 if knobs.get("quant_storage") == "bf16" else torch.uint8


def qlora_config(knobs: dict) -> transformers.BitsAndBytesConfig:
    """The QLoRA recipe's quantization, for a real load and for sim's alike: NF4 (double quantization
    unless ``nf4-no-dq``), bf16 compute (fp16 under amp-fp16), packed in ``quant_storage``."""
    compute = torch.float16 if knobs["precision"] == "amp-fp16" else torch.bfloat16
    return transformers.BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=knobs["double_quant"],
        bnb_4bit_compute_dtype=compute, bnb_4bit_quant_storage=quant_storage(knobs))


def kbit_extras(knobs: dict) -> str:
    """The dtype QLoRA's non-quantized weights load in: bf16 under pure bf16, else ``kbit_extras``."""
    return "bf16" if knobs["precision"] == "bf16" else knobs["kbit_extras"]


def load_qlora_base(spec: dict, config, device) -> torch.nn.Module:
    """NF4 base weights (``qlora_config``): the QLoRA recipe; the other weights as
    ``kbit_extras_dtype`` says."""
    knobs = spec["knobs"]
    load = knobs["load"] if knobs["load"] != "random-init" else "checkpoint"
    extras = kbit_extras(knobs)
    model = from_checkpoint(spec, config, {**knobs, "precision": extras, "load": load}, device,
                            quantization_config=qlora_config(knobs))
    return finish_kbit(model, {**knobs, "kbit_extras": extras})


def add_lora(model, options: dict, knobs: dict):
    """peft LoRA with the study's options; ``lora-all`` targets every linear layer but the LM
    head (peft's ``all-linear``), ``dora`` adds DoRA's magnitude vectors. ``adapter_dtype``:
    fp32 (peft's default, which upcasts the adapters) or bf16 (torchtune's: the whole model,
    adapters included, in bf16)."""
    import peft
    from bench.cells.catalogue import LORA_DEFAULTS
    opts = {**LORA_DEFAULTS, **options}  # a spec from the matrix holds them all already
    targets = "all-linear" if knobs["lora_targets"] == "all-linear" else opts["target_modules"]
    config = peft.LoraConfig(r=opts["r"], lora_alpha=opts["alpha"], lora_dropout=opts["dropout"],
                             target_modules=targets, use_dora=knobs["dora"], task_type="CAUSAL_LM")
    if opts.get("adapter_dtype", "fp32") == "fp32":  # peft's default: adapters upcast to fp32
        return peft.get_peft_model(model, config)
    model = peft.get_peft_model(model, config, autocast_adapter_dtype=False)
    for p in model.parameters():  # bf16 adapters, as torchtune's bf16 recipes train them
        if p.requires_grad and p.dtype.is_floating_point:
            p.data = p.data.to(torch.bfloat16)
    return model


def enable_checkpointing(model, reentrant: bool = False) -> None:
    """transformers' checkpointing of each decoder layer: torch's non-reentrant checkpoint (transformers' default)
    or, with ``reentrant``, the reentrant one, whose forward runs without a graph (PEFT's and older Trainers'
    ``use_reentrant: true``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    enable = getattr(base, "activation_checkpointing_enable", None) or base.gradient_checkpointing_enable
    enable({"use_reentrant": reentrant})


def build(spec: dict, device, qlora_base=None) -> torch.nn.Module:
    """The model for ``spec``, ready to train: weights, precision, adapters, checkpointing.
    ``qlora_base(spec, config, device)`` builds QLoRA's 4-bit base (default: this module's,
    from a local checkpoint; sim mode passes one that needs no checkpoint)."""
    knobs = spec["knobs"]
    config = load_config(spec["model_config"], knobs["attn"], spec.get("trust_remote_code", False))
    torch.manual_seed(spec["seed"])
    if knobs["adapter"] == "qlora":
        model = (qlora_base or load_qlora_base)(spec, config, device)
    elif knobs["load"] != "random-init":
        model = from_checkpoint(spec, config, knobs, device)
    else:
        model = random_init(config, knobs, device)
        model._bench_load_facts = {"loaded_from": "random-init"}
    model._bench_load_facts = {**getattr(model, "_bench_load_facts", {}), **moe_facts(model)}
    if knobs["adapter"] in ("lora", "qlora"):
        model = add_lora(model, spec["options"].get("lora", {}), knobs)
    if knobs.get("cast_module") == "bf16":  # sim's stand-in for DeepSpeed's bf16 engine: its weights
        for p in model.parameters():      # in bf16, buffers (rotary tables) left as they are, as measured
            if p.dtype.is_floating_point:
                p.data = p.data.to(torch.bfloat16)
    if knobs["gc"]:
        enable_checkpointing(model, reentrant=knobs["gc"] == "reentrant")
    model.train()
    return model


if __name__ == "__main__":
    save_checkpoint(sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), sys.argv[5:] == ["trust"])
