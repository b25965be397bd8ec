"""Can transformers read these model configs, and which causal-LM class would it build?

    python -m bench.worker.configcheck < REQUEST.json > ANSWER.json

Run by bench/cells/modelref.py (torch-free, so it cannot import transformers itself) once per
config content and transformers version; the answer is cached there. REQUEST is a list of
``{"path": config.json, "trust_remote_code": bool}``; ANSWER the same list of
``{"ok": true, "config_class", "causal_lm"}`` (``causal_lm`` null with ``why`` where
transformers has no causal-LM class for it) or ``{"ok": false, "error": one line}``.
Nothing is downloaded: HF_HUB_OFFLINE is set by the caller, and a remote-code config is
read from the files beside it, only where the user opted in.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def check(path: str, trust_remote_code: bool) -> dict:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    raw = json.loads(Path(path).read_text())
    model_type = raw.get("model_type")
    auto_map = raw.get("auto_map") or {}
    if model_type not in CONFIG_MAPPING_NAMES:
        if not auto_map.get("AutoConfig"):
            return {"ok": False, "error": f"transformers {transformers.__version__} does not know model_type "
                                          f"{model_type!r} and the config names no code for it (auto_map)"}
        if not trust_remote_code:
            return {"ok": False, "error": f"model_type {model_type!r} is not in transformers "
                                          f"{transformers.__version__}; its config names its own code "
                                          f"(auto_map: {auto_map['AutoConfig']}), which runs only with "
                                          "trust_remote_code, off unless you opt in for this model"}
    try:
        if model_type in CONFIG_MAPPING_NAMES:
            config = transformers.AutoConfig.for_model(**{k: v for k, v in raw.items() if not k.startswith("_")})
        else:
            config = transformers.AutoConfig.from_pretrained(Path(path).parent, trust_remote_code=True,
                                                             local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever transformers raises is the answer
        return {"ok": False, "error": f"transformers {transformers.__version__} cannot read it: "
                                      f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    elif model_type not in CONFIG_MAPPING_NAMES and auto_map.get("AutoModelForCausalLM"):
        causal = auto_map["AutoModelForCausalLM"]
    else:
        causal = None
    out = {"ok": True, "config_class": type(config).__name__, "causal_lm": causal}
    if causal is None:
        out["why"] = (f"transformers {transformers.__version__} has no causal-LM class (AutoModelForCausalLM) "
                      f"for model_type {model_type!r} ({type(config).__name__}): this benchmark fine-tunes causal LMs")
    return out


def main() -> int:
    request = json.load(sys.stdin)
    json.dump([check(item["path"], item["trust_remote_code"]) for item in request], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
