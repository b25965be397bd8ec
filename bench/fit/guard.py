"""The fit command as a launch guard: its exit status and its answer as one JSON object.

Exit status (``exit_code``):
  0  it fits: every asked recipe (``--config`` or ``--techniques``) fits the GPU; without either,
     at least one recipe of the default list fits. "fits, with paging" (bitsandbytes' paged
     optimizer state partly paged to host memory by the CUDA driver) exits 0 and is flagged:
     the step runs, slower by the modelled paging traffic.
  1  it does not fit: oom, an error or time-out of the simulation, a skipped recipe, or
     "tight" (the step's allocations fit but the modelled reserved peak, with the caching
     allocator's rounding and fragmentation, exceeds what the card offers: a launch may OOM
     mid-run), unless ``--allow-tight`` (then 0, with a warning on stderr).
  2  bad input (unknown model, GPU or technique, an unreadable or malformed config, a bad shape).
  3  the command failed (a bug): one line naming the exception, never 1, which would read "does not fit".

With ``--json`` an exit 2 or 3 is still one object on stdout (``error_object``): ``verdict``
``bad-input`` or ``failed``, ``exit_code``, and ``error`` (``kind``, ``message``).

``answer_object`` is the ``--json`` output (``SCHEMA_VERSION``; fields in docs/fit.md): the same
content as the text answer. Bytes are integers; every figure says its provenance ("sim": the
simulated step's trace replayed through the allocator model; "modelled": the speed model).
Torch-free.
"""
from __future__ import annotations

from bench.corpus import answer_error
from bench.estimate import hostmem, verdicts
from bench.estimate.measures import blas_bytes
from bench.records.stated import need_bytes

SCHEMA_VERSION = 1
OK, NO_FIT, BAD_INPUT, FAILED = 0, 1, 2, 3


def error_object(code: int, message: str) -> dict:
    """The ``--json`` object of an answer that could not be given: bad input (2) or a failure (3)."""
    kind = "bad-input" if code == BAD_INPUT else "failed"
    return {"schema_version": SCHEMA_VERSION, "verdict": kind, "exit_code": code,
            "error": {"kind": kind, "message": message}}


def paged(line: dict, gpu: str) -> bool:
    """Whether this line fits only with part of a paged optimizer's state paged to the host."""
    page = ((line.get("record") or {}).get("details") or {}).get("paging", {}).get(gpu) or {}
    return bool(page.get("paged_out_bytes"))


def status(line: dict, gpu: str) -> str:
    """fits | fits-with-paging | tight | oom | error | timeout | skipped (one recipe's guard verdict)."""
    v = line.get("verdict") or "error"
    if v == "fits":
        return "fits-with-paging" if paged(line, gpu) else "fits"
    return v if v in ("tight", "oom", "skipped", "timeout") else "error" if v != "oom while loading" else "oom"


def host(line: dict, gpu: str, host_bytes: int | None = None) -> dict | None:
    """The recipe's host memory need on the node (bench/estimate/hostmem.py) and, with ``--host-mem``,
    its verdict against it; None where the record gives no figures."""
    got = hostmem.need(line.get("record") or {}, gpu)
    if got is None:
        return None
    total = got.pop("bytes")
    return dict(got, need_bytes=total, given_bytes=host_bytes, verdict=hostmem.judge(total, host_bytes))


def passes(line: dict, gpu: str, allow_tight: bool, host_bytes: int | None = None) -> bool:
    on_gpu = status(line, gpu) in ("fits", "fits-with-paging") or (allow_tight and status(line, gpu) == "tight")
    return on_gpu and (host_bytes is None or (host(line, gpu, host_bytes) or {}).get("verdict") != "oom")


def exit_code(lines: list[dict], gpu: str, asked: bool, allow_tight: bool = False, host_bytes: int | None = None) -> int:
    """0 or 1 as the module docstring says: all asked recipes pass, or (default list) any; with
    ``--host-mem``, a recipe whose host need exceeds it does not pass."""
    ok = [passes(ln, gpu, allow_tight, host_bytes) for ln in lines]
    if any(status(ln, gpu) in ("error", "timeout") for ln in lines):
        return NO_FIT  # a simulation that failed is never a pass
    return OK if ok and (all(ok) if asked else any(ok)) else NO_FIT


