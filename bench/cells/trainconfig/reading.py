"""Reading a training config's files as the matrix's are read (bench/cells/matrixfile.py,
bench/cells/yamlsafe.py): regular files only (a FIFO would hang, /dev/zero would fill memory), at
most ``MAX_BYTES``, UTF-8; YAML under the strict safe loader (no Python tags, no duplicate
keys, bounded after alias expansion and in depth); JSON likewise (duplicate keys refused, the
same bounds). Each refusal is a ``ReadError`` naming the file and the reason. Torch-free.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import yaml

from bench.cells import yamlsafe

MAX_BYTES = 1 << 20   # 1 MiB: training configs are a few KB; a DeepSpeed config less


class ReadError(ValueError):
    """A config file that cannot be read: the message names the file and why."""


def read_text(path: Path, what: str) -> str:
    """The text of ``path``, a regular file of at most MAX_BYTES of UTF-8, opened without blocking."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ReadError(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, FIFO or socket)"
            raise ReadError(f"{what} {path}: {kind}: a config is a file")
        if info.st_size > MAX_BYTES:
            raise ReadError(f"{what} {path}: {info.st_size} bytes, more than the {MAX_BYTES} a config may have")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ReadError(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise ReadError(f"{what} {path}: more than the {MAX_BYTES} bytes a config may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReadError(f"{what} {path}: not UTF-8 text: byte {data[exc.start]:#04x} at offset {exc.start}") from None


def _pairs(pairs):
    seen: dict = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}: JSON would keep only the last value")
        seen[key] = value
    return seen


def load(path: Path, what: str):
    """The document in ``path`` (JSON where it ends in .json, else YAML), read strictly as above."""
    path = Path(path)
    text = read_text(path, what)
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        if kind == "JSON":
            doc = json.loads(text, object_pairs_hook=_pairs)
            yamlsafe.check_depth(doc)
            yamlsafe.check_size(doc)
            return doc
        return yamlsafe.load(text)
    except RecursionError:
        raise ReadError(f"{what} {path}: nested deeper than {yamlsafe.MAX_DEPTH} levels") from None
    except yamlsafe.TooBig as exc:
        raise ReadError(f"{what} {path}: {exc.where or '<top>'}: {exc}") from None
    except (ValueError, yaml.YAMLError) as exc:
        text = " ".join(str(exc).split())
        raise ReadError(f"{what} {path}: malformed {kind}: {text[:300]}") from None
