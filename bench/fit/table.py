"""The fit command's answer as text: the table of techniques (verdict, need, card memory, the
largest sequence and batch that fit, the modelled speed), the lines under each row
(bench/cli_format.py), where each answer came from, what weights-and-optimizer estimators say, and
without asked techniques the best recipes. Torch-free.
"""
from __future__ import annotations

from pathlib import Path

from bench import cli_format
from bench.corpus import answer_error
from bench.estimate import speedcv, verdicts
from bench.estimate.measures import beside_bytes, nccl_bytes
from bench.records.stated import need_bytes
from bench.fit.stored import ROOT
from bench.records import consistency
from bench.search import fits_csv

GiB = 2**30


def fitted(text: str, width: int) -> str:
    """``text`` in a column of ``width``, or its start and '(below)' where the whole text is
    printed under the row."""
    if len(text) <= width:
        return f"{text:<{width}}"
    head = text[:width - 8].rsplit(" ", 1)[0].rstrip(":,; ")
    return f"{head + ' (below)':<{width}}"


def speed(rec: dict, gpu: str) -> str:
    est = ((rec or {}).get("details") or {}).get("speed_model", {}).get(gpu)
    if not est or est.get("step_s") is None:
        return "no speed model"
    n = (rec or {}).get("world_size") or 1
    if n > 1:  # the speed model is one rank's step; the run trains n ranks' tokens at once
        return (f"{est['step_s']:.2f} s/step, {est['tokens_per_s']:.0f} tokens/s per rank, "
                f"{est['tokens_per_s'] * n:.0f} for the run of {n} ({speedcv.short(est.get('calibration'))})")
    return f"{est['step_s']:.2f} s/step, {est['tokens_per_s']:.0f} tokens/s ({speedcv.short(est.get('calibration'))})"


def tight_line(rec: dict, need, profile: dict, gpu: str | None = None) -> str | None:
    """What a tight verdict rests on, in its numbers, so that "tight" never reads as a small overrun
    when the need is far over: the allocations fit, only the modelled reserve does not."""
    alloc = rec.get("peak_bytes")
    if not need or not isinstance(alloc, (int, float)):
        return None
    details = rec.get("details") or {}
    nccl = nccl_bytes(details, gpu) if gpu else 0
    # beside the replay: the record's own cuBLAS workspaces and NCCL buffers for this GPU (the profile's rule without one)
    beside = beside_bytes(details, gpu) if gpu else verdicts.blas_workspace_bytes(profile)
    card, reserve = profile["memory_bytes"], verdicts.RESERVE_BYTES + beside
    nccl_said = (", cuBLAS's workspaces and NCCL's buffers" if nccl else " and cuBLAS's workspaces")
    return (f"tight: the step's allocations fit ({(alloc + reserve) / GiB:.2f} GiB with the CUDA reserve{nccl_said}, of "
            f"{card / GiB:.2f}); the allocator's modelled cache does not (need {need / GiB:.2f} GiB, "
            f"{(need - card) / GiB:.2f} over): it runs only by releasing cached segments and retrying (slower), "
            "and fragmentation may still end it out of memory")


def once(note: str, technique: str, said: dict) -> str:
    """``note`` the first time; after that, a pointer to the row it was printed under."""
    if note in said:
        return f"(as for {said[note]})"
    said[note] = technique
    return note


def shape_said(lines: list[dict]) -> list[str]:
    """The shape the need and verdict are for, said once above the table."""
    shapes = {(r.get("batch_size"), r.get("seq_len")) for ln in lines if (r := ln.get("record") or {}).get("seq_len")}
    if len(shapes) != 1:
        return []
    (batch, seq), = shapes
    return [f"need and verdict: one training step at batch {batch} x {seq} tokens"]


