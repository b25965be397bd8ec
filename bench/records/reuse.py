"""When a stored sim record or search answers for a new simulation: one rule for both. Torch-free.

``versions()`` is what a simulated answer depends on besides its spec (which bench/records/checks.gate
and the inputs digest check): the engine's code (``ft_membench_engine``, bench/cells/inputs.py
``engine_digest``) and the versions of the libraries that run it (local build labels dropped:
``2.13.0+cpu`` is ``2.13.0``). The warm sim engine (bench/runner/simengine.py) is keyed by it.

The rule (``accepts``), for cell records and fits answers alike:

- made by other engine code, or with no versions said: not reused (this code would make
  another record);
- made by this engine code with the installed library versions: reused;
- made by this engine code with other library versions: reused, and the answer says which
  versions made it (``note``); with ``resimulate`` it is simulated again instead.

A search's versions are its document's own ``versions``, else (a ``fits.csv`` row, or a search
written before searches said so) those of the record of that cell in the same results folder:
the record it was searched from. ``drift`` says up front, before any waiting, where the
installed libraries differ from the reference results' pins.
"""
from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

from bench.cells import inputs

LIBRARIES = ("torch", "transformers", "peft", "bitsandbytes", "deepspeed", "accelerate")
ENGINE = "ft_membench_engine"


def versions() -> dict:
    """The engine's code digest and the installed library versions (local labels dropped)."""
    out = {ENGINE: inputs.engine_digest()}
    for pkg in LIBRARIES:
        try:
            out[pkg] = metadata.version(pkg).split("+")[0]
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def _plain(got) -> dict | None:
    if not isinstance(got, dict):
        return None
    return {k: (str(v).split("+")[0] if v else None) for k, v in got.items() if k == ENGINE or k in LIBRARIES}


def accepts(got, here: dict, resimulate: bool = False) -> tuple[bool, str | None]:
    """(reused?, note): whether an answer made with versions ``got`` stands for one made now
    with ``here`` (see the module docstring); the note names the library versions that made
    it where they are not the installed ones."""
    got = _plain(got)
    if not got or got.get(ENGINE) != here.get(ENGINE):
        return False, None
    other = [pkg for pkg in LIBRARIES if got.get(pkg) != here.get(pkg)]
    if not other:
        return True, None
    if resimulate:
        return False, None
    return True, (f"made with {', '.join(f'{pkg} {got.get(pkg)}' for pkg in other)} "
                  f"(installed: {', '.join(f'{pkg} {here.get(pkg)}' for pkg in other)})")


def search_versions(doc: dict | None, path: Path, cell: str) -> dict | None:
    """The versions a stored search was made with (see the module docstring)."""
    if isinstance(doc, dict) and isinstance(doc.get("versions"), dict):
        return doc["versions"]
    path = Path(path)
    folder = path.parent if path.suffix == ".csv" else path.parent.parent
    try:
        rec = json.loads((folder / "cells" / f"{cell}.json").read_text())
        rec = rec["benchmarks"][0]["extra_info"] if "benchmarks" in rec else rec
        return rec.get("versions")
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def pins(constraints: Path) -> dict:
    """{library: version} of a pip constraints file (results/reference/constraints.txt)."""
    out = {}
    try:
        for line in Path(constraints).read_text().splitlines():
            m = re.match(r"^([A-Za-z0-9._-]+)==([^+\s;]+)", line.strip())
            if m and m.group(1).lower() in LIBRARIES:
                out[m.group(1).lower()] = m.group(2)
    except OSError:
        pass
    return out


def drift(here: dict, constraints: Path) -> str | None:
    """One line where the installed libraries differ from the reference's pins, else None."""
    ref = pins(constraints)
    other = [f"{pkg} {here.get(pkg)} (the reference's {ref[pkg]})" for pkg in LIBRARIES
             if pkg in ref and here.get(pkg) != ref[pkg]]
    if not other:
        return None
    return ("installed " + ", ".join(other) + ": stored answers made with the reference's versions are reused "
            "and say so; --resimulate simulates them with yours (install the pinned set: "
            'pip install -e ".[harness,peers]" -c results/reference/constraints.txt)')
