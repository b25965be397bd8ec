"""Stored records made before a knob joined the catalogue, brought to today's knob set. Torch-free.

    python -m bench.records.migrate results/reference/cuda-h200/cells/*.json   # in place, each file atomically
    python -m bench.records.migrate --check FILE...                            # exit 1 if any file would change

The record contract (bench/records/checks.py) wants a record's ``knobs`` to be exactly the catalogue's
(bench/cells/catalogue.py ``DEFAULT_KNOBS``). A knob joins the catalogue with, as its default, what the code
did before it existed, so a record made before then ran with that default. ``ADDED_KNOBS`` names each such
knob and that value; a record missing one gets it. Nothing else in the record changes: not a measurement,
not its engine digest (``versions.ft_membench_engine`` still says which code made it). A record missing any
other knob is left as it is, and the contract still refuses it.

What this is for: records that cannot be made again here, the GPU runs in results/reference/cuda-h100 and
cuda-h200 and the simulations stored beside them as they were predicted.
"""
from __future__ import annotations

import argparse
import json
import sys

from bench.records import atomic

# knob -> the value every record made before the knob existed ran with
ADDED_KNOBS = {
    "double_quant": True,   # nf4-no-dq: QLoRA's base was always double-quantized before
    "keep_output": False,   # keep-output: the worker always let the model output go once the loss was taken
    "no_sync": False,       # no-sync: every micro-batch's gradients were reduced (FSDP's default without no_sync)
    "fsdp1_wrap": "accelerate",  # wrap-layers: FSDP1 always wrapped as accelerate does (peft's policy for peft)
}


def migrate_record(rec: dict) -> list[str]:
    """Add the missing ``ADDED_KNOBS`` to ``rec["knobs"]`` in place; the knobs added."""
    knobs = rec.get("knobs")
    if not isinstance(knobs, dict):
        return []
    added = [k for k in ADDED_KNOBS if k not in knobs]
    for k in added:
        knobs[k] = ADDED_KNOBS[k]
    if added:
        rec["knobs"] = dict(sorted(knobs.items()))
    return added


def migrate_file(path: str, write: bool = True) -> list[str]:
    """Migrate every record of a pytest-benchmark JSON file (``benchmarks[].extra_info``, and the cell spec
    stored beside it, ``params.cell_spec``) or of a bare record file; the knobs added, as ``cell: knob``
    strings. Written atomically, and only if any changed."""
    with open(path) as fh:
        doc = json.load(fh)
    if isinstance(doc, dict) and "benchmarks" in doc:
        # each entry's record, and the cell spec it was run from (params.cell_spec: its knobs are checked against the record's)
        recs = [x for b in doc["benchmarks"] for x in (b.get("extra_info"), (b.get("params") or {}).get("cell_spec"))]
    else:
        recs = [doc]
    added = [f"{rec.get('cell')}: {k}" for rec in recs if isinstance(rec, dict) for k in migrate_record(rec)]
    if added and write:
        atomic.write_json(path, doc)
    return added


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.records.migrate", description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if any file would change")
    args = ap.parse_args(argv)
    changed = 0
    for path in args.files:
        added = migrate_file(path, write=not args.check)
        changed += bool(added)
        for a in added:
            print(f"{path}: {'would add' if args.check else 'added'} {a}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
