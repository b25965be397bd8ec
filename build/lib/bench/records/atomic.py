"""Atomic file writes: a reader sees the old file or the new one, never half of one.

    write_text(path, text)     # any text (the table CSV, the report HTML, a manifest)
    write_json(path, obj)      # a record or a pytest-benchmark document (indent 1, sorted keys)

How: write a temp file in the same folder, fsync it, then ``os.replace`` it over the target
(atomic on POSIX within one file system). If anything fails, the temp file is removed and
the old file is left as it was, and the error is a ``WriteError`` (an OSError, errno kept) whose
one line names the path and the reason: a full disk (ENOSPC) or an unwritable folder (EACCES)
leaves no partial file and says where. Torch-free and dependency-free: the worker, the launcher,
the table and the report all write through here.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


class WriteError(OSError):
    """A write that failed: ``str()`` is one line naming the file and the reason."""

    def __init__(self, path, exc: OSError):
        super().__init__(exc.errno, f"cannot write {path}: {exc.strerror or exc}")
        self.path = str(path)

    def __str__(self) -> str:
        return self.strerror


def write_text(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    try:
        _write_text(path, text)
    except WriteError:
        raise
    except OSError as exc:
        raise WriteError(path, exc) from exc


def _write_text(path: Path, text: str) -> None:
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
