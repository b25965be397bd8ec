"""Reading the matrix's files, strictly: YAML under the safe subset (bench/cells/yamlsafe.py), JSON
inputs, the JSON schema (bench/cells/matrix.schema.json, its shape bounds from
bench.cells.techniques), and the GPU profiles file. Every refusal is a ``MatrixError`` naming
the file, the key and the reason. Torch-free.
"""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from bench.cells import techniques as tech
from bench.cells import yamlsafe


def _schema() -> dict:
    """matrix.schema.json with each shape minimum from bench.cells.techniques.MINIMUMS (their one home)."""
    schema = json.loads((Path(__file__).with_name("matrix.schema.json")).read_text())
    for key, prop in schema["$defs"]["shape"]["properties"].items():
        if key in tech.MINIMUMS:
            prop["minimum"] = tech.MINIMUMS[key]
        if key in tech.MAXIMUMS:
            prop["maximum"] = tech.MAXIMUMS[key]
    return schema


SCHEMA = _schema()


# "integer" means an int: not a bool (True is 1 in Python) and not a float such as 5e9
Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, v: type(v) is int))

SAFE_LOADER = yamlsafe.StrictLoader  # libyaml's safe loader where built, refusing duplicate keys


class MatrixError(ValueError):
    """A matrix file is wrong: the message names file, key and reason."""

    def __init__(self, path, key: str, reason: str):
        super().__init__(f"{path}: {key or '<top>'}: {reason}")


def read_yaml(path: Path, what: str):
    """The document at ``path`` under YAML's safe loader: no tags that build Python objects."""
    try:
        return yamlsafe.load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MatrixError(path, "", f"no such {what} file") from None
    except UnicodeDecodeError as exc:
        raise MatrixError(path, "", f"not UTF-8 text: byte {exc.object[exc.start]:#04x} at offset {exc.start}") from None
    except OSError as exc:
        raise MatrixError(path, "", f"cannot read the {what} file: {exc.strerror or exc}") from None
    except yamlsafe.DuplicateKey as exc:
        raise MatrixError(path, str(exc.key), str(exc)) from None
    except yamlsafe.TooBig as exc:
        raise MatrixError(path, exc.where, str(exc)) from None
    except yaml.YAMLError as exc:
        raise MatrixError(path, "", f"not valid YAML (safe subset, no Python tags): {one_line(exc)}") from None


def read_json(path: Path, what: str) -> dict:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise MatrixError(path, "", f"no such {what} file") from None
    except ValueError as exc:
        raise MatrixError(path, "", f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MatrixError(path, "", f"a {what} must be a JSON object, not {type(doc).__name__}")
    return doc


def check_schema(path, doc, schema: dict) -> None:
    errors = sorted(Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        err = errors[0]
        key = ".".join(str(p) for p in err.absolute_path)
        raise MatrixError(path, key, one_line(err.message))


def one_line(text, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


GPUS_SCHEMA = {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/gpus"}


def load_gpus(path, base: Path, doc: dict) -> dict:
    """The gpus_file's profiles, checked like the matrix's own ``gpus:`` (which override them)."""
    gpus_file = base / doc.get("gpus_file", "gpus.yaml")
    if not gpus_file.is_file():
        raise MatrixError(path, "gpus_file", f"{gpus_file} does not exist")
    gpus = read_yaml(gpus_file, what="gpus") or {}
    check_schema(gpus_file, gpus, GPUS_SCHEMA)
    return {**gpus, **doc.get("gpus", {})}
