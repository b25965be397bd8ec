"""What to change so that a recipe fits, and what the next step up would use when it does.

For a recipe that does not fit the GPU, ``hints`` tries the changes people make, one at a time on
the asked recipe: a smaller batch and a shorter context (from the recipe's own searches,
bench/search/fits.py: the largest batch and sequence that fit), gradient checkpointing, bf16 weights,
an 8-bit optimizer, QLoRA, offload (ZeRO-3 with CPU offload on one GPU) and more GPUs (ZeRO-3 on
2, 4, 8). Each technique change is a cell of its own, answered as the fit command answers any
recipe (a stored record that passes the gate, else a simulation now; ``evaluate``). Where no
single change fits, the changes are stacked in that order until one fits. Each hint carries its
modelled memory (the modelled reserved peak; per rank for ZeRO), its speed cost (the speed
model's step time against the asked recipe's, "modelled") and its provenance ("sim": the
simulated step or search). Those that fit first, in the order people try them (``RANKS``).

For a recipe that fits, ``hints`` says what the next step up would use: the next batch and the
next context past the largest that fit (the search's ``peak_at_next_*``). Torch-free.
"""
from __future__ import annotations

from bench.estimate import speedcv, verdicts
from bench.estimate.measures import beside_bytes, nccl_bytes
from bench.records.stated import need_bytes
from bench.records import consistency
from bench.search import fits_csv
from bench.cells.techniques import BNB_OPTIMIZERS, knobs

GiB = 2**30
PRECISIONS = {"fp32", "amp-bf16", "amp-fp16", "bf16"}
OPTIMIZERS = {"adamw", "adamw-fused", "adamw8bit", "paged-adamw8bit", "paged-adamw32bit", "adafactor", "lion8bit",
              "sgd"}


def _valid(names: list[str]) -> bool:
    try:
        knobs(names)
        return True
    except (ValueError, KeyError):
        return False


def changes(names: list[str]) -> list[tuple[str, list[str]]]:
    """[(what changes, the changed recipe)] for the technique changes that apply to ``names``."""
    names = [n for n in names if n != "baseline"]
    k = knobs(names)
    out = []
    if not k["gc"]:
        out.append(("gradient checkpointing (+gc)", names + ["gc"]))
    if k["adapter"] == "qlora" and k["dist"] in ("zero3", "zero3-offload") and k["gc"] != "reentrant":
        # bitsandbytes' 4-bit matmul keeps its gathered weight on its autograd node until backward: only the
        # reentrant checkpoint's graph-free forward lets ZeRO-3 free each layer (tests/test_sim_deepspeed.py)
        out.append(("gradient checkpointing, reentrant (gc-reentrant)",
                    [n for n in names if n != "gc"] + ["gc-reentrant"]))
    if k["adapter"] == "qlora" and k["dist"] in ("zero3", "zero3-offload"):
        # transformers never builds a quantized model under zero.Init: each rank loads the whole 4-bit model onto its
        # GPU before DeepSpeed partitions it (bench/estimate/loadplan.py); FSDP's CPU-RAM-efficient load shards it
        swap = {"zero3": "fsdp", "zero3-offload": "fsdp-offload"}
        out.append(("FSDP instead of ZeRO-3 (ZeRO-3 loads a 4-bit base whole on every GPU; FSDP shards it as it loads)",
                    [swap.get(n, n) for n in names]))
    if k["precision"] != "bf16" and k["adapter"] != "qlora":
        out.append(("bf16 weights (+bf16)", [n for n in names if n not in PRECISIONS] + ["bf16"]))
    if k["optimizer"] not in BNB_OPTIMIZERS - {"paged-adamw32bit"} and k["optimizer"] not in ("sgd",):
        rest = [n for n in names if n not in OPTIMIZERS]
        out.append(("8-bit AdamW (adamw8bit)", rest if k["adapter"] == "qlora" else rest + ["adamw8bit"]))
    if k["adapter"] != "qlora":
        base = [n for n in names if n not in ("lora", "fp32", "fsdp", "amp-bf16", "amp-fp16")
                and not n.startswith("w")]
        out.append(("QLoRA (4-bit base, LoRA adapters)", ["qlora"] + [n for n in base if n != "qlora"]))
    if k["dist"] == "fsdp":
        out.append(("FSDP CPU offload (fsdp-offload)", [("fsdp-offload" if n == "fsdp" else n) for n in names]))
    if not k["dist"]:
        out.append(("offload (ZeRO-3, CPU offload, one GPU)", names + ["zero3-offload"]))
        for n in (2, 4, 8):
            out.append((f"{n} GPUs (ZeRO-3)", names + ["zero3", f"w{n}"]))
    # a change must change the recipe: under FSDP qlora's default optimizer is torch AdamW, not 8-bit
    return [(what, new) for what, new in out if _valid(new)
            and (not what.startswith("8-bit") or knobs(new)["optimizer"] in BNB_OPTIMIZERS)]


