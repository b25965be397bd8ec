"""Atomic file writes: a reader sees the old file or the new one, never half of one.

    write_text(path, text)     # any text (the table CSV, the report HTML, a manifest)
    write_json(path, obj)      # a record or a pytest-benchmark document (indent 1, sorted keys)

How: write a temp file in the same folder, fsync it, then ``os.replace`` it over the target
(atomic on POSIX within one file system). If anything fails, the temp file is removed and
the old file is left as it was. Torch-free and dependency-free: the worker, the launcher,
the table and the report all write through here.
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
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600: results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike, obj) -> None:
    # Serialise first: an object that cannot be written must leave the old file untouched.
    write_text(path, json.dumps(obj, indent=1, sort_keys=True))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
