"""Rules every record and every fits answer must keep, or say why not. Torch-free.

    record_problems(rec) -> [problem]            # one record
    fits_problems(rows) -> [problem]             # the fits table's rows (dicts: bench/search/fits_csv.py)

They catch a layer that lies between right bytes and a wrong answer (the load phase, the
allocator replay's starting state, a ranking of unlike things), not a bad byte count:

- **reserved against allocated.** The modelled reserved peak exceeds the replay's allocated
  peak by more than ``RESERVED_SLACK`` only for a stated reason: padded batches whose shapes
  change step by step; a peak under ``SMALL_BYTES``, where the allocator's segment sizes
  (2 MiB small-pool segments, 20 MiB rounding of mid-size requests) are a large share; or
  fragmentation the replay finds inside the training step (``fragmentation_growth``: new
  segments reserved while the cache held as many free bytes). A load that leaves the step more
  than half the excess cached and free (the replay's ``load_end_reserved_bytes`` less
  ``load_end_allocated_bytes``) is a broken rule: a real load places one tensor at a time, so a
  load that leaves the step a fragmented allocator is a modelling error. What the load leaves is
  read off the replay's state where the step starts, not off ``fragmentation_growth``'s load
  entry: that one sums every segment reserved while any free bytes were cached, and a load of
  many shards, each in a segment of its own with a rounded-up tail, reserves nearly all of its
  bytes so (Llama-3.1-70B QLoRA + ZeRO-3 at 4 ranks: 10.45 GiB counted, 0.46 GiB left free). A
  record without those fields is judged by the growth's largest entry, as before.
- **compression never reaches less.** A recipe that only compresses weights or optimizer
  state (``COMPRESSIONS``: 8-bit or paged 8-bit AdamW added; the base weights in NF4 instead
  of bf16) never reaches a shorter largest sequence, or a smaller largest batch, than the
  same recipe without it on the same GPU. Except at the margin: one search step short, where the
  compressed recipe's modelled reserved peak at the other's answer is within ``MARGIN`` of the
  other's there (equal allocated peaks, as where the peak comes before the optimizer state exists,
  and the allocator's blocks laid out a little differently: not a layer that lies).
"""
from __future__ import annotations

RESERVED_SLACK = 0.15
MARGIN = 0.001  # of the peak: what two recipes' allocator layouts may differ by at the same shape
SMALL_BYTES = 2**30
GiB = 2**30


def reserved_reason(rec: dict) -> tuple[str | None, str | None]:
    """(why reserved may exceed allocated, None) or (None, the problem)."""
    knobs = rec.get("knobs") or {}
    model = rec.get("allocator_model") or {}
    alloc = model.get("allocated_peak_bytes") or rec.get("peak_bytes") or 0
    if str(knobs.get("batching", "")).startswith("padding"):
        return "padded batches change shape step by step: the allocator keeps each size's blocks cached", None
    if alloc < SMALL_BYTES:
        return (f"a peak under {SMALL_BYTES / GiB:g} GiB: the allocator's segment sizes (2 MiB small-pool "
                "segments, 20 MiB rounding of mid-size requests) are a large share of it"), None
    growth = model.get("fragmentation_growth") or []
    in_step = [g for g in growth if g["step"] >= 0]
    if "load_end_reserved_bytes" in model and "load_end_allocated_bytes" in model:
        left = model["load_end_reserved_bytes"] - model["load_end_allocated_bytes"]
        excess = (rec.get("modelled_reserved_peak_bytes") or 0) - alloc
        if left > excess / 2:
            return None, (f"the model's load leaves {left / GiB:.2f} GiB cached and free when the step starts, "
                          f"more than half the {excess / GiB:.2f} GiB excess: the step starts from an allocator "
                          "a real load would not leave")
    elif growth and growth[0]["step"] < 0:
        top = growth[0]
        return None, (f"the largest share of the fragmentation ({top['bytes'] / GiB:.2f} GiB) arises while the "
                      "model loads: the step starts from an allocator a real load would not leave")
    if not in_step:
        return None, "no fragmentation_growth inside the step to say where the cached memory came from"
    top = in_step[0]
    return (f"fragmentation inside the training step: step {top['step']}'s {top['phase']} reserved "
            f"{top['bytes'] / GiB:.2f} GiB of new segments while its cache held as many free bytes"), None


