"""Write the exact package set of a Python environment as a pip constraints file.

    python -m bench.records.lock results/reference/constraints.txt              # this interpreter's env
    python -m bench.records.lock OUT --python /path/to/.venv/bin/python         # another env

Output: ``pip freeze`` of that environment, minus the project itself (an editable install
names a local path, which no other machine has) and minus pip's comment lines, with a header
saying where and when it was taken. Local version labels are dropped (``torch==2.13.0+cpu``
becomes ``torch==2.13.0``): PEP 440 lets a pin without a local label match any local build,
so the same file admits the CPU wheel on a CPU box and a CUDA wheel on a GPU box, while a
pin with ``+cpu`` would refuse the CUDA build. Install the set with
``pip install -e ".[harness,peers]" -c results/reference/constraints.txt``. Torch-free.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import re
import subprocess
import sys
from pathlib import Path

PROJECT = "ft-membench"
PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^+\s;]+)(?P<local>\+[^\s;]+)?(?P<rest>.*)$")


def frozen(python: str) -> list[str]:
    """``pip freeze`` lines of the environment whose interpreter is ``python``."""
    out = subprocess.run([python, "-m", "pip", "freeze", "--exclude", PROJECT],
                         check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def constraints(lines: list[str]) -> list[str]:
    """Pins only: comments, editable and direct-URL lines dropped, local labels stripped."""
    pins = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "-e", "--")) or " @ " in line:
            continue  # an editable or a path/URL install cannot be pinned by version
        m = PIN.match(line)
        if m is None:
            raise ValueError(f"not a name==version pin: {line!r}")
        pins.append(f"{m['name']}=={m['version']}{m['rest']}")
    return sorted(pins, key=str.lower)


def header(python: str, version: str) -> list[str]:
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    return [
        f"# The package set behind these results: pip freeze of Python {version} ({platform.machine()}),",
        f"# taken {day} by `python -m bench.records.lock` (regenerate it the same way).",
        '# Install: pip install -e ".[harness,peers]" -c results/reference/constraints.txt',
        "# then: pip install --no-deps llm-analysis==0.2.2 (the scoreboard's peer; its transformers<5 pin is its Hub lookup's)",
        "# torch carries no local label (+cpu/+cu128): the pin admits the CPU and the CUDA build alike.",
    ]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="constraints file to write")
    ap.add_argument("--python", default=sys.executable, help="interpreter of the environment to lock")
    args = ap.parse_args(argv)
    version = subprocess.run([args.python, "-c", "import platform; print(platform.python_version())"],
                             check=True, capture_output=True, text=True).stdout.strip()
    text = "\n".join(header(args.python, version) + constraints(frozen(args.python))) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
