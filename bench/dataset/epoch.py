"""The epoch as the trainer forms it: its steps' padded widths, and which of them the replay runs.

- Padding (TRL's collator pads each batch to its longest sample, ``pad_to_multiple_of`` rounding
  it up): a step's width is its batch's longest length, rounded up to the multiple, then to
  bench/dataset/stairs.py ``GRID``.
- Gradient accumulation (``accumulated``): an optimizer step's micro-batches, each padded by the
  collator to its own longest sample, are judged at the width of the step's longest, as sim's
  accumulation runs them (one batch split in micro-batches of one width): at or above the trainer's.
- Padding-free (``padding_free=True``): the collator puts a batch's samples in one row without pads
  (flash attention reads the sample boundaries from the position ids): a step is one row as long
  as its samples together (``free_widths``), run as the recipe's unpadded step at batch 1.
- Packing (``packing=True``): every step is ``batch`` full rows of ``max_length`` tokens, as TRL's
  ``wrapped`` strategy makes them; its ``bfd`` bins hold at most that many, so this is their upper
  bound. The step count is the tokens over the tokens a step holds.

An epoch of more than ``FULL_STEPS`` steps is replayed in part (``replayed``): its first
``HEAD`` steps, and every step that is the longest so far with ``AROUND`` steps on either side.
The steps left out are each no longer than one replayed before them; the answer says how many.
"""
from __future__ import annotations

import math

from bench.dataset.stairs import round_width

FULL_STEPS = 256
HEAD = 8
AROUND = 2


def padded_widths(lengths: list[int], batches: list[list[int]], pad_to_multiple_of: int | None = None) -> list[int]:
    out = []
    for b in batches:
        w = max(lengths[i] for i in b)
        if pad_to_multiple_of:
            w = -(-w // pad_to_multiple_of) * pad_to_multiple_of
        out.append(round_width(w))
    return out


def free_widths(lengths: list[int], batches: list[list[int]]) -> list[int]:
    """Padding-free batches (TRL's ``padding_free``): a step's samples in one row, as long as their sum."""
    return [round_width(sum(lengths[i] for i in b)) for b in batches]


def accumulated(micro_batches: list[list[int]], accum: int) -> list[list[int]]:
    """The optimizer steps of an epoch with gradient accumulation: ``accum`` micro-batches in a row each,
    the last step taking what is left (transformers' Trainer). A step's samples are its micro-batches'."""
    return [[i for b in micro_batches[k:k + accum] for i in b] for k in range(0, len(micro_batches), accum)]


def packed_steps(lengths: list[int], batch: int, max_length: int) -> int:
    return -(-sum(lengths) // (batch * max_length))


def replayed(widths: list[int]) -> list[int]:
    """The step indices the replay runs, in order (all of them up to FULL_STEPS)."""
    n = len(widths)
    if n <= FULL_STEPS:
        return list(range(n))
    keep = set(range(min(HEAD, n)))
    longest = 0
    for k, w in enumerate(widths):
        if w > longest:
            longest = w
            keep.update(range(max(0, k - AROUND), min(n, k + AROUND + 1)))
    return sorted(keep)


def percentile(values: list[int], q: float) -> int:
    """The nearest-rank percentile (q in 0..100) of ``values``."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(len(s) * q / 100) - 1))] if s else 0


def rises(staircase: list[dict], unit: int = 2 ** 30) -> list[dict]:
    """The staircase's steps as a reader sees them: a rise that rounds to the same 0.01 GiB is said once."""
    out, last = [], None
    for s in staircase:
        shown = round(s["reserved_bytes"] / unit, 2)
        if shown != last:
            out.append(s)
            last = shown
    return out
