"""Where the fit command finds answers already computed, and which of them stand: a cell record
(``results/cells``, ``results/reference/cells``, this command's own ``results/fits-cli/cells``)
that passes the record gate (bench/records/checks.gate: the contract, and the same inputs_sha256,
knobs and shape; a study's record for a GPU that study judged: ``judged_on``), and a search
(``results/fits/``, ``results/fits-cli/``, a ``fits.csv``) for the same inputs, each by
bench/records/reuse.py's one rule: made by the same engine code (``versions.ft_membench_engine``);
as sealed (bench/records/seal.py: an edited record is an error answer, an edited search is searched again);
made with other library versions, it is reused and says which, or with ``resimulate`` passed
over. Each lookup returns the answer and where it came from. Torch-free.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from bench import home
from bench.estimate import nccl, verdicts
from bench.records import agreement, checks, record, reuse, seal
from bench.search import fits_csv
from bench.cells import inputs

ROOT = home.root()  # the checkout, or $FT_MEMBENCH_HOME for an installed wheel
REFERENCE = ROOT / "results" / "reference"   # published, sealed whole (bench/records/seal.py)


def record_paths(spec: dict, results: Path) -> list[Path]:
    """Where a record of this cell may be: the workflow's, the reference's, this command's own
    (``results/fits-cli/cells/``, any shape)."""
    own = results / "fits-cli" / "cells" / f"{spec['cell']}.b{spec['batch_size']}.s{spec['seq_len']}.json"
    return [*(r / "cells" / f"{spec['cell']}.json" for r in dict.fromkeys([results, ROOT / "results"])),
            ROOT / "results" / "reference" / "cells" / f"{spec['cell']}.json", own]


def judged_on(spec: dict, rec: dict, gpu: str | None) -> dict:
    """``spec`` as the record's own study judged it: the question is asked against every GPU
    profile, a study's record holds verdicts for its own GPUs; where the asked ``gpu`` is among
    them (and every one of them is a profile the question knows), the record answers for it."""
    caps = rec.get("verdict_gpu_memory_bytes")
    if (not gpu or not isinstance(caps, dict) or gpu not in caps or not set(caps) <= set(spec["verdict_gpus"])
            or set(caps) == set(spec["verdict_gpus"])):
        return spec  # not the study's to answer, or judged on the question's own GPUs
    gpus = {g: p for g, p in spec["verdict_gpus"].items() if g in caps}
    return dict(spec, verdict_gpus=gpus, inputs_sha256=dict(spec["inputs_sha256"], gpus=inputs.digest(gpus)))


def stored_record(spec: dict, paths: list[Path], here: dict, gpu: str | None = None,
                  resimulate: bool = False) -> tuple[dict, str] | tuple[None, None]:
    """An ok record of this cell that passes the record gate against ``spec`` (checks.gate: the
    contract, the same inputs, knobs and shape; the GPU profiles as its study judged them, the
    asked ``gpu`` among them: ``judged_on``) and is reused by bench/records/reuse.py's rule (the
    same engine code; other library versions are named in where it came from), and where. A
    record that fails the gate is passed over, never answered from."""
    for path in paths:
        try:
            doc = json.loads(path.read_text())
            rec = doc["benchmarks"][0]["extra_info"] if isinstance(doc, dict) and "benchmarks" in doc else doc
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue
        if not isinstance(rec, dict) or rec.get("status") != "ok":
            continue
        if why := seal.problem(path, doc, REFERENCE):   # edited after it was written or published: an error
            return record.failure(spec, "error", f"the stored record {why}; remove it or rerun the cell"), str(path)
        judged = judged_on(spec, rec, gpu)
        if checks.gate(rec, judged):
            said = contradicted(rec, judged, here, resimulate)
            if said:  # it would answer, were its own numbers not at odds: an error, not an answer
                return record.failure(spec, "error", f"the stored record {path} contradicts itself: "
                                      f"{'; '.join(said)}; remove it or rerun the cell"), str(path)
            continue
        ok, note = reuse.accepts(rec.get("versions"), here, resimulate)
        if not ok:
            continue
        where = f"{path}{seal.label(path, doc)}"
        return rec, f"{where} ({note})" if note else where
    return None, None


def contradicted(rec: dict, spec: dict, here: dict, resimulate: bool) -> list[str]:
    """What in ``rec`` disagrees with its own numbers (bench/records/agreement.py) where that is all
    that keeps it from answering: the rest of the contract holds, it was made from the spec's
    inputs and it is reused by the reuse rule. Empty otherwise."""
    said = agreement.disagreements(rec)
    if not said or checks.problems(rec) != said or checks.inputs_problems(rec, spec):
        return []
    return said if reuse.accepts(rec.get("versions"), here, resimulate)[0] else []


def fits_paths(spec: dict, results: Path, gpu: str) -> list[Path]:
    """Where a search of this cell may be, first found first: in this results folder, then the
    project's, the workflow's per-cell search (fits/, the matrix's shape, every GPU of the
    study), this command's own (fits-cli/, any shape, one GPU) and the workflow's table
    (fits.csv); last the reference's table."""
    own = f"{spec['cell']}.b{spec['batch_size']}.s{spec['seq_len']}.{gpu}.json"
    out = []
    for r in dict.fromkeys([results, ROOT / "results"]):
        out += [r / "fits" / f"{spec['cell']}.json", r / "fits-cli" / own, r / "fits.csv"]
    return [*out, ROOT / "results" / "reference" / "fits.csv"]


