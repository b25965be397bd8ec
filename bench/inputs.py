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
    return dataclasses.asdict(tech)


def _plain(obj):
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} has no canonical JSON form")