def render(lines: list[dict], gpu: str, profile: dict, model: str, best: bool) -> str:
    cap = verdicts.capacity(profile)
    out = [f"{model} on {gpu} ({profile.get('label', gpu)}): {profile['memory_bytes'] / GiB:.1f} GiB, "
           f"{cap / GiB:.1f} GiB usable after the {verdicts.RESERVE_BYTES // verdicts.MiB} MiB CUDA reserve and "
           f"{verdicts.blas_workspace_bytes(profile) / verdicts.MiB:g} MiB of cuBLAS workspaces",
           "simulated (fake tensors, counted as CUDA would allocate; reserved memory modelled), not measured on a GPU",
           *shape_said(lines), ""]
    # one-GPU recipes first, then those on several GPUs under their own heading
    lines = sorted(lines, key=lambda ln: ((ln.get("record") or {}).get("world_size") or 1) > 1)
    noted: dict[str, str] = {}   # a note already printed under an earlier row: said once, then referred to
    tw = max([28] + [len(ln["technique"]) for ln in lines])  # a long combination never shifts the columns
    head = (f"{'technique':<{tw}} {'verdict':<8} {'need GiB':>9} {'card GiB':>8}  {'largest seq at batch 1':<47} "
            f"{'largest batch':<40} speed")
    out += [head, "-" * len(head)]
    for i, ln in enumerate(lines):
        rec = ln.get("record") or {}
        if (rec.get("world_size") or 1) > 1 and (i == 0 or ((lines[i - 1].get("record") or {}).get("world_size") or 1) == 1):
            out.append("on several GPUs (need, speed and verdict per rank):")
        serving = bool((rec.get("details") or {}).get("vllm"))   # a vLLM plan: its line under the row says it
        need, lower = need_bytes(rec, gpu) if rec.get("status") == "ok" and not serving else (None, False)  # the report's
        row = ln.get("fit")
        seq = fits_csv.answer_text(row, "seq") if row else "not searched"
        bat = fits_csv.answer_text(row, "batch") if row else "not searched"
        need_s = f"{('>=' if lower else '') + f'{need / GiB:.2f}':>9}" if need else f"{'-':>9}"
        out.append(f"{ln['technique']:<{tw}} {ln['verdict'] or '?':<8} {need_s} {profile['memory_bytes'] / GiB:>8.2f}  "
                   f"{fitted(seq, 47)} "
                   f"{fitted(bat, 40)} {speed(rec, gpu)}")
        pointed: set[str] = set()   # one "(as for X)" a row, where several of its notes were said under X

        def note_line(text: str) -> None:
            said = once(text, ln["technique"], noted)
            if said not in pointed:
                out.append(f"    {said}")
            if said.startswith("(as for "):
                pointed.add(said)
        if ln.get("reason"):
            note_line(ln["reason"])
        for what, text, width in (("largest sequence", seq, 47), ("largest batch", bat, 40)):
            if len(text) > width and not (what == "largest batch" and text == seq):  # whole, never cut mid-word
                out.append(f"    {what}: {text}")
        if cli_format.rank_note(rec, gpu):
            out.append(f"    {cli_format.rank_note(rec, gpu)}")
        out += [f"    not to be trusted: {p}" for p in consistency.record_problems(rec)]  # a rule the record breaks
        if ln.get("verdict") == "tight" and (said := tight_line(rec, need, profile, gpu)):
            out.append(f"    {said}")
        note = ((rec.get("details") or {}).get("verdict_notes") or {}).get(gpu)
        if note and ln.get("verdict") != "fits" and note.startswith("fits, with paging"):
            note = "with paging, if it runs" + note[len("fits, with paging"):]  # a tight row is not "fits"
        if note:  # fits with paging, oom while loading, no bf16 kernels: what the verdict rests on
            note_line(note)
        out += [f"    {t}" for t in cli_format.vllm_lines(rec, gpu)]   # KV space, tokens, vLLM's error text
        if hint := cli_format.precision_hint(rec, ln.get("verdict")):
            note_line(hint)
    out.append("")
    cal = next((est.get("calibration") for ln in lines
                if (est := (((ln.get("record") or {}).get("details") or {}).get("speed_model") or {}).get(gpu))), None)
    if cal:   # the speed's out-of-sample error (bench/estimate/speedcv.py), not its calibration residuals
        out.append(f"speed: modelled, {cal.split(' (', 1)[0]}; {speedcv.note(cal)}.")
    out += memory_error_lines(lines, gpu, profile)
    out.append(f"need: the modelled reserved peak of a step (the allocator's steady state) plus the {verdicts.RESERVE_BYTES // verdicts.MiB} MiB "
               "CUDA reserve (context, kernels) and cuBLAS's workspaces on the card, the figure the verdict sets against the card's memory and "
               "the report's need (per rank for ZeRO/FSDP, with NCCL's buffers, whose speed is per rank and for the run; the model's load "
               "plus the reserve where that holds more, as QLoRA under ZeRO-3's does; '>=' where no reserved peak was modelled). "
               "Where each answer came from:")
    for ln in lines:
        out.append(f"  {ln['technique']}: record {_short(ln.get('source', '-'))}; fits {_short(ln.get('fits_source', '-'))}")
    out += peer_lines(lines)
    if best:
        good = [ln for ln in lines if ln.get("verdict") == "fits"]

        def key(ln):
            est = ((ln["record"].get("details") or {}).get("speed_model") or {}).get(gpu) or {}
            reach = (ln.get("fit") or {}).get("max_seq_at_batch1") or 0
            rate = est.get("tokens_per_s")  # as the report ranks: a step that trains fewer tokens is not faster
            return (-rate if rate else float("inf"), -int(reach or 0))
        good.sort(key=key)
        out.append("")
        out.append("best recipes (fit; most tokens/s first where a speed model exists, else furthest reach):"
                   if good else "best recipes: none of these fits")
        for ln in good[:5]:
            row = ln.get("fit")
            reach = f"largest sequence at batch 1: {fits_csv.answer_text(row, 'seq')}" if row else "not searched"
            need, _ = need_bytes(ln["record"], gpu)
            room = f"; headroom {(profile['memory_bytes'] - need) / GiB:.2f} GiB" if need else ""
            if row and str(row.get("max_seq_at_batch1")) == str(ln["record"].get("seq_len")):
                room += " (the asked length is its longest: no room for longer samples)"  # the trade, said
            out.append(f"  {ln['technique']}: {reach}{room}; {speed(ln['record'], gpu)}")
    return "\n".join(out)


