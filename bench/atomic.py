"""Atomic file writes, one home for them. Torch-free.

A reader (Snakemake, the table, a person) sees the old file or the new one, never half of
one: the text goes to a temporary file in the same folder, is fsynced, then ``os.replace``d
over the target. A kill at any point leaves the old file intact.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike, obj) -> None:
    write_text(path, json.dumps(obj, indent=1, sort_keys=True))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
