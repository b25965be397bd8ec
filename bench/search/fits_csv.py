"""The rows of results/fits.csv: the search grid, one row per (cell, GPU), its words, and
the table gathered from the per-cell search files (bench/search/fits.py writes those). Torch-free.

    row(spec, gpu, vals, reason, how) -> dict      one GPU's answers, every column present
    answer_text(row, "seq" | "batch") -> str       '8192 tokens', 'does not fit at batch 1 x 256 tokens'
    collect(paths, cells, out) -> rows written      results/fits.csv, a row for every sim cell and GPU
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from bench.estimate import verdicts
from bench.records import atomic
from bench.cells import inputs

RESOLUTION_TOKENS = 256
SEQ_LIMIT = 131072
BATCH_LIMIT = 256
COLUMNS = ("study", "model", "technique", "gpu", "cell", "seq_len", "batch_size", "resolution_tokens",
           "seq_limit", "batch_limit", "max_seq_at_batch1", "seq_answer", "max_batch_at_seq", "batch_answer",
           "seq_below", "batch_below", "peak_at_max_seq_bytes", "peak_at_next_seq_bytes", "peak_at_max_batch_bytes",
           "peak_at_next_batch_bytes", "verdict_rule", "provenance", "reason", "how", "inputs_sha256")
RULE = ("fits: the modelled reserved peak (allocation trace replayed through bench/estimate/allocator.py's CUDA "
        f"caching-allocator model) <= GPU memory - {verdicts.RESERVE_BYTES // verdicts.MiB} MiB - cuBLAS's workspaces (bench/estimate/verdicts.py); "
        "peaks given are modelled reserved bytes")
# bracketed: the exact search's budget ran out between a shape that fits (max_*) and one that
# does not (*_below): "at least 11264 tokens, below 12288"
ANSWER_WORDS = {"fits": "largest that fits", "beyond": "fits beyond the limit searched",
                "none": "does not fit at batch 1 x {min} tokens", "error": "not searched",
                "bracketed": "at least {value}, below {below}"}


def seq_limit(spec: dict) -> int:
    """The model's context length (max_position_embeddings) on the grid, at most SEQ_LIMIT."""
    path = Path(spec["model_config"])
    try:
        cfg = json.loads((path / "config.json" if path.is_dir() else path).read_text())
    except (OSError, ValueError):
        cfg = {}
    cfg = cfg.get("text_config", cfg)
    ctx = cfg.get("max_position_embeddings") or SEQ_LIMIT
    return max(RESOLUTION_TOKENS, min(SEQ_LIMIT, ctx) // RESOLUTION_TOKENS * RESOLUTION_TOKENS)


def row(spec: dict, gpu: str, vals: dict, reason: str = "", how: str = "") -> dict:
    row = dict.fromkeys(COLUMNS)
    row.update(study=spec["study"], model=spec["model"], technique="+".join(spec["techniques"]), gpu=gpu,
               cell=spec["cell"], seq_len=spec["seq_len"], batch_size=spec["batch_size"],
               resolution_tokens=RESOLUTION_TOKENS, seq_limit=seq_limit(spec),
               batch_limit=BATCH_LIMIT, verdict_rule=RULE, provenance="simulated", reason=reason, how=how,
               inputs_sha256=inputs.digest(spec["inputs_sha256"]))
    if reason:
        row.update(seq_answer="error", batch_answer="error")
    row.update(vals)
    return row


def answer_text(row: dict, axis: str) -> str:
    """'8192 tokens', 'batch 6 x 2048 tokens', 'fits beyond the limit searched (131072 tokens)',
    'does not fit at batch 1 x 256 tokens'."""
    ans = row[f"{axis}_answer"]
    if ans == "error":
        return f"not searched: {row['reason']}"
    if ans == "none":
        return ANSWER_WORDS["none"].format(min=row["resolution_tokens"]) if axis == "seq" else \
            f"does not fit at batch 1 x {row['seq_len']} tokens"
    value = row["max_seq_at_batch1"] if axis == "seq" else row["max_batch_at_seq"]
    shape = f"{value} tokens" if axis == "seq" else f"batch {value} x {row['seq_len']} tokens"
    if ans == "beyond":
        return f"fits beyond the limit searched ({shape})"
    if ans == "bracketed":
        below = row.get(f"{axis}_below")
        below = f"{below} tokens" if axis == "seq" else f"batch {below}"
        return f"at least {shape}, below {below} (the search's budget ran out between them)"
    return shape


COUNT_COLUMNS = ("seq_len", "batch_size", "resolution_tokens", "seq_limit", "batch_limit", "max_seq_at_batch1",
                 "max_batch_at_seq", "seq_below", "batch_below", "peak_at_max_seq_bytes", "peak_at_next_seq_bytes",
                 "peak_at_max_batch_bytes", "peak_at_next_batch_bytes")
AXES = {"seq": ("max_seq_at_batch1", "seq_limit", "peak_at_max_seq_bytes"),
        "batch": ("max_batch_at_seq", "batch_limit", "peak_at_max_batch_bytes")}


def _count(v):
    """An integer from a row's cell (int, or its decimal text from the CSV); None when blank; False when not one."""
    if v is None or v == "":
        return None
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return v
    return int(v) if isinstance(v, str) and v.strip().isdigit() else False


def row_problems(r: dict, capacity: int | None = None) -> list[str]:
    """What makes a search row contradict itself (empty: it may be answered from): an answer that is
    not one of ANSWER_WORDS, a count column that is not a count, a "fits"/"beyond" answer without
    its value or outside the row's own limit, and (given the GPU's ``capacity``, verdicts.capacity)
    an answer that fits whose own sampled peak exceeds that capacity. Never raises."""
    if not isinstance(r, dict):
        return [f"a search row is an object, not {type(r).__name__}"]
    out = [f"{c} {r.get(c)!r} is not a count" for c in COUNT_COLUMNS if _count(r.get(c)) is False]
    for axis, (col, limit, peak) in AXES.items():
        ans = r.get(f"{axis}_answer")
        if ans not in ANSWER_WORDS:
            out.append(f"{axis}_answer {ans!r} is not one of {sorted(ANSWER_WORDS)}")
            continue
        value, lim, top = _count(r.get(col)), _count(r.get(limit)), _count(r.get(peak))
        if ans == "bracketed" and not (value and _count(r.get(f"{axis}_below")) and
                                       _count(r.get(f"{axis}_below")) > value):
            out.append(f"{axis}_answer 'bracketed' needs {col} below {axis}_below")
            continue
        if ans not in ("fits", "beyond", "bracketed") or value is False or (value is None and ans == "beyond"):
            continue
        if not value or lim is False or (lim and value > lim):
            out.append(f"{col} {r.get(col)!r} is not an answer within the row's own {limit} {r.get(limit)!r}")
        elif capacity is not None and top and top > capacity:
            out.append(f"{axis}_answer {ans!r}, yet its own {peak} {top} exceeds the card's capacity {capacity}")
    return out


def read_doc(path: Path) -> tuple[dict | None, str]:
    """A per-cell search file, or None and why it cannot be used (never raises)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if not isinstance(doc, dict) or not isinstance(doc.get("cell"), str) or not isinstance(doc.get("rows"), list) \
            or not all(isinstance(r, dict) and isinstance(r.get("gpu"), str) for r in doc["rows"]):
        return None, "not a search file (an object with cell and rows, one per GPU)"
    return doc, ""


def refused(r: dict, where, capacity: int | None = None) -> dict:
    """``r`` where it holds (``row_problems``), else the row as an error row naming what
    contradicts what: "not searched", rerun to search again; never an answer."""
    found = row_problems(r, capacity)
    if not found:
        return r
    return dict(r, seq_answer="error", batch_answer="error", max_seq_at_batch1=None, max_batch_at_seq=None,
                reason=f"the stored search {where} contradicts itself: {'; '.join(found)}; rerun to search again")


def set_aside(path: Path, why: str, say) -> None:
    """A corrupt search file is renamed to <name>.corrupt (kept as evidence), so that Snakemake
    sees its output missing and searches the cell again on the next run."""
    say(f"bench.search.fits: {path}: unusable ({why}); moved to {path.name}.corrupt, rerun to search again")
    try:
        Path(path).replace(Path(path).with_name(Path(path).name + ".corrupt"))
    except OSError as exc:
        say(f"bench.search.fits: {path}: could not move it aside: {exc}")


def collect(paths, cells: dict, out: Path, say=print) -> int:
    """results/fits.csv from the per-cell files, in matrix order; a sim cell without its file,
    or whose file is corrupt (an error row naming the file and why; the file is set aside), is
    an error row. The table is written whatever the files hold."""
    docs, bad = {}, {}
    for p in paths:
        doc, why = read_doc(Path(p))
        if doc is None:
            bad[Path(p).stem] = f"corrupt fits file {p}: {why}"
            set_aside(Path(p), why, say)
        else:
            docs[doc["cell"]] = doc
    rows = []
    for cid, spec in cells.items():
        if spec["mode"] != "sim":
            continue
        doc = docs.get(cid)
        if doc is None or doc.get("inputs_sha256") != spec["inputs_sha256"]:
            why = bad.get(cid, "no fits file") if doc is None else "fits file made from other inputs"
            # no inputs digest: the row answers nothing about these inputs (bench/fit/stored.py skips it)
            rows += [dict(row(spec, g, {}, reason=why), inputs_sha256=None) for g in spec["verdict_gpus"]]
        else:
            rows += [dict(r, inputs_sha256=inputs.digest(spec["inputs_sha256"])) for r in doc["rows"]]
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=COLUMNS)
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if r.get(k) is None else r[k] for k in COLUMNS})
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out, buf.getvalue())
    return len(rows)
