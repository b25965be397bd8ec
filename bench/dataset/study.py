"""The report's dataset study: one real public dataset's epoch, padded and packed, for one recipe.

    python -m bench.dataset.study --out results/dataset/epoch.json [--jobs 2]

Mistral-7B-v0.1 with QLoRA and checkpointing at batch 4 and max_length 4096 on an RTX 4090,
over tests/data/c4-demo.jsonl (300 C4 documents, a long tail of lengths) counted with the
model's tokenizer (matrix/tokenizers/mistral-7b-v0.1): the epoch padded (random sampling, seed
42) and packed, each as ``ft-membench fit --dataset --json`` answers it (command.py). The file
records both answers, the inputs' digests and the engine's versions; report/dataset_epoch.py
reads it and says when it is stale or unreadable.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

from bench.dataset import command
from bench.records import atomic

ROOT = Path(__file__).resolve().parents[2]
STUDY = {"model": "mistral-7b-v0.1", "gpu": "rtx-4090", "technique": "qlora+gc", "batch": 4,
         "max_length": 4096, "dataset": "tests/data/c4-demo.jsonl"}
FORMAT = 1


def inputs_digest() -> dict:
    """sha256 of the files the study reads beside the engine: the dataset and the tokenizer."""
    files = [ROOT / STUDY["dataset"], *sorted((ROOT / "matrix" / "tokenizers" / STUDY["model"]).glob("*.json"))]
    return {str(f.relative_to(ROOT)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


CODE = ("answer.py", "command.py", "epoch.py", "hostshare.py", "lengths.py", "order.py", "stairs.py", "study.py")


def code_digest() -> str:
    """sha256 over the bench/dataset/ files the study runs (``CODE``), which the engine digest does not cover."""
    h = hashlib.sha256()
    for f in (ROOT / "bench" / "dataset" / name for name in CODE):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def run(jobs: int, say=print) -> dict:
    out = {"format": FORMAT, "study": STUDY, "inputs_sha256": inputs_digest(), "code_sha256": code_digest()}
    for name, packing in (("padding", False), ("packing", True)):
        asked = command.Asked(dataset=str(ROOT / STUDY["dataset"]), packing=packing, jobs=jobs)
        doc = command.answer_doc(asked, STUDY["model"], STUDY["gpu"], STUDY["technique"], STUDY["batch"],
                                 STUDY["max_length"], say=say)
        doc["dataset"]["source"] = STUDY["dataset"]
        doc["dataset"]["tokenizer"] = str(Path(doc["dataset"]["tokenizer"]).relative_to(ROOT))
        out[name] = doc
    out["versions"] = out["padding"]["versions"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.dataset.study", description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    doc = run(args.jobs, say=lambda m: print(m, file=sys.stderr))
    atomic.write_json(args.out, doc)
    pad = doc["padding"]["epoch"]
    print(f"{args.out}: padded epoch {pad['verdict']}, "
          f"reserved {pad['reserved_peak_bytes'] / 2 ** 30:.2f} GiB; packed "
          f"{doc['packing']['epoch']['reserved_peak_bytes'] / 2 ** 30:.2f} GiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