def _need(line: dict, gpu: str):
    """The need as the table and the report give it: modelled reserved peak + the CUDA reserve (+ a
    multi-GPU rank's NCCL buffers on ``gpu``)."""
    need, _ = need_bytes(line.get("record") or {}, gpu) if line.get("record") else (None, False)
    return int(need) if need is not None else None


def _outside(line: dict, gpu: str) -> int:
    """What the recipe holds on ``gpu`` beside its replay and the reserve: cuBLAS's workspaces and a
    multi-GPU recipe's NCCL buffers (bench/estimate/measures.py ``beside_bytes``)."""
    return beside_bytes((line.get("record") or {}).get("details") or {}, gpu)


def _nccl(line: dict, gpu: str) -> int:
    """A multi-GPU recipe's NCCL buffers on ``gpu`` (bench/estimate/nccl.py), 0 on one GPU."""
    return nccl_bytes((line.get("record") or {}).get("details") or {}, gpu)


def _step(line: dict, gpu: str):
    est = (((line.get("record") or {}).get("details") or {}).get("speed_model") or {}).get(gpu) or {}
    return est.get("step_s"), est.get("tokens_per_s")


def _speed_cost(line: dict, base: dict, gpu: str) -> str:
    step, rate = _step(line, gpu)
    base_step, base_rate = _step(base, gpu)
    world = (line.get("record") or {}).get("world_size") or 1
    if step is None:
        return "no speed model"
    if base_step:
        return (f"{(step / base_step - 1) * 100:+.0f}% step time ({step:.2f} s against {base_step:.2f} s; "
                f"{rate * world:.0f} tokens/s{' for the run' if world > 1 else ''}) ({speedcv.short(_calibration(line, gpu))})")
    return f"{step:.2f} s/step, {rate * world:.0f} tokens/s ({speedcv.short(_calibration(line, gpu))})"


def _calibration(line: dict, gpu: str) -> str | None:
    return ((((line.get("record") or {}).get("details") or {}).get("speed_model") or {}).get(gpu) or {}).get("calibration")


DTYPE_ROLES = ("trainable_weights", "gradients")


def dtype_change(line: dict, base: dict) -> str | None:
    """What the changed recipe also changes in the trained tensors' dtypes, as the records say
    (``details.dtypes``), or None. A change can bring one in with it: DeepSpeed's bf16 mode casts
    the whole model, so under ZeRO a QLoRA recipe's fp32 LoRA adapters train in bf16 (with fp32
    master weights), and its modelled step is faster for that, not for the offload."""
    def of(ln):
        return ((ln.get("record") or {}).get("details") or {}).get("dtypes") or {}
    old, new = of(base), of(line)
    moved = [f"{role.replace('_', ' ')} {'/'.join(old[role])} -> {'/'.join(new[role])}" for role in DTYPE_ROLES
             if old.get(role) and new.get(role) and old[role] != new[role]]
    return "; ".join(moved) or None


def _hint(what: str, line: dict, base: dict, gpu: str, cap: int) -> dict:
    need = _need(line, gpu)
    also = dtype_change(line, base)
    cost = _speed_cost(line, base, gpu)
    return {"kind": "to-fit", "change": what, "technique": line["technique"], "verdict": line.get("verdict"),
            "fits": line.get("verdict") == "fits", "need_bytes": need,
            "saves_bytes": (_need(base, gpu) - need) if need is not None and _need(base, gpu) is not None else None,
            "headroom_bytes": cap + verdicts.RESERVE_BYTES + _outside(base, gpu) - need if need is not None else None,
            "speed_cost": _with_also(cost, also, _step(line, gpu)[0], _step(base, gpu)[0]),
            "also_changes": also, "step_s": _step(line, gpu)[0],
            "provenance": "sim (memory); modelled (speed)", "source": line.get("source"),
            "broken_rules": consistency.record_problems(line.get("record") or {})}


def _with_also(cost: str, also: str | None, step, base_step) -> str:
    """The speed cost, and where the change brings a dtype change with it, what the time owes to that
    (so that ZeRO-3 offload never reads faster for DeepSpeed's bf16 cast of the adapters, not the offload)."""
    if not also:
        return cost
    if step is not None and base_step and step < base_step:
        return (f"{cost}; faster only because it also changes {also} (which the modelled step time counts), "
                "not for the change itself")
    return f"{cost}; also changes {also}, which the modelled step time counts"


