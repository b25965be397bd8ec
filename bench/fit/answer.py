"""The fit command's answer, one line (a dict) per technique: a stored record and search where
one stands (bench/fit/stored.py), else the cell simulated now in the warm sim worker
(bench/search/simpool.py) exactly as the cell's Snakemake job would, and its fits searched
(bench.search.fits); what is computed is kept under ``results/fits-cli/`` for reuse. An
unwritable ``--results`` folder is a one-line warning: the answer is given, not kept. Torch-free.
"""
from __future__ import annotations

import time
from pathlib import Path

from bench.fit.stored import ROOT, judged_on, own_fits_path, record_paths, stored_fits, stored_record
from bench.records import atomic, reuse, seal
from bench.search import fits, progress


def answer(cells: dict, gpu: str, results: Path, search: bool = True, say=print, jobs: int = 1,
           resimulate: bool = False) -> list[dict]:
    """One line of the answer per technique (dicts), simulating and searching what is missing;
    stored answers are reused by bench/records/reuse.py's rule (``resimulate``: only those made
    with the installed library versions)."""
    from bench.search.sample_cache import SampleCache
    from bench.search.simpool import SimPool
    here = reuse.versions()
    drift = reuse.drift(here, ROOT / "results" / "reference" / "constraints.txt")
    if drift:  # before any waiting
        say(f"ft-membench: note: {drift}")
    stored = {cid: stored_record(spec, record_paths(spec, results), here, gpu, resimulate)  # read once
              for cid, spec in cells.items()}
    pace = progress.Pace(sum(1 for cid, spec in cells.items() if not spec["skip_reason"] and stored[cid][0] is None),
                         say, "ft-membench")
    out = []
    with SimPool(jobs) as pool:
        samples = SampleCache(pool, here, say=say)
        for cid, spec in cells.items():
            line = {"technique": "+".join(spec["techniques"]), "cell": cid}
            rec, where = stored[cid]
            if rec is None and spec["skip_reason"]:
                line.update(verdict="skipped", reason=spec["skip_reason"])
                out.append(line)
                continue
            if rec is None:
                say(f"  simulating {cid} (warm worker) ...")
                t0 = time.monotonic()
                rec = pool.run_cell(spec, writable(results / "logs" / "fit" / f"{cid}.log", say))
                pace.done(cid, time.monotonic() - t0)
                rec.pop("_trace", None)
                keep = record_paths(spec, results)[-1]
                where = f"simulated now (kept in {keep})" if keep_file(keep, rec, say) else "simulated now (not kept)"
            line.update(record=rec, source=where, verdict=(rec.get("verdicts") or {}).get(gpu, rec.get("status")))
            if rec.get("status") != "ok" and rec.get("reason"):
                line["reason"] = rec["reason"]
            # a study's stored search answers for the asked GPU as the study's record does
            if rec.get("status") == "error":  # no search answers for a cell without a record
                line.update(fit=None, fits_source="not searched")
                out.append(line)
                continue
            doc, fits_from = stored_fits(spec, results, gpu, here, resimulate)
            judged = judged_on(spec, rec, gpu) if rec.get("status") == "ok" else spec
            if doc is None and judged is not spec:
                doc, fits_from = stored_fits(judged, results, gpu, here, resimulate)
            if doc is None and search and rec.get("status") == "ok":
                say(f"  searching {cid} on {gpu} ...")
                hits = samples.hits   # the sample shapes are the GPU's own only in their verdict: reused
                doc = fits.search(dict(spec, verdict_gpus={gpu: spec["verdict_gpus"][gpu]}), samples.run_cell,
                                  simulate_many=samples.run_many, say=say)
                doc.update(cell=cid, inputs_sha256=spec["inputs_sha256"], versions=here)
                path = own_fits_path(spec, results, gpu)
                kept = f"kept in {path}" if keep_file(path, doc, say) else "not kept"
                fits_from = (f"searched now ({len(doc['simulated'])} sample shapes, {samples.hits - hits} of them "
                             f"from the sample cache; {doc['s']} s; {kept})")
            row = next((r for r in (doc or {}).get("rows", []) if r["gpu"] == gpu), None)
            line.update(fit=row, fits_source=fits_from if row else "not searched")
            out.append(line)
    return out


def writable(log: Path, say) -> Path | None:
    """``log`` if its folder can be written, else None (the worker's log goes to a temp file)
    and a one-line warning: an unwritable --results folder costs the log, never the answer."""
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.touch()
        return log
    except OSError as exc:
        say(f"ft-membench: warning: cannot write {log}: {exc.strerror or exc}; the worker's log is not kept")
        return None


def keep_file(path: Path, doc: dict, say) -> bool:
    """Keep an answer for reuse; a failed write (unwritable folder, full disk) is a one-line
    warning, and the answer is still given."""
    try:
        atomic.write_json(path, seal.sealed(doc))   # read back only as written (bench/records/seal.py)
        return True
    except OSError as exc:
        say(f"ft-membench: warning: {exc}; the answer is given but not kept")
        return False
