"""When a stored sim record may stand for a new simulation. Torch-free.

``versions()`` is what a simulated record depends on besides its spec: the engine's code
(``ft_membench_engine``, bench/inputs.py ``engine_digest``) and the versions of the libraries
that run it (local build labels dropped: ``2.13.0+cpu`` is ``2.13.0``). The warm sim engine
(bench/simengine.py) is keyed by it, and bench/cli.py reuses stored records by it.
"""
from __future__ import annotations

from importlib import metadata

from bench import inputs

LIBRARIES = ("torch", "transformers", "peft", "bitsandbytes", "deepspeed", "accelerate")


def versions() -> dict:
    """The library versions and the engine's code digest a reused record must share."""
    out = {"ft_membench_engine": inputs.engine_digest()}
    for pkg in LIBRARIES:
        try:
            out[pkg] = metadata.version(pkg).split("+")[0]
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out
