"""The data's share of the host memory a run needs, per rank and per node, from the load paths measured
on this CPU (bench/dataset/hostload.py; the reference: results/reference/dataset/hostload.json).

    doc, why = hostshare.read(path)                      # checked, or (None, why)
    share = hostshare.share(doc, dataset_bytes=..., ranks_per_node=2)

What TRL's SFTTrainer does with a dataset file: ``datasets`` writes it to Arrow and memory-maps it,
tokenizes it with ``.map`` (``dataset_num_proc`` processes; one by default), then the trainer's
DataLoader reads the tokenized rows (``dataloader_num_workers`` 0 by default). For each of those
paths the measurement gives the peak above the process's own baseline at three dataset sizes; the
share at the user's size is the least-squares line through them (modelled: a line over CPU
measurements, never a GPU run, and only as far as the user's file is like C4's JSON lines).

Per node, the node's figure is the ranks times a rank's, an upper bound: rank 0 tokenizes first
(accelerate's ``main_process_first``) and the others load the Arrow cache it wrote, and the measure
is PSS (a page that several processes map counts a share in each), so ranks that map the same
Arrow file share its pages.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bench.dataset import hostload

# what a TRL run does with its data, by phase: tokenizing it, then training on it
PHASES = {"tokenize": "datasets-map", "train": "dataloader-workers-0"}
WITH_WORKERS = {"tokenize": "datasets-map-num-proc-2", "train": "dataloader-workers-2"}


def read(path) -> tuple[dict | None, str | None]:
    """The host-memory measurements at ``path``, checked: its format and keys, the dataset it measured
    still the one in the tree, and bench/dataset/hostload.py unchanged since. (doc, None), or (None, why)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return None, f"{path}: cannot read it ({exc})"
    try:
        assert doc["format"] == 1 and doc["rows"]
        for r in doc["rows"]:
            assert r["path"] in hostload.PATHS and isinstance(r["peak_above_baseline_bytes"], int)
            assert isinstance(r["dataset_bytes"], int) and isinstance(r["scale"], int)
        data = hostload.ROOT / doc["dataset"]
        same = data.is_file() and hashlib.sha256(data.read_bytes()).hexdigest() == doc["dataset_sha256"]
    except (KeyError, TypeError, AssertionError):
        return None, f"{path}: not a host-memory measurement (a key is missing or of the wrong type)"
    if not same:
        return None, f"{path} is stale: {doc['dataset']} changed since it was measured; rerun it"
    if doc.get("code_sha256") != hostload.code_digest():
        return None, f"{path} is stale: bench/dataset/hostload.py changed since it was measured; rerun it"
    return doc, None


def line(doc: dict, path: str) -> tuple[float, float] | None:
    """(intercept bytes, bytes per dataset byte) of ``path``'s peak: least squares over its sizes."""
    pts = [(r["dataset_bytes"], r["peak_above_baseline_bytes"]) for r in doc["rows"] if r["path"] == path]
    if len({x for x, _ in pts}) < 2:
        return None
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return my - slope * mx, slope


def share(doc: dict, dataset_bytes: int, ranks_per_node: int = 1, workers: bool = False) -> dict:
    """The data's host share for a dataset file of ``dataset_bytes``: per phase, a rank's peak above its
    baseline and the node's (``ranks_per_node`` times it: an upper bound, above)."""
    sizes = sorted({r["dataset_bytes"] for r in doc["rows"]})
    out = {"dataset_bytes": dataset_bytes, "ranks_per_node": ranks_per_node, "phases": {},
           "measured_sizes": [sizes[0], sizes[-1]], "within_measured": sizes[0] <= dataset_bytes <= sizes[-1],
           "provenance": "modelled: a least-squares line over cpu measurements of the load path at "
                         f"{len(sizes)} sizes of {doc['dataset']} (bench/dataset/hostload.py), PSS above the "
                         "process's baseline; a node's figure is the ranks times a rank's, an upper bound "
                         "(ranks that map the same Arrow file share its pages)",
           "versions": doc.get("versions")}
    for phase, path in (WITH_WORKERS if workers else PHASES).items():
        fit = line(doc, path)
        if fit is None:
            continue
        rank = max(0, round(fit[0] + fit[1] * dataset_bytes))
        out["phases"][phase] = {"path": path, "rank_bytes": rank, "node_bytes": rank * ranks_per_node}
    return out


def node_need(rec: dict, gpu: str, data: dict | None, host_bytes: int | None = None) -> dict | None:
    """The node's host need with the data in it: the recipe's (bench/estimate/hostmem.py, from its record
    ``rec``: the runtime, the load or the step's offloaded and paged-out state) plus the data's share on
    the node at its larger phase (an upper bound: the two peaks need not meet), and with ``host_bytes``
    (``--host-mem``) the verdict. None where the record gives no figures."""
    from bench.estimate import hostmem
    model = hostmem.need(rec, gpu)
    if model is None:
        return None
    phases = (data or {}).get("phases") or {}
    data_bytes = max((v["node_bytes"] for v in phases.values()), default=0)
    total = model["bytes"] + data_bytes
    return {"need_bytes": total, "recipe_bytes": model["bytes"], "recipe_parts": model["parts"],
            "recipe_how": model["how"],
            "data_bytes": data_bytes if phases else None, "given_bytes": host_bytes,
            "verdict": hostmem.judge(total, host_bytes)}
