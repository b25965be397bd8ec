"""How far to trust a memory answer: the held-out error of answers of its kind. Torch-free.

The scoreboard (bench/corpus/scoreboard.py, results/reference/published/scoreboard.json) scores our
simulated figure against each published run. Its held-out rows are runs that were added after the
model was built and never used to change it: their errors are what a user can expect of an answer
the model has not seen. This module picks, for one answer, the held-out rows of the same kind and
gives their spread, and the need the answer would have if it were off as the worst of them.

- the kind of an answer: one GPU, or several under FSDP or ZeRO (``sharding``), and a full
  fine-tune, LoRA or QLoRA (``adapter``), from the cell's techniques (bench/cells/techniques.py);
- the rows: held-out, scored (``tools["ft-membench"]["signed_error"]``), with a stated measure
  (allocated, active, reserved or nvidia-smi; a row that states none is compared by a guess and
  left out here);
- the scope widens until it holds ``MIN_ROWS`` rows: the same sharding and adapter, then the same
  sharding, then one GPU or several, then every such row; the band says which it used;
- the signed error is (ours - published) / published, as the scoreboard computes it: a negative
  one is an under-estimate, the direction in which a guard says "fits" and the run dies. At the
  worst under-estimate, a need ``n`` would be ``n / (1 + worst_under)``.

The figures are what the reference scoreboard holds: ``band`` reads no record and runs nothing.
The answer's need and each row's published figure are not always the same measure (a need is a
modelled reserved peak plus the CUDA reserve; a row's measure is its own): the band applies the
rows' relative errors to the need, and says so.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench import home
from bench.cells import techniques

BOARD = Path("results") / "reference" / "published" / "scoreboard.json"
OURS = "ft-membench"
STATED = ("allocated", "active", "reserved", "nvidia-smi")
MIN_ROWS = 5
ADAPTERS = {None: "full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}


class BoardError(ValueError):
    """The scoreboard file is missing or is not one the scoreboard writes."""


def load(path: Path | None = None) -> list[dict]:
    """The scored rows of the reference scoreboard, checked: BoardError naming the file and the key
    where it is absent, unreadable or not in the scoreboard's shape."""
    path = Path(path) if path is not None else home.root() / BOARD
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise BoardError(f"{path}: no scoreboard (python -m bench.corpus.scoreboard writes it)") from None
    except (OSError, ValueError) as exc:
        raise BoardError(f"{path}: unreadable: {exc}") from None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list):
        raise BoardError(f"{path}: key 'rows': not a list of scored rows")
    for i, row in enumerate(rows):
        ours = (row.get("tools") or {}).get(OURS) if isinstance(row, dict) else None
        if not isinstance(ours, dict) or "signed_error" not in ours:
            raise BoardError(f"{path}: rows[{i}]: no tools.{OURS}.signed_error")
        for key in ("row", "role", "measure", "cell", "n_gpus"):
            if key not in row:
                raise BoardError(f"{path}: rows[{i}]: no key '{key}'")
        err = ours["signed_error"]
        if err is not None and not isinstance(err, (int, float)):
            raise BoardError(f"{path}: rows[{i}] ({row['row']}): tools.{OURS}.signed_error is {err!r}, not a number")
    return rows


def kind(names: list[str], world_size: int | None) -> tuple[str, str]:
    """(sharding, adapter) of a cell's techniques on ``world_size`` GPUs: sharding 'one GPU', 'FSDP'
    or 'ZeRO'; adapter 'full fine-tune', 'LoRA' or 'QLoRA'."""
    knobs = techniques.knobs(list(names))
    dist = knobs.get("dist") or ""
    sharding = "one GPU" if (world_size or 1) <= 1 else "FSDP" if dist.startswith("fsdp") else "ZeRO" if dist else "one GPU"
    return sharding, ADAPTERS.get(knobs.get("adapter"), str(knobs.get("adapter")))


def _row_kind(row: dict) -> tuple[str, str] | None:
    try:
        return kind(row["cell"].split("__")[2].split("+"), row.get("n_gpus"))
    except (IndexError, ValueError, AttributeError):   # a cell id this code no longer resolves: not counted
        return None


def scored(rows: list[dict]) -> list[tuple[tuple[str, str], dict]]:
    """The held-out rows scored against a stated measure, each with its kind."""
    out = []
    for row in rows:
        if row["role"] != "held-out" or row["measure"] not in STATED or not row["cell"]:
            continue
        if row["tools"][OURS]["signed_error"] is None or (k := _row_kind(row)) is None:
            continue
        out.append((k, row))
    return out