def warnings(lines: list[dict], gpu: str, allow_tight: bool) -> list[str]:
    out = []
    for ln in lines:
        s = status(ln, gpu)
        if s == "fits-with-paging":
            out.append(f"{ln['technique']}: fits, with paging (exit 0): part of the paged optimizer state lives in "
                       "host memory; each step moves it over the host link")
        elif s == "tight":
            out.append(f"{ln['technique']}: tight: the modelled reserved peak exceeds the usable memory although the "
                       f"allocations fit; " + ("--allow-tight: exit 0" if allow_tight else "exit 1 (--allow-tight to pass)"))
    return out


def _num(value):
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def recipe_object(line: dict, gpu: str, cap: int, host_bytes: int | None = None, board: list[dict] | None = None,
                  memory_bytes: int | None = None) -> dict:
    """``board``: the reference scoreboard's rows (bench/corpus/answer_error.py), for the need's held-out error."""
    rec = line.get("record") or {}
    row = line.get("fit") or {}
    need, _ = need_bytes(rec, gpu) if rec else (None, False)  # as the table and the report: modelled peak + reserve
    need = int(need) if need is not None else None
    est = ((rec.get("details") or {}).get("speed_model") or {}).get(gpu) or {}
    world = rec.get("world_size") or 1
    page = ((rec.get("details") or {}).get("paging") or {}).get(gpu)
    return {
        "technique": line["technique"], "cell": line.get("cell"), "verdict": status(line, gpu),
        "need_bytes": need, "need_is": "modelled reserved peak of a step in the allocator's steady state plus the CUDA reserve (or the model's load plus "
        "the reserve, where a multi-GPU load holds more: bench/records/stated.py), against "
        "memory_bytes" + (", per rank" if world > 1 else ""),
        "modelled_reserved_peak_bytes": rec.get("modelled_reserved_peak_bytes"),
        "allocated_peak_bytes": rec.get("peak_bytes"),
        "capacity_bytes": cap,
        "headroom_bytes": cap + verdicts.RESERVE_BYTES + blas_bytes(rec.get("details") or {}, gpu) - need
        if need is not None else None,
        "world_size": world, "paging": page, "host_memory": host(line, gpu, host_bytes),
        "largest_seq_at_batch1": _num(row.get("max_seq_at_batch1")),
        "largest_batch_at_seq": _num(row.get("max_batch_at_seq")),
        "peak_at_next_seq_bytes": _num(row.get("peak_at_next_seq_bytes")),
        "peak_at_next_batch_bytes": _num(row.get("peak_at_next_batch_bytes")),
        "seq_answer": row.get("seq_answer"), "batch_answer": row.get("batch_answer"),
        "seq_below": _num(row.get("seq_below")), "batch_below": _num(row.get("batch_below")),
        "speed": ({"step_s": est.get("step_s"), "tokens_per_s_per_rank": est.get("tokens_per_s"),
                   "tokens_per_s_run": (est.get("tokens_per_s") or 0) * world, "provenance": "modelled"}
                  if est.get("step_s") is not None else None),
        "provenance": "sim" if rec.get("mode", "sim") == "sim" else rec.get("mode"),
        "record_source": line.get("source"), "fits_source": line.get("fits_source"),
        "reason": line.get("reason"),
        "note": ((rec.get("details") or {}).get("verdict_notes") or {}).get(gpu),
        "need_error": answer_error.for_need(line["technique"].split("+"), world, need, memory_bytes, board)
        if board is not None and need is not None and memory_bytes else None,
    }


