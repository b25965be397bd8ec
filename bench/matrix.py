"""Load a matrix YAML, validate it, and expand it into cells. The one loader of the matrix.

Used by the Snakefile (wildcards, inputs), by bench/conftest.py (pytest ids) and by tests.
Torch-free. Every problem is a ``MatrixError`` naming the file, the key path and the reason,
raised before any cell runs.

A cell id is ``<model>__<gpu>__<technique>[+<technique>...]``: the pytest id, the Snakemake
wildcard and the results file name. The axes travel as data in the cell spec; nothing
parses an id back. In sim mode the gpu part is ``sim``: one simulation serves every GPU
profile listed by the study, each of which gets a verdict.

    >>> cells = load("matrix/default.yaml")      # {cell id: spec dict}
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import jsonschema
import yaml

from bench import techniques as tech

DEFAULT_MATRIX = Path(__file__).resolve().parent.parent / "matrix" / "default.yaml"
SLUG = re.compile(r"[a-z0-9.-]+")
SCHEMA = json.loads((Path(__file__).with_name("matrix.schema.json")).read_text())
SHAPE_KEYS = ("batch_size", "seq_len", "steps", "warmup_steps", "timeout_s", "seed")


class MatrixError(ValueError):
    """A matrix file is wrong: the message names file, key and reason."""

    def __init__(self, path, key: str, reason: str):
        super().__init__(f"{path}: {key or '<top>'}: {reason}")


def load(path=DEFAULT_MATRIX) -> dict[str, dict]:
    """Validate the matrix at ``path`` and return its cells, {cell id: spec}, in file order."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise MatrixError(path, "", "no such matrix file") from None
    except yaml.YAMLError as exc:
        raise MatrixError(path, "", f"not valid YAML: {exc}") from None
    _check_schema(path, doc)
    base = path.parent
    models_dir = (base / doc.get("models_dir", "models")).resolve()
    gpus = _load_gpus(path, base, doc)
    cells: dict[str, dict] = {}
    for study, body in doc["studies"].items():
        for spec in _expand(path, doc, study, body, models_dir, gpus):
            old = cells.get(spec["cell"])
            if old is not None and _sans_study(old) != _sans_study(spec):
                raise MatrixError(path, f"studies.{study}",
                                  f"cell {spec['cell']} is also in study {old['study']} with other settings")
            cells.setdefault(spec["cell"], spec)
    return cells


def cell_id(model: str, gpu: str, names: list[str]) -> str:
    return f"{model}__{gpu}__{'+'.join(names)}"


def _sans_study(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k not in ("study", "baseline_cell")}


