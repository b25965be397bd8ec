"""The fit command's question as matrix cells: a one-study matrix written for the asked model,
techniques and shape, loaded by bench.cells.matrix (``specs``), so every cell is the matrix's own
spec and a study's stored record answers for it where the shape agrees. Also the GPU profiles a
question may name (``cuda_profiles``) and the default techniques (the default matrix's 7-8B
study's). What the matrix loader refuses is a ``Usage`` error in its words. Torch-free.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import yaml

from bench.fit.question import Usage
from bench.cells import matrix, matrixfile
from bench.cells.techniques import MAXIMUMS, MINIMUMS, canonical

DEFAULT_STUDY = "sim-7b-8b"  # its techniques are the default list

MALFORMED = ("not valid JSON", "must be a JSON object", "model_type missing", "cannot read it")  # bench/cells/modelref.py


def cuda_profiles() -> list[str]:
    """The GPU profiles a question may name (matrix/gpus.yaml's cuda ones)."""
    try:
        gpus = yaml.load((matrix.DEFAULT_MATRIX.parent / "gpus.yaml").read_text(), Loader=matrixfile.SAFE_LOADER)
    except (OSError, ValueError, matrix.MatrixError):
        return []
    return [g for g, p in gpus.items() if isinstance(p, dict) and p.get("kind") == "cuda"]


def default_techniques() -> list[str]:
    doc = yaml.load(matrix.DEFAULT_MATRIX.read_text(), Loader=matrixfile.SAFE_LOADER)
    return list(doc["studies"][DEFAULT_STUDY]["techniques"])


def matrix_spellings() -> list[str]:
    """Every technique combination as the default matrix spells it (its cell ids, its stored records)."""
    try:
        doc = yaml.load(matrix.DEFAULT_MATRIX.read_text(), Loader=matrixfile.SAFE_LOADER)
    except (OSError, ValueError, matrix.MatrixError):
        return []
    studies = (doc or {}).get("studies") or {}
    return list(dict.fromkeys(t for s in studies.values() if isinstance(s, dict)
                              for t in s.get("techniques") or [] if isinstance(t, str)))


def canonical_techniques(techniques: list[str]) -> tuple[list[str], dict[str, str]]:
    """The asked combinations in their one spelling (bench/cells/techniques.py ``canonical``: the
    default matrix's where it has the same set), each once, and {as asked: as spelled} where the
    two differ, so a recipe written in another order is the same cell and finds its records."""
    known = matrix_spellings()
    out, renamed = [], {}
    for t in techniques:
        c = canonical(t, known)
        if c != t:
            renamed[t] = c
        if c not in out:
            out.append(c)
    return out, renamed


def specs(model: str, gpu: str, techniques: list[str], seq: int | None, batch: int | None,
          options: dict | None = None, trust_remote_code: bool = False, mode: str = "sim",
          ranks: str | None = None) -> dict[str, dict]:
    """{cell: spec} for the question, through the matrix loader: the study is judged against
    every cuda profile of matrix/gpus.yaml (as the default matrix's sim studies are), so its
    records are the matrix's own where the shape agrees. Techniques are taken in their one
    spelling (``canonical_techniques``). ``mode="cuda"``: the same question as real runs on this
    machine's GPU, capped to ``gpu``'s memory (``ft-membench measure``): one warm-up, three steps;
    ``ranks="rank0"``: an FSDP recipe (FSDP2 or FSDP1) of several GPUs runs as its rank 0 alone on this one
    (bench/worker/onerank.py). ``mode="cpu"`` with ``gpu="cpu"``: the same question as real runs on this machine's
    CPU, the matrix's cpu cells (``ft-membench measure --device cpu``)."""
    from bench.fit import beyond
    if why := beyond.refusal(techniques, model):   # dpo, grpo, tp2, cp4...: not simulated, what others measured
        raise Usage(why)
    techniques = canonical_techniques(techniques)[0]
    base = matrix.DEFAULT_MATRIX.parent
    gpus = yaml.load((base / "gpus.yaml").read_text(), Loader=matrixfile.SAFE_LOADER)
    kind = "cpu" if mode == "cpu" else "cuda"   # a cpu cell runs on the matrix's "cpu" profile (measure --device cpu)
    if gpu not in gpus or gpus[gpu].get("kind") != kind:
        known = ", ".join(g for g, p in gpus.items() if p.get("kind") == kind)
        raise Usage(f"unknown gpu {gpu!r} (known: {known})")
    for name, key, value in (("--seq", "seq_len", seq), ("--batch", "batch_size", batch)):
        low, top = MINIMUMS[key], MAXIMUMS[key]  # the matrix's own bounds
        if value is not None and not low <= value <= top:
            raise Usage(f"{name} {value}: must be between {low} and {top}")
    doc = {
        "models_dir": str(base / "models"), "gpus_file": str(base / "gpus.yaml"),
        "deepspeed_dir": str(base / "deepspeed"),
        "technique_options": yaml.load(matrix.DEFAULT_MATRIX.read_text(),
                                       Loader=matrixfile.SAFE_LOADER).get("technique_options", {}),
        "studies": {"fit": {
            "mode": mode, "models": [model],
            "gpus": [g for g, p in gpus.items() if p.get("kind") == "cuda"] if mode == "sim" else [gpu],
            "batch_size": batch or 1, "seq_len": seq or 2048, "steps": 1 if mode == "sim" else 3, "warmup_steps": 1,
            "timeout_s": 600,
            "techniques": techniques,
            **({} if "baseline" in techniques else {"exclude": [{"techniques": "baseline"}]}),
            **({"technique_options": options} if options else {}),  # a --config's LoRA settings
            **({"ranks": ranks} if ranks else {}),
        }},
        **({"model_options": {model: {"trust_remote_code": True}}} if trust_remote_code else {}),
    }
    with tempfile.TemporaryDirectory(prefix="ftmb-fit-") as tmp:
        path = Path(tmp, "fit.yaml")
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        try:
            cells = matrix.load(path)
        except matrix.MatrixError as exc:
            # the matrix loader resolves model names (and, where it accepts them, config paths and
            # Hugging Face ids): what it refuses is refused here, in its words
            text = str(exc).replace(f"{path}: ", "")
            if text.startswith("studies.fit.models[0]: "):  # the resolver's words name the known models
                said = text.split(": ", 1)[1]
                if any(w in said for w in MALFORMED):   # a file that exists but does not parse is no unknown model
                    source, _, why = said.removeprefix("model ").partition(": ")
                    raise Usage(f"malformed config.json: {source}: {why}") from None
                raise Usage(f"unknown model {model!r}: {said}") from None
            raise Usage(text.replace("studies.fit.", "")) from None
    return cells

