"""Content digests of what a cell depends on. Torch-free.

A cell reruns when the digest of one of its inputs changes (bench/matrix.py puts them in the
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


# the code a simulated record is made by: the worker and sim engine, the allocator replay, the
# verdict, load and speed models, the technique catalogue and the record's own rules
ENGINE_FILES = ("worker/**/*.py", "allocator.py", "replay.py", "verdicts.py", "loadplan.py", "speedmodel.py",
                "techniques.py", "record.py", "inputs.py")


def engine_digest() -> str:
    """sha256 (first 16 hex) of the engine's source files (``ENGINE_FILES`` under bench/): a
    record made by other code is not the record this code would make, so it is not reused as
    if it were (bench/cli.py)."""
    from pathlib import Path
    root = Path(__file__).resolve().parent
    files = sorted({p for pattern in ENGINE_FILES for p in root.glob(pattern)})
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]