def _accumulation_caveat(technique: str) -> str:
    """What accumulation needs under FSDP to hold the need shown: the HF Trainer's accelerate skips the
    gradient sync between micro-batches (no_sync), keeping the unsharded gradients the hint's need leaves out."""
    names = set(technique.split("+"))
    if not names & {"fsdp", "fsdp-offload", "fsdp1"} or "no-sync" in names:
        return ""
    return ("; under FSDP with the HF Trainer set accelerate's sync_each_batch=True, or its no_sync keeps every "
            "unit's unsharded gradient between micro-batches (no-sync), which this need leaves out")


def shape_hints(base: dict, gpu: str, cap: int) -> list[dict]:
    """Smaller batch / shorter context, from the asked recipe's own search (no new simulation)."""
    row, rec = base.get("fit") or {}, base.get("record") or {}
    out = []
    caveat = _accumulation_caveat(base["technique"])
    batch, seq = rec.get("batch_size") or 1, rec.get("seq_len") or 0
    top_b = _int(row.get("max_batch_at_seq"))
    if top_b and top_b < batch:
        accum = -(-batch // top_b)
        out.append({"kind": "to-fit", "change": f"batch {batch} -> {top_b} (ga{accum} keeps the effective batch{caveat})",
                    "technique": base["technique"], "verdict": "fits", "fits": True,
                    "need_bytes": _plus(row.get("peak_at_max_batch_bytes"), _outside(base, gpu)),
                    "headroom_bytes": cap - _int(row["peak_at_max_batch_bytes"]) if row.get("peak_at_max_batch_bytes")
                    else None, "speed_cost": f"{top_b / batch:.0%} of the tokens per step; speed not modelled at "
                                             "that shape", "step_s": None,
                    "provenance": "sim (the recipe's search)", "source": base.get("fits_source")})
    top_s = _int(row.get("max_seq_at_batch1"))
    if top_s and top_s >= seq and out and top_b == 1:  # one hint: batch 1, and how long a context it takes
        out[0]["change"] += f"; at batch 1 contexts up to {top_s} tokens fit"
    elif top_s and (top_s < seq or batch > 1):
        # a context that grows at batch 1 (4096 -> 7424) is longer, never "shorter samples"
        what, cost = (f"context {seq} -> {top_s} tokens at batch 1", "shorter samples (truncated or split)") \
            if top_s < seq else (f"batch {batch} -> 1 (ga{batch} keeps the effective batch{caveat}), which also takes contexts "
                                 f"up to {top_s} tokens", f"{1 / batch:.0%} of the tokens per step at {seq} tokens")
        out.append({"kind": "to-fit", "change": what, "technique": base["technique"],
                    "verdict": "fits", "fits": True, "need_bytes": _plus(row.get("peak_at_max_seq_bytes"), _outside(base, gpu)),
                    "headroom_bytes": cap - _int(row["peak_at_max_seq_bytes"]) if row.get("peak_at_max_seq_bytes")
                    else None, "speed_cost": f"{cost}; speed not modelled at that shape",
                    "step_s": None, "provenance": "sim (the recipe's search)", "source": base.get("fits_source")})
    return out


# The order people try changes in (docs/fit.md): the shape first, then settings of the
# same run on one GPU, then another training method (QLoRA), then offload, then more GPUs; a
# stacked hint ranks as its last change. Within a rank: those that fit first, least step time first.
RANKS = (("batch ", 0), ("context ", 0), ("expandable", 1), ("gradient checkpointing", 1), ("bf16", 1),
         ("8-bit", 1), ("QLoRA", 2), ("offload", 3), ("FSDP CPU offload", 3), ("FSDP instead", 3), ("GPUs", 4))


def rank(change: str) -> float:
    """``RANKS``' rank of a change (its last, where stacked); more GPUs: the fewest first."""
    last = change.split(" + ")[-1]
    r = next((r for word, r in RANKS if last.startswith(word) or word in ("offload", "GPUs") and word in last), 5)
    return r + int(last.split()[0]) / 1000 if r == 4 and last.split()[0].isdigit() else r


def next_step(base: dict, gpu: str, cap: int) -> list[dict]:
    """For a recipe that fits: the next batch and the next context past the largest that fit."""
    row, rec = base.get("fit") or {}, base.get("record") or {}
    out = []
    for axis, top, peak, nxt, unit in (("batch", "max_batch_at_seq", "peak_at_max_batch_bytes",
                                        "peak_at_next_batch_bytes", f"x {rec.get('seq_len')} tokens"),
                                       ("context", "max_seq_at_batch1", "peak_at_max_seq_bytes",
                                        "peak_at_next_seq_bytes", "tokens at batch 1")):
        value, need = _int(row.get(top)), _int(row.get(nxt))
        if value is None:
            continue
        if row.get(f"{'batch' if axis == 'batch' else 'seq'}_answer") == "beyond":
            out.append({"kind": "next-step",
                        "change": f"{axis}: fits up to the limit searched ({value} {unit}); nothing above it was asked",
                        "technique": base["technique"], "verdict": "fits", "fits": True,
                        "need_bytes": _plus(row.get(peak), _outside(base, gpu)), "headroom_bytes": cap - _int(row[peak])
                        if row.get(peak) else None, "speed_cost": "-", "step_s": None,
                        "provenance": "sim (the recipe's search)", "source": base.get("fits_source")})
            continue
        step = 1 if axis == "batch" else fits_csv.RESOLUTION_TOKENS
        below = _int(row.get(f"{'batch' if axis == 'batch' else 'seq'}_below"))
        change = f"next {axis} up: {value + step} {unit} (largest that fits: {value})" if below is None else \
            f"{axis} {below} {unit} does not fit; {value} does; between them not searched (the search's budget ran out)"
        out.append({"kind": "next-step", "change": change,
                    "technique": base["technique"], "verdict": "does-not-fit" if need else "not searched", "fits": False,
                    "need_bytes": _plus(need, _outside(base, gpu)), "headroom_bytes": cap - need if need else None,
                    "at_largest_bytes": _plus(row.get(peak), _outside(base, gpu)), "speed_cost": "-", "step_s": None,
                    "provenance": "sim (the recipe's search)", "source": base.get("fits_source")})
    return out


def hints(base: dict, gpu: str, profile: dict, evaluate, say=print) -> list[dict]:
    """The hints for one answered recipe (``base``: a line of the fit answer). ``evaluate(list of
    technique lists) -> lines`` answers recipes as the fit command does."""
    cap = verdicts.capacity(profile, _nccl(base, gpu))  # the search's peaks are the asked recipe's
    if base.get("verdict") == "fits":
        return [_keyed(h) for h in next_step(base, gpu, cap)]
    if (base.get("record") or {}).get("status") != "ok":
        return []
    names = [n for n in base["technique"].split("+") if n != "baseline"]
    tried = changes(names)
    if base.get("verdict") == "tight" and _valid(names + ["expandable-segments"]):
        # tight: the allocations fit, the modelled reserve does not; fewer, growing segments may close that
        tried.insert(0, ("expandable segments (+expandable-segments)", names + ["expandable-segments"]))
    out = shape_hints(base, gpu, cap)
    # more GPUs: the most first; fewer shard less (per-rank memory only grows), so where the most do not
    # fit they are not simulated (each such simulation costs tens of seconds)
    multi = [t for t in tried if t[0].endswith("GPUs (ZeRO-3)")]
    first = [t for t in tried if t not in multi] + multi[-1:]
    done = list(zip(first, evaluate([new for _, new in first]))) if first else []
    if multi[:-1] and done[-1][1].get("verdict") == "fits":
        done += list(zip(multi[:-1], evaluate([new for _, new in multi[:-1]])))
    lines = [ln for _, ln in done]
    out += [_hint(what, ln, base, gpu, cap) for (what, _), ln in done]
    if tried and not any(h["fits"] for h in out[len(out) - len(lines):]):
        stacked, what = names, []
        for label, new in tried:  # stack the changes in order, until the recipe fits
            dropped, added = set(names) - set(new), [n for n in new if n not in names]
            merged = list(dict.fromkeys([n for n in stacked if n not in dropped] + added))
            if not _valid(merged) or merged == stacked:
                continue
            stacked, what = merged, what + [label]
            if len(what) == 1:
                continue  # one change alone: already tried above
            line = evaluate([stacked])[0]
            out.append(_hint(" + ".join(what), line, base, gpu, cap))
            if line.get("verdict") == "fits":
                break
    out.sort(key=lambda h: (not h["fits"], rank(h["change"]), h["step_s"] if h["step_s"] is not None else float("inf"),
                            h["need_bytes"] or 0))
    return [_keyed(h) for h in out]


def _keyed(h: dict) -> dict:
    """One set of keys for every hint: a shape or next-step hint (the asked recipe's own search) has no
    dtype change and no record of its own whose rules it could break."""
    return dict(h, also_changes=h.get("also_changes"), broken_rules=h.get("broken_rules") or [])


def _plus(value, outside: int = 0):
    """A search's modelled reserved peak as a need (the table's and the report's): plus the CUDA reserve
    and ``outside`` (cuBLAS's workspaces, a multi-GPU rank's NCCL buffers: ``_outside``)."""
    value = _int(value)
    return value + verdicts.RESERVE_BYTES + outside if value is not None else None


def _int(value):
    try:
        return int(float(value)) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None