def answer_object(q, lines: list[dict], gpu: str, profile: dict, hints: list[dict], code: int,
                  allow_tight: bool, host_bytes: int | None = None) -> dict:
    cap = verdicts.capacity(profile)
    try:
        board, board_said = answer_error.reference_rows(), str(answer_error.BOARD)
    except answer_error.BoardError as exc:
        board, board_said = None, f"none: {exc}"
    recipes = [recipe_object(ln, gpu, cap, host_bytes, board, profile["memory_bytes"]) for ln in lines]
    statuses = [r["verdict"] for r in recipes]
    spec = next((ln["record"] for ln in lines if ln.get("record")), {}) or {}
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": ("fits" if code == OK and "fits" in statuses else "fits-with-paging" if code == OK
                    and "fits-with-paging" in statuses else "tight" if code == OK else
                    "tight" if "tight" in statuses and not {"oom", "error"} & set(statuses) else "does-not-fit"),
        "exit_code": code,
        "model": {"asked": q.asked, "resolved": q.model, "notes": q.notes},
        "gpu": {"name": gpu, "label": profile.get("label", gpu), "memory_bytes": profile["memory_bytes"],
                "reserve_bytes": verdicts.RESERVE_BYTES,
                "blas_workspace_bytes": verdicts.blas_workspace_bytes(profile), "capacity_bytes": cap},
        "shape": {"batch": spec.get("batch_size") or q.batch or 1, "seq": spec.get("seq_len") or q.seq or 2048},
        "recipes": recipes,
        "hints": hints,
        "config": q.recipe.as_dict() if q.recipe is not None else None,
        "ignored": q.recipe.ignored if q.recipe is not None else [],
        "warnings": warnings(lines, gpu, allow_tight),
        "need_error_from": board_said,
        "provenance": "sim: simulated step (fake tensors, allocation trace replayed through the caching-allocator "
                      "model; ZeRO and FSDP on several GPUs: one rank's own program); modelled: the speed model, and "
                      "the analytic partitioning where a cell says so. Not measured on a GPU.",
    }


def _gib(n) -> str:
    return f"{n / 2**30:.2f} GiB" if isinstance(n, (int, float)) else "-"


def host_lines(lines: list[dict], gpu: str, host_bytes: int | None) -> list[str]:
    """One line per recipe: its host memory need on the node, and against ``--host-mem`` its verdict;
    one-process recipes with the same need and parts share one line (a 7B's dozen one-GPU recipes
    all read the same checkpoint)."""
    out, same = [], {}
    for ln in lines:
        h = host(ln, gpu, host_bytes)
        if h is None:
            continue
        parts = ", ".join(f"{k} {_gib(v)}" for k, v in h["parts"].items() if v)
        said = ("" if h["verdict"] is None else
                f"; {'within' if h['verdict'] == 'fits' else 'more than'} the {_gib(host_bytes)} given")
        what = f"needs {_gib(h['need_bytes'])} of host memory on the node at its {h['phase']} ({parts}; {h['ranks']} rank(s)){said}"
        if h["ranks"] == 1:
            same.setdefault(what, []).append(ln["technique"])
        else:
            out.append(f"  {ln['technique']}: {what}")
    for what, names in reversed(same.items()):
        who = names[0] if len(names) == 1 else \
            f"{len(names)} one-GPU recipes ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
        out.insert(0, f"  {who}: {what}")
    if out:
        out.insert(0, "host memory (modelled; --host-mem judges it" + (")" if host_bytes is None else
                                                                     f": {_gib(host_bytes)} given)") + ":")
    return out


def describe(q, hints: list[dict], warns: list[str], code: int, host_said: list[str] = ()) -> str:
    """The text answer's part beyond the table: how the model was found, what the config mapped
    and ignored, the host memory, what to change (or the next step up), and the guard's verdict."""
    out = [""] + [f"model: {n}" for n in q.notes] + list(host_said)
    if q.recipe is not None:
        r = q.recipe
        out += [f"config {r.file} ({r.format}): {'+'.join(r.techniques())}, batch {q.batch or 1}, "
                f"sequence {q.seq or 2048}" + (f", options {r.echo_options()}" if r.options() else ""),
                "  mapped:"]
        out += [f"    {m['key']}: {m['value']} -> {m['as']}" for m in r.mapped]
        out += ["  ignored:"] + [f"    {i['key']}: {str(i['value'])[:40]}: {i['reason']}" for i in r.ignored]
    for kind, title in (("to-fit", "what to change to fit"), ("next-step", "the next step up")):
        some = [h for h in hints if h.get("kind") == kind]
        if some:
            out += ["", f"{title} (need: sim, the modelled reserved peak + the CUDA reserve; speed: modelled):"]
        for h in some:
            mark = "fits" if h["fits"] else h.get("verdict") or "?"
            out.append(f"  {h['for_recipe']}: {h['change']}: {mark}, need {_gib(h['need_bytes'])}"
                       f" (headroom {_gib(h['headroom_bytes'])}); {h['speed_cost']} [{h['provenance']}]")
            out += [f"    not to be trusted: {p}" for p in h.get("broken_rules") or []]
    out += [""] + [f"warning: {w}" for w in warns]
    out.append(f"guard: exit {code} ({'fits' if code == OK else 'does not fit'}; 0 fits, 1 does not fit, "
               "2 bad input)")
    return "\n".join(out)