def _check_schema(path, doc) -> None:
    errors = sorted(jsonschema.Draft202012Validator(SCHEMA).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        err = errors[0]
        key = ".".join(str(p) for p in err.absolute_path)
        raise MatrixError(path, key, err.message)


def _load_gpus(path, base: Path, doc: dict) -> dict:
    gpus_file = base / doc.get("gpus_file", "gpus.yaml")
    try:
        gpus = yaml.safe_load(gpus_file.read_text()) or {}
    except FileNotFoundError:
        raise MatrixError(path, "gpus_file", f"{gpus_file} does not exist") from None
    gpus.update(doc.get("gpus", {}))
    for name, prof in gpus.items():
        if not SLUG.fullmatch(name):
            raise MatrixError(path, f"gpus.{name}", "a gpu name must be a slug of [a-z0-9.-]")
        if prof.get("kind") not in ("cpu", "cuda") or not isinstance(prof.get("memory_bytes"), int):
            raise MatrixError(gpus_file, name, "a gpu profile needs kind (cpu|cuda) and memory_bytes (int)")
    return gpus


def _expand(path, doc, study, body, models_dir, gpus):
    where = f"studies.{study}"
    mode = body["mode"]
    shape = {**doc.get("defaults", {}), **{k: body[k] for k in SHAPE_KEYS if k in body}}
    for key in ("batch_size", "seq_len", "steps", "warmup_steps"):
        if key not in shape:
            raise MatrixError(path, f"{where}.{key}", "not set here nor in defaults")
    shape.setdefault("timeout_s", 900)
    shape.setdefault("seed", 0)
    ctx = {"path": path, "where": where, "mode": mode, "shape": shape, "gpus": gpus, "study_gpus": body["gpus"],
           "models_dir": models_dir, "published": body.get("published", {}),
           "options": {k: {**doc.get("technique_options", {}).get(k, {}), **v}
                       for k, v in {"lora": {}, **body.get("technique_options", {})}.items()},
           "ds_dir": (path.parent / doc.get("deepspeed_dir", "deepspeed")).resolve()}
    for i, model in enumerate(body["models"]):
        if not (models_dir / f"{model}.json").is_file():
            raise MatrixError(path, f"{where}.models[{i}]", f"no model config {models_dir / (model + '.json')}")
    for i, gpu in enumerate(body["gpus"]):
        if gpu not in gpus:
            raise MatrixError(path, f"{where}.gpus[{i}]", f"unknown gpu {gpu!r} (known: {', '.join(sorted(gpus))})")
        want = "cpu" if mode == "cpu" else "cuda"
        if gpus[gpu]["kind"] != want:
            raise MatrixError(path, f"{where}.gpus[{i}]", f"{mode} mode needs a {want} gpu profile, {gpu!r} is {gpus[gpu]['kind']}")
    combos = []
    for i, combo in enumerate(body["techniques"]):
        names = combo.split("+")
        try:
            knobs = tech.knobs(names)
        except (KeyError, ValueError) as exc:
            raise MatrixError(path, f"{where}.techniques[{i}]", f"{combo}: {exc.args[0]}") from None
        combos.append((names, knobs))
    if ["baseline"] not in [n for n, _ in combos]:
        combos.insert(0, (["baseline"], tech.knobs(["baseline"])))
    excludes = body.get("exclude", [])
    device_axis = ["sim"] if mode == "sim" else body["gpus"]
    for model, gpu, (names, knobs) in itertools.product(body["models"], device_axis, combos):
        if any(_excluded(rule, model, gpu, names) for rule in excludes):
            continue
        yield _spec(ctx, study, model, gpu, names, knobs)


def _excluded(rule: dict, model: str, gpu: str, names: list[str]) -> bool:
    return (rule.get("model", model) == model and rule.get("gpu", gpu) == gpu
            and set(rule.get("techniques", "").split("+")) <= set(names) | {""})


def _spec(ctx: dict, study: str, model: str, gpu: str, names: list[str], knobs: dict) -> dict:
    path, where, mode, shape, options = ctx["path"], ctx["where"], ctx["mode"], ctx["shape"], ctx["options"]
    batch = knobs["batch_size"] or shape["batch_size"]
    if batch % knobs["accum"]:
        raise MatrixError(path, f"{where}.techniques", f"{'+'.join(names)}: batch {batch} does not split into {knobs['accum']} micro-batches")
    if shape["warmup_steps"] < 1 or shape["steps"] < 1:
        raise MatrixError(path, f"{where}", "steps and warmup_steps must be at least 1 (the first step allocates the optimizer state)")
    device = ctx["gpus"][gpu] if mode != "sim" else None
    ds = ctx["ds_dir"] / f"{knobs['dist']}.json"
    if (knobs["dist"] or "").startswith("zero") and not ds.is_file():
        raise MatrixError(path, f"{where}.techniques", f"{'+'.join(names)}: no DeepSpeed config {ds}")
    return {
        "cell": cell_id(model, gpu, names),
        "study": study,
        "baseline_cell": cell_id(model, gpu, ["baseline"]),
        "model": model,
        "model_config": str(ctx["models_dir"] / f"{model}.json"),
        "gpu": gpu,
        "gpu_memory_bytes": device["memory_bytes"] if device else None,
        "mode": mode,
        "techniques": names,
        "knobs": knobs,
        "options": {"lora": options.get("lora", {})} if knobs["adapter"] else {},
        "world_size": knobs["world_size"],
        "batch_size": batch,
        "seq_len": knobs["seq_len"] or shape["seq_len"],
        "steps": shape["steps"],
        "warmup_steps": shape["warmup_steps"],
        "timeout_s": shape["timeout_s"] * knobs["world_size"],
        "seed": shape["seed"],
        "ds_config": str(ds) if (knobs["dist"] or "").startswith("zero") else None,
        "verdict_gpus": {g: ctx["gpus"][g] for g in ctx["study_gpus"]} if mode == "sim" else {},
        "skip_reason": tech.skip_reason(names, knobs, mode),
        **({"published": ctx["published"]["+".join(names)]} if "+".join(names) in ctx["published"] else {}),
    }
