"""Content digests of what a cell depends on. Torch-free.

A cell reruns when the digest of one of its inputs changes (bench/cells/matrix.py puts them in the
cell spec, which is the Snakemake rule's ``params``), and a cached checkpoint is reused only
under the digest of the content it was made from (bench/worker/models.py). Digests are taken
over canonical JSON, so reformatting a file changes nothing and any edit of a value does.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json


def digest(obj) -> str:
    """sha256 (hex) of ``obj`` as canonical JSON: sorted keys, no whitespace, sets sorted."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_plain)
    return hashlib.sha256(text.encode()).hexdigest()


def technique_entry(tech) -> dict:
    """A catalogue ``Technique`` as plain data (its frozenset of modes sorted)."""
    entry = dataclasses.asdict(tech)
    if not entry.get("defaults"):  # absent, as before techniques had defaults: their digests stay
        entry.pop("defaults", None)
    return entry


def _plain(obj):
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} has no canonical JSON form")


# the code a simulated record or a stored answer is made by: the worker and sim engine, the
# allocator replay, the verdict, need, load, speed and interpolation models, the fits search, the
# technique catalogue, vLLM's plan and the record's own rules and gate (tests/test_engine_digest.py
# holds that every module the search and the answer import is here, or said to make no answer)
ENGINE_FILES = ("worker/**/*.py", "estimate/*.py", "search/*.py", "cells/techniques.py", "cells/catalogue.py",
                "cells/workloads.py", "records/record.py", "records/checks.py", "records/agreement.py",
                "cells/inputs.py")
# what matches ENGINE_FILES but is computed from the records (a figure held against them): in the
# digest, every rebuild of the records would make its own stored figures stale
ENGINE_EXCLUDED = ("estimate/speedcv.py",)


def engine_digest(root=None) -> str:
    """sha256 (first 16 hex) of the engine's source files (``ENGINE_FILES`` under bench/): a
    record made by other code is not the record this code would make, so it is not reused as
    if it were (bench/cli.py)."""
    from pathlib import Path
    root = Path(root) if root else Path(__file__).resolve().parents[1]  # bench/
    files = sorted({p for pattern in ENGINE_FILES for p in root.glob(pattern)} - {root / e for e in ENGINE_EXCLUDED})
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# -- what the worker read --------------------------------------------------------------

class InputsChanged(RuntimeError):
    """A file the cell is built from is not what the matrix digested: the record would claim
    inputs it was not made from."""


def pin(spec: dict, folder) -> dict:
    """The spec the worker runs: each JSON input (the model config; the DeepSpeed config) read
    once, copied into ``folder`` and digested there, so what is built is exactly what was
    digested; the spec points at the copies. A model with its own code (trust_remote_code) is
    digested in place (its code imports files beside it). Adds ``_read_sha256`` ({input:
    digest}); raises ``InputsChanged`` where a digest is not the spec's ``inputs_sha256``."""
    from pathlib import Path
    folder = Path(folder)
    out, read = dict(spec), {}
    want = spec.get("inputs_sha256") or {}
    if spec.get("model_config") and not spec.get("trust_remote_code") and Path(spec["model_config"]).is_file():
        out["model_config"], read["model_config"] = _copy_json(Path(spec["model_config"]), folder / "model_config.json")
    elif spec.get("model_config"):
        read["model_config"] = _model_digest_in_place(spec)
    if spec.get("ds_config"):
        out["ds_config"], read["ds_config"] = _copy_json(Path(spec["ds_config"]), folder / "ds_config.json")
    changed = [f"{k} ({spec['model_config'] if k == 'model_config' else spec['ds_config']}) digests to "
               f"{read[k][:12]}, the spec says {want[k][:12]}" for k in read if want.get(k) and read[k] != want[k]]
    if changed:
        raise InputsChanged("the worker read other inputs than the matrix digested (a file changed after the "
                            f"matrix loaded): {'; '.join(changed)}: rerun the cell")
    out["_read_sha256"] = read
    return out


def _copy_json(src, dst):
    text = src.read_bytes()
    dst.write_bytes(text)
    return str(dst), digest(json.loads(text))


def _model_digest_in_place(spec: dict) -> str:
    from pathlib import Path
    path = Path(spec["model_config"])
    config = json.loads((path / "config.json" if path.is_dir() else path).read_text())
    if not spec.get("trust_remote_code"):
        return digest(config)
    code = {p.name: digest(p.read_text()) for p in sorted(path.parent.glob("*.py"))}
    return digest({"config": config, "code": code})