def own_fits_path(spec: dict, results: Path, gpu: str) -> Path:
    return fits_paths(spec, results, gpu)[1]


def stored_fits(spec: dict, results: Path, gpu: str, here: dict | None = None,
                resimulate: bool = False) -> tuple[dict, str] | tuple[None, None]:
    """A search of this cell on ``gpu`` made from the same inputs at the same shape and reused by
    bench/records/reuse.py's rule (as records are), and where."""
    here = here or reuse.versions()
    prof = spec["verdict_gpus"].get(gpu)
    # a rank's NCCL buffers come off the capacity, as the search judged it (bench/search/fits.py)
    outside = nccl.by_gpu(spec.get("world_size") or 1, {gpu: prof}).get(gpu, {}).get("bytes", 0) if prof else 0
    cap = verdicts.capacity(prof, outside) if prof else None

    def kept(doc, path):
        ok, note = reuse.accepts(reuse.search_versions(doc, path, spec["cell"]), here, resimulate)
        doc = dict(doc, rows=[fits_csv.refused(r, path, cap) if r.get("gpu") == gpu else r for r in doc["rows"]])
        return (doc, f"{path} ({note})" if note else str(path)) if ok else None
    digest = inputs.digest(spec["inputs_sha256"])
    shape = (str(spec["seq_len"]), str(spec["batch_size"]))
    for path in fits_paths(spec, results, gpu):
        if path.suffix == ".csv":
            if seal.problem(path, published=REFERENCE):   # a published table edited after it was sealed: searched again
                continue
            try:
                with open(path, newline="") as fh:
                    for row in csv.DictReader(fh):
                        if (row.get("cell"), row.get("gpu"), row.get("inputs_sha256")) == (spec["cell"], gpu, digest) \
                                and (row.get("seq_len"), row.get("batch_size")) == shape:
                            found = kept({"rows": [{k: (v if v != "" else None) for k, v in row.items()}]}, path)
                            if found:
                                return found
                            break
            except (OSError, UnicodeDecodeError, csv.Error):   # unreadable, not UTF-8, not CSV: not an answer
                pass
            continue
        doc, _why = fits_csv.read_doc(path)
        if doc is None or seal.problem(path, doc, REFERENCE):
            continue
        rows = doc["rows"] or [{}]
        if doc.get("inputs_sha256") == spec["inputs_sha256"] and any(r.get("gpu") == gpu for r in rows) and \
                (str(rows[0].get("seq_len")), str(rows[0].get("batch_size"))) == shape and kept(doc, path):
            return kept(doc, path)
    return None, None
