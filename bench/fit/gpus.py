"""The GPUs a fit question asks for: the card by the names people type (``4090``, ``RTX 4090``,
``h100``; ``a100`` is two cards, so it is refused with both named), and how many of them
(``--gpus N``, or ``--gpu 2xrtx-4090``), carried into the recipes as the world size (``w<N>``)
of their sharding technique. A sharding technique asked on one GPU is said on stderr: it runs,
on one rank, what nobody runs for memory. Torch-free.
"""
from __future__ import annotations

import re

from bench.fit.question import Usage
from bench.cells.techniques import MAXIMUMS, SHARDED

_COUNT = re.compile(r"\s*([0-9]+)\s*[x×*]\s*(.+)")
_VENDOR = re.compile(r"^(nvidia|geforce)\s*")


def _plain(name: str) -> str:
    name = name.lower().strip()
    while _VENDOR.match(name):
        name = _VENDOR.sub("", name, count=1)
    return re.sub(r"[\s_\-]+", "", name)


def resolve(text: str, known: list[str], count: int | None = None) -> tuple[str, int]:
    """(profile, number of GPUs) for ``--gpu TEXT`` (and ``--gpus COUNT``): a profile of
    ``known`` by its name in any case, spacing or hyphenation, or by a part of it that names one
    profile only; ``2xNAME`` counts the GPUs. Usage error for an unknown or ambiguous name, or a
    count that disagrees with ``--gpus``."""
    m = _COUNT.fullmatch(text)
    n, name = (int(m.group(1)), m.group(2)) if m else (None, text)
    if n is not None and count is not None and n != count:
        raise Usage(f"--gpu {text} asks for {n} GPUs, --gpus {count}: pick one")
    n = n if n is not None else (count if count is not None else 1)
    if not 1 <= n <= MAXIMUMS["world_size"]:
        raise Usage(f"--gpus {n}: must be between 1 and {MAXIMUMS['world_size']}")
    want = _plain(name)
    exact = [g for g in known if _plain(g) == want]
    found = exact or [g for g in known if want and want in _plain(g)]
    if len(found) == 1:
        return found[0], n
    if found:
        raise Usage(f"--gpu {name.strip()} is ambiguous: it names {', '.join(found)}; pass one of them")
    raise Usage(f"unknown gpu {name.strip()!r} (known: {', '.join(known)})")


def _world(names: list[str]) -> int | None:
    for name in names:
        m = re.fullmatch(r"w([0-9]+)", name)
        if m:
            return int(m.group(1))
    return None


def on_gpus(techniques: list[str], n: int, asked: bool) -> tuple[list[str], list[str]]:
    """The recipes as run on ``n`` GPUs, and notes for stderr. On several GPUs a sharding
    recipe gets the world size ``w<n>`` (one that names another is refused when asked); one
    that shards nothing is refused when asked, and left out of the default list. On one GPU a
    sharding technique without a world size is noted."""
    out, notes = [], []
    for combo in techniques:
        names = combo.split("+")
        shards = any(t in SHARDED for t in names)
        w = _world(names)
        if n == 1:
            if shards and (w or 1) == 1:
                notes.append(f"{combo} shards across GPUs but runs on 1 GPU here: pass --gpus N "
                             "(or --gpu Nx<gpu>) for N GPUs")
            out.append(combo)
            continue
        if not shards:
            if asked:
                raise Usage(f"{combo} shards nothing: on {n} GPUs each would hold the whole recipe; add a sharding "
                            "technique (zero1/2/3, zero*-offload, fsdp, fsdp-offload, fsdp1) or ask for 1 GPU")
            continue
        if w is not None and w != n:
            if asked:
                raise Usage(f"{combo} runs on {w} GPUs, --gpus {n}: pick one")
            names = [t for t in names if t != f"w{w}"]
        elif w == n:
            out.append(combo)
            continue
        out.append("+".join([*names, f"w{n}"]))
    if n > 1 and not asked and len(out) < len(techniques):
        notes.append(f"on {n} GPUs the default list keeps its sharding recipes only")
    return list(dict.fromkeys(out)), notes
