"""Results folders for comparison tests: copies of reference cells, edited where a test says."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

REF = Path(__file__).resolve().parent.parent / "results" / "reference"
CELLS = ("qwen2.5-7b__sim__lora", "qwen2.5-7b__sim__baseline", "tiny-llama__cpu__baseline", "tiny-llama__cpu__fa2")


def folder(root: Path, cells=CELLS) -> Path:
    (root / "cells").mkdir(parents=True)
    for cell in cells:
        shutil.copy(REF / "cells" / f"{cell}.json", root / "cells" / f"{cell}.json")
    return root


def edit(root: Path, cell: str, fn) -> None:
    """Apply ``fn`` to the run record of ``cell`` in ``root`` and write it back sealed, as the harness writes a
    record (bench/records/seal.py): another run's record, not one edited after it was written."""
    from bench.records import seal
    path = root / "cells" / f"{cell}.json"
    doc = json.loads(path.read_text())
    fn(doc["benchmarks"][0]["extra_info"])
    path.write_text(json.dumps(seal.sealed(doc)))