def memory_error_lines(lines: list[dict], gpu: str, profile: dict) -> list[str]:
    """The need's out-of-sample error (bench/corpus/answer_error.py): one line per kind of recipe (the
    held-out published runs of that kind, their median and worst errors), then each recipe whose
    verdict would turn at its kind's worst error; one line why where the reference scoreboard cannot
    be read."""
    try:
        rows = answer_error.reference_rows()
    except answer_error.BoardError as exc:
        return [f"memory: no out-of-sample error to show: {exc}"]
    bands: dict[str, tuple[str, list[str]]] = {}
    turns, held = [], 0
    for ln in lines:
        rec = ln.get("record") or {}
        if rec.get("status") != "ok" or (rec.get("details") or {}).get("vllm"):
            continue
        need, _ = need_bytes(rec, gpu)
        b = answer_error.for_need(ln["technique"].split("+"), rec.get("world_size"), need, profile["memory_bytes"], rows)
        bands.setdefault(b["kind"] if b else "-", (answer_error.note(b, named=False), []))[1].append(ln["technique"])
        if b is None or need is None:
            continue
        fits_now = need <= profile["memory_bytes"]
        if (fits_now and not b["fits_at_worst_under"]) or (not fits_now and b["fits_at_worst_over"]):
            turns.append(f"  {ln['technique']}: {answer_error.at_worst(b, need, profile['memory_bytes'])}")
        else:
            held += 1
    if not bands:
        return []
    out = ["memory: the need's out-of-sample error, ours / published - 1 on published runs never used to build the "
           f"model ({answer_error.BOARD}):"]
    out += [f"  {kind} ({', '.join(names)}): {text}" for kind, (text, names) in bands.items()]
    if turns:
        out.append("  verdicts that turn at their kind's worst error:")
        out += ["  " + t for t in turns]
    out.append(f"  {'the other ' if turns else ''}{held} verdict(s) hold at their kind's worst error")
    return out


def peer_lines(lines: list[dict]) -> list[str]:
    """What weights-and-optimizer estimators say about the same model (``details.peers``: their
    own functions, run offline in the sim worker), beside our whole-step need. They count no
    activations and no technique, so one record's figures serve every line above."""
    peers = next((d["peers"] for ln in lines if (d := (ln.get("record") or {}).get("details") or {}).get("peers")), [])
    if not peers:
        return []
    out = ["", "the same model by estimators of weights and optimizer state only (no activations, no technique; "
               "details.peers):"]
    out += [f"  {p['source']}: {p['what']}: {p['bytes'] / GiB:.2f} GiB" for p in peers]
    return out


def _short(text) -> str:
    """Paths under the working directory or the project, relative."""
    for base in (Path.cwd(), ROOT):
        text = str(text).replace(f"{base}/", "")
    return text
