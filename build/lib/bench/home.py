"""Where ft-membench's data lives: the matrix (GPU profiles, model configs, the published corpus)
and the results, the reference records among them. Torch-free.

A checkout holds them beside the code: ``root()`` is the checkout. A wheel installs the code only
(bench/, report/); it finds the data at ``$FT_MEMBENCH_HOME``, a checkout of the project, and the
CLI says so in one line where there is none (``missing``), before anything runs.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV = "FT_MEMBENCH_HOME"
CODE_ROOT = Path(__file__).resolve().parents[1]   # the folder holding bench/ and report/


def root() -> Path:
    """The folder holding matrix/ and results/: ``$FT_MEMBENCH_HOME`` where it is set, else beside the code."""
    env = os.environ.get(ENV)
    return Path(env).expanduser().resolve() if env else CODE_ROOT


def missing() -> str | None:
    """Why ft-membench cannot answer from here (no matrix/default.yaml where it looks), or None."""
    where = root()
    if (where / "matrix" / "default.yaml").is_file():
        return None
    said = f"${ENV} ({where})" if os.environ.get(ENV) else f"beside the installed code ({where})"
    return (f"no matrix/default.yaml in {said}: ft-membench reads its GPU profiles, model configs and reference "
            f"answers from a checkout of the project (git clone it, then set {ENV}=/path/to/that/checkout)")