def band(names: list[str], world_size: int | None, rows: list[dict]) -> dict | None:
    """The held-out error of answers like this one: {scope, rows, median_abs, worst_under,
    worst_under_row, worst_over, worst_over_row}; None where the scoreboard has no such row at all."""
    sharding, adapter = kind(names, world_size)
    several = sharding != "one GPU"
    pool = scored(rows)
    scopes = [(f"{sharding}, {adapter}", lambda k: k == (sharding, adapter)),
              (sharding, lambda k: k[0] == sharding),
              ("several GPUs" if several else "one GPU", lambda k: (k[0] != "one GPU") == several),
              ("every held-out row", lambda k: True)]
    for label, keep in scopes:
        chosen = [r for k, r in pool if keep(k)]
        if len(chosen) >= MIN_ROWS or (label == "every held-out row" and chosen):
            return {"scope": label, "kind": f"{sharding}, {adapter}", **_figures(chosen)}
    return None


def _figures(chosen: list[dict]) -> dict:
    """rows, median |error|, worst under- and over-estimate (0 and no row where there is none) of scored rows."""
    errors = sorted((r["tools"][OURS]["signed_error"], r["row"]) for r in chosen)
    (low, low_row), (high, high_row) = errors[0], errors[-1]
    return {"rows": len(chosen), "median_abs": statistics.median(abs(e) for e, _ in errors),
            "worst_under": min(low, 0.0), "worst_under_row": low_row if low < 0 else None,
            "worst_over": max(high, 0.0), "worst_over_row": high_row if high > 0 else None}


def reference_rows() -> list[dict]:
    """The reference scoreboard's rows (``load``), read once a process; BoardError as ``load``'s."""
    global _ROWS
    if _ROWS is None:
        _ROWS = load()
    return _ROWS


_ROWS = None


def for_need(names: list[str], world_size: int | None, need: int | None, memory_bytes: int,
             rows: list[dict]) -> dict | None:
    """``band`` for one answer, with the need it would have at the band's two ends: under as the worst
    held-out row (``need_at_worst_under_bytes``, and whether that still fits ``memory_bytes``), over as
    the worst (``need_at_worst_over_bytes``, and whether that would fit); None without a band."""
    b = band(names, world_size, rows)
    if b is None:
        return None
    out = dict(b, need_at_worst_under_bytes=None, fits_at_worst_under=None, need_at_worst_over_bytes=None,
               fits_at_worst_over=None)
    if need is not None:
        under, over = int(need / (1 + b["worst_under"])), int(need / (1 + b["worst_over"]))
        out.update(need_at_worst_under_bytes=under, fits_at_worst_under=under <= memory_bytes,
                   need_at_worst_over_bytes=over, fits_at_worst_over=over <= memory_bytes)
    return out


def at_worst(b: dict, need: int | None, memory_bytes: int) -> str:
    """The answer's need at the band's worst error, in words: under for a need within the card, over
    for one beyond it ('' without a need)."""
    gib = 1 << 30
    if need is None or b.get("need_at_worst_under_bytes") is None:
        return ""
    card = f"the {memory_bytes / gib:.2f} GiB card"
    if need <= memory_bytes:
        under = b["need_at_worst_under_bytes"]
        if under <= memory_bytes:
            return f"under as the worst, {under / gib:.2f} GiB: still within {card}"
        return f"under as the worst, {under / gib:.2f} GiB: more than {card} (the verdict rests on the estimate)"
    over = b["need_at_worst_over_bytes"]
    if over <= memory_bytes:
        return f"over as the worst, {over / gib:.2f} GiB: within {card} (the verdict rests on the estimate)"
    return f"over as the worst, {over / gib:.2f} GiB: still more than {card}"


def note(b: dict | None, named: bool = True) -> str:
    """The band as a sentence: held-out rows, median and worst errors, the scope it was taken over
    (``named``: the scope said even where it is the answer's own kind)."""
    if b is None:
        return "no held-out published run is scored yet"
    scope = "" if b["scope"] == b["kind"] else f"; too few of its own kind ({b['kind']}), so over {b['scope']}"
    under = (f"worst {abs(b['worst_under']):.1%} under ({b['worst_under_row']})" if b["worst_under_row"]
             else "none under")
    over = f", worst {b['worst_over']:.1%} over ({b['worst_over_row']})" if b["worst_over_row"] else ""
    said = f" ({b['scope']})" if named or b["scope"] != b["kind"] else ""
    return f"{b['rows']} held-out published runs{said}: median error {b['median_abs']:.1%}, {under}{over}{scope}"


def by_kind(rows: list[dict]) -> list[dict]:
    """The held-out error of each kind with rows, as ``band`` gives it for that kind's own rows: the table the
    report shows beside the scoreboard (the bands the CLI prints, before any widening)."""
    groups: dict[tuple, list[dict]] = {}
    for k, row in scored(rows):
        groups.setdefault(k, []).append(row)
    return [{"kind": f"{sharding}, {adapter}", "widens": len(chosen) < MIN_ROWS, **_figures(chosen)}
            for (sharding, adapter), chosen in sorted(groups.items())]