def record_problems(rec: dict) -> list[str]:
    """Broken rules of one ok record (empty when it keeps them or says why)."""
    if not isinstance(rec, dict) or rec.get("status") != "ok":
        return []
    res = rec.get("modelled_reserved_peak_bytes")
    alloc = (rec.get("allocator_model") or {}).get("allocated_peak_bytes") or rec.get("peak_bytes")
    if not res or not alloc or res <= (1 + RESERVED_SLACK) * alloc:
        return []
    why, problem = reserved_reason(rec)
    if why:
        return []
    return [f"modelled reserved peak {res / GiB:.2f} GiB is {res / alloc - 1:+.0%} over the allocated peak "
            f"{alloc / GiB:.2f} GiB: {problem}"]


def reserved_note(rec: dict) -> str | None:
    """The stated reason, for a record whose reserved peak exceeds the slack (None otherwise)."""
    res = rec.get("modelled_reserved_peak_bytes")
    alloc = (rec.get("allocator_model") or {}).get("allocated_peak_bytes") or rec.get("peak_bytes")
    if rec.get("status") != "ok" or not res or not alloc or res <= (1 + RESERVED_SLACK) * alloc:
        return None
    return reserved_reason(rec)[0]


# (technique added or swapped in, what it replaces): the compressed recipe is the plain one with
# the first in place of the second (None: added to a recipe that names no optimizer)
COMPRESSIONS = (("adamw8bit", None), ("paged-adamw8bit", None), ("qlora", "lora+bf16"))


def _names_an_optimizer(parts: list[str]) -> bool:
    """Whether a technique of ``parts`` sets the optimizer (the catalogue says which do)."""
    from bench.cells import techniques
    return any("optimizer" in techniques.lookup(p).sets for p in parts if p in techniques.CATALOG)


def uncompressed(technique: str) -> tuple[str, str] | None:
    """(the same recipe without its compression, the compression), or None."""
    parts = technique.split("+")
    for comp, plain in COMPRESSIONS:
        if comp not in parts:
            continue
        rest = [p for p in parts if p != comp]
        if plain is None:
            if not rest or _names_an_optimizer(rest):
                continue
            return "+".join(rest), comp
        if "bf16" in rest:  # qlora + bf16 recipe: its plain twin is lora + bf16 already
            rest.remove("bf16")
        return "+".join(["lora", *rest, "bf16"]), comp
    return None


def _int(v):
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return None


def fits_problems(rows: list[dict]) -> list[str]:
    """Broken 'compression never reaches less' rules in the fits table's rows."""
    index = {}
    for r in rows:
        index[(r["model"], _canon(r["technique"]), r["gpu"], str(r["seq_len"]), str(r["batch_size"]))] = r
    out = []
    for r in rows:
        pair = uncompressed(r["technique"])
        if not pair:
            continue
        plain = index.get((r["model"], _canon(pair[0]), r["gpu"], str(r["seq_len"]), str(r["batch_size"])))
        if plain is None:
            continue
        for key, what in (("max_seq_at_batch1", "largest sequence at batch 1"),
                          ("max_batch_at_seq", "largest batch")):
            mine, theirs = _int(r.get(key)), _int(plain.get(key))
            if theirs is not None and mine is not None and _at_the_margin(r, plain, key, mine, theirs):
                continue
            if theirs is not None and (mine is None or mine < theirs) and not r.get("reason"):
                out.append(f"{r['model']} {r['technique']} on {r['gpu']}: {what} {mine} < {theirs} of "
                           f"{plain['technique']}, which only lacks {pair[1]}'s compression")
    return out


def _at_the_margin(r: dict, plain: dict, key: str, mine: int, theirs: int) -> bool:
    """One search step short (``resolution_tokens`` for the sequence, one sample for the batch), and the
    compressed recipe's peak at the other's answer within ``MARGIN`` of the other's peak there."""
    axis = "seq" if key == "max_seq_at_batch1" else "batch"
    step = _int(r.get("resolution_tokens")) if axis == "seq" else 1
    mine_next, theirs_at = _int(r.get(f"peak_at_next_{axis}_bytes")), _int(plain.get(f"peak_at_max_{axis}_bytes"))
    return bool(step and mine + step == theirs and mine_next and theirs_at
                and mine_next <= theirs_at * (1 + MARGIN))


def _canon(technique: str) -> str:
    return "+".join(sorted(technique.split("+")))
