"""ft-membench fit MODEL --gpu GPU: will this fine-tune fit on my card, and how far can I go?

    ft-membench fit qwen2.5-7b --gpu rtx-4090
    ft-membench fit llama-3.1-8b --gpu a100-40gb --techniques lora+gc+bf16,qlora+gc --seq 4096 --batch 2

The whole-step counterpart of ``accelerate estimate-memory`` (weights and Adam only): for each
technique, the simulated training step's verdict on the GPU (bench/estimate/verdicts.py), what it needs
(the modelled reserved peak) against what the card offers, the largest sequence at batch 1 and
the largest batch at the sequence length that fit (bench/search/fits.py), and the estimated speed
where the record has a speed model. Without ``--techniques``: the techniques of the default
matrix's 7-8B study, and the best recipes among them (those that fit, most tokens/s first where a
speed model exists, else those that go furthest).

It shares all its code with the matrix path: the spec comes from bench.spec.matrix (a one-study
matrix written for the question), a missing simulation runs in the warm sim worker
(bench/search/simpool.py) exactly as the cell's Snakemake job would, and the searches are
bench.search.fits'. Answers already computed are reused, never approximated: a cell record in
``results/cells`` or ``results/reference/cells`` that passes the record gate (bench/records/checks.gate:
the contract, and the same inputs_sha256, knobs and shape; a study's record for a GPU that study
judged: ``judged_on``), and a search in ``results/fits/`` or a ``fits.csv`` for the same inputs,
each by bench/records/reuse.py's one rule: made by the same engine code (``versions.ft_membench_engine``);
made with other library versions, it is reused and says which (a note before anything runs says
the installed versions differ from the reference's), or with ``--resimulate`` simulated again.
Each line says where its answer came from. A simulation is deterministic, so a reused record
is the one a new run would write. Torch-free.

Bad input (an unknown model or GPU or technique, a negative or absurd shape) is one line on
stderr naming what is wrong, exit status 2. A technique whose simulation ended in an error or a
time-out prints its reason and makes the exit status 1. An unwritable ``--results`` folder is
a one-line warning: the answer is printed, not kept.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench import cli_format
from bench.estimate import verdicts
from bench.estimate.measures import need_bytes
from bench.records import atomic, checks, reuse
from bench.search import fits, fits_csv, progress
from bench.spec import inputs, matrix, matrixfile
from bench.spec.techniques import MAXIMUMS, MINIMUMS

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_STUDY = "sim-7b-8b"  # its techniques are the default list
GiB = 2**30


MALFORMED = ("not valid JSON", "must be a JSON object", "model_type missing", "cannot read it")  # bench/spec/modelref.py


class Usage(ValueError):
    """Bad input: the message is the one line printed."""


def cuda_profiles() -> list[str]:
    """The GPU profiles a question may name (matrix/gpus.yaml's cuda ones)."""
    try:
        gpus = yaml.load((matrix.DEFAULT_MATRIX.parent / "gpus.yaml").read_text(), Loader=matrixfile.SAFE_LOADER)
    except (OSError, ValueError, matrix.MatrixError):
        return []
    return [g for g, p in gpus.items() if isinstance(p, dict) and p.get("kind") == "cuda"]


def default_techniques() -> list[str]:
    doc = yaml.load(matrix.DEFAULT_MATRIX.read_text(), Loader=matrixfile.SAFE_LOADER)
    return list(doc["studies"][DEFAULT_STUDY]["techniques"])


def specs(model: str, gpu: str, techniques: list[str], seq: int | None, batch: int | None,
          options: dict | None = None, trust_remote_code: bool = False) -> dict[str, dict]:
    """{cell: spec} for the question, through the matrix loader: the study is judged against
    every cuda profile of matrix/gpus.yaml (as the default matrix's sim studies are), so its
    records are the matrix's own where the shape agrees."""
    base = matrix.DEFAULT_MATRIX.parent
    gpus = yaml.load((base / "gpus.yaml").read_text(), Loader=matrixfile.SAFE_LOADER)
    if gpu not in gpus or gpus[gpu].get("kind") != "cuda":
        known = ", ".join(g for g, p in gpus.items() if p.get("kind") == "cuda")
        raise Usage(f"unknown gpu {gpu!r} (known: {known})")
    for name, key, value in (("--seq", "seq_len", seq), ("--batch", "batch_size", batch)):
        low, top = MINIMUMS[key], MAXIMUMS[key]  # the matrix's own bounds
        if value is not None and not low <= value <= top:
            raise Usage(f"{name} {value}: must be between {low} and {top}")
    doc = {
        "models_dir": str(base / "models"), "gpus_file": str(base / "gpus.yaml"),
        "deepspeed_dir": str(base / "deepspeed"),
        "technique_options": yaml.load(matrix.DEFAULT_MATRIX.read_text(),
                                       Loader=matrixfile.SAFE_LOADER).get("technique_options", {}),
        "studies": {"fit": {
            "mode": "sim", "models": [model], "gpus": [g for g, p in gpus.items() if p.get("kind") == "cuda"],
            "batch_size": batch or 1, "seq_len": seq or 2048, "steps": 1, "warmup_steps": 1, "timeout_s": 600,
            "techniques": techniques,
            **({} if "baseline" in techniques else {"exclude": [{"techniques": "baseline"}]}),
            **({"technique_options": options} if options else {}),  # a --config's LoRA settings
        }},
        **({"model_options": {model: {"trust_remote_code": True}}} if trust_remote_code else {}),
    }
    with tempfile.TemporaryDirectory(prefix="ftmb-fit-") as tmp:
        path = Path(tmp, "fit.yaml")
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        try:
            cells = matrix.load(path)
        except matrix.MatrixError as exc:
            # the matrix loader resolves model names (and, where it accepts them, config paths and
            # Hugging Face ids): what it refuses is refused here, in its words
            text = str(exc).replace(f"{path}: ", "")
            if text.startswith("studies.fit.models[0]: "):  # the resolver's words name the known models
                said = text.split(": ", 1)[1]
                if any(w in said for w in MALFORMED):   # a file that exists but does not parse is no unknown model
                    source, _, why = said.removeprefix("model ").partition(": ")
                    raise Usage(f"malformed config.json: {source}: {why}") from None
                raise Usage(f"unknown model {model!r}: {said}") from None
            raise Usage(text.replace("studies.fit.", "")) from None
    return cells


versions = reuse.versions  # the library versions and engine digest a reused record must share


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
        if not isinstance(rec, dict) or rec.get("status") != "ok" or checks.gate(rec, judged_on(spec, rec, gpu)):
            continue
        ok, note = reuse.accepts(rec.get("versions"), here, resimulate)
        if not ok:
            continue
        return rec, f"{path} ({note})" if note else str(path)
    return None, None


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
    here = here or versions()

    def kept(doc, path):
        ok, note = reuse.accepts(reuse.search_versions(doc, path, spec["cell"]), here, resimulate)
        return (doc, f"{path} ({note})" if note else str(path)) if ok else None
    digest = inputs.digest(spec["inputs_sha256"])
    shape = (str(spec["seq_len"]), str(spec["batch_size"]))
    for path in fits_paths(spec, results, gpu):
        if path.suffix == ".csv":
            try:
                with open(path, newline="") as fh:
                    for row in csv.DictReader(fh):
                        if (row.get("cell"), row.get("gpu"), row.get("inputs_sha256")) == (spec["cell"], gpu, digest) \
                                and (row.get("seq_len"), row.get("batch_size")) == shape:
                            found = kept({"rows": [{k: (v if v != "" else None) for k, v in row.items()}]}, path)
                            if found:
                                return found
                            break
            except OSError:
                pass
            continue
        doc, _why = fits_csv.read_doc(path)
        if doc is None:
            continue
        rows = doc["rows"] or [{}]
        if doc.get("inputs_sha256") == spec["inputs_sha256"] and any(r.get("gpu") == gpu for r in rows) and \
                (str(rows[0].get("seq_len")), str(rows[0].get("batch_size"))) == shape and kept(doc, path):
            return kept(doc, path)
    return None, None


def answer(cells: dict, gpu: str, results: Path, search: bool = True, say=print, jobs: int = 1,
           resimulate: bool = False) -> list[dict]:
    """One line of the answer per technique (dicts), simulating and searching what is missing;
    stored answers are reused by bench/records/reuse.py's rule (``resimulate``: only those made
    with the installed library versions)."""
    from bench.search.sample_cache import SampleCache
    from bench.search.simpool import SimPool
    here = versions()
    drift = reuse.drift(here, ROOT / "results" / "reference" / "constraints.txt")
    if drift:  # before any waiting
        say(f"ft-membench: note: {drift}")
    need = [cid for cid, spec in cells.items() if not spec["skip_reason"]
            and stored_record(spec, record_paths(spec, results), here, gpu, resimulate)[0] is None]
    pace = progress.Pace(len(need), say, "ft-membench")
    out = []
    with SimPool(jobs) as pool:
        samples = SampleCache(pool, here, say=say)
        for cid, spec in cells.items():
            line = {"technique": "+".join(spec["techniques"]), "cell": cid}
            rec, where = stored_record(spec, record_paths(spec, results), here, gpu, resimulate)
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
            doc, fits_from = stored_fits(spec, results, gpu, here, resimulate)
            judged = judged_on(spec, rec, gpu) if rec.get("status") == "ok" else spec
            if doc is None and judged is not spec:
                doc, fits_from = stored_fits(judged, results, gpu, here, resimulate)
            if doc is None and search and rec.get("status") == "ok":
                say(f"  searching {cid} on {gpu} ...")
                hits = samples.hits   # the sample shapes are the GPU's own only in their verdict: reused
                doc = fits.search(dict(spec, verdict_gpus={gpu: spec["verdict_gpus"][gpu]}), samples.run_cell,
                                  simulate_many=samples.run_many, say=say, per_rank=True)
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
        atomic.write_json(path, doc)
        return True
    except OSError as exc:
        say(f"ft-membench: warning: {exc}; the answer is given but not kept")
        return False


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
                f"{est['tokens_per_s'] * n:.0f} for the run of {n} (modelled)")
    return f"{est['step_s']:.2f} s/step, {est['tokens_per_s']:.0f} tokens/s (modelled)"


def render(lines: list[dict], gpu: str, profile: dict, model: str, best: bool) -> str:
    cap = verdicts.capacity(profile)
    out = [f"{model} on {gpu} ({profile.get('label', gpu)}): {profile['memory_bytes'] / GiB:.1f} GiB, "
           f"{cap / GiB:.1f} GiB usable after the {verdicts.RESERVE_BYTES // verdicts.MiB} MiB CUDA reserve",
           "simulated (fake tensors, counted as CUDA would allocate; reserved memory modelled), not measured on a GPU",
           ""]
    tw = max([28] + [len(ln["technique"]) for ln in lines])  # a long combination never shifts the columns
    head = (f"{'technique':<{tw}} {'verdict':<8} {'need GiB':>9} {'card GiB':>8}  {'largest seq at batch 1':<47} "
            f"{'largest batch':<40} speed")
    out += [head, "-" * len(head)]
    for ln in lines:
        rec = ln.get("record") or {}
        serving = bool((rec.get("details") or {}).get("vllm"))   # a vLLM plan: its line under the row says it
        need, lower = need_bytes(rec) if rec.get("status") == "ok" and not serving else (None, False)  # the report's
        row = ln.get("fit")
        seq = fits_csv.answer_text(row, "seq") if row else "not searched"
        bat = fits_csv.answer_text(row, "batch") if row else "not searched"
        need_s = f"{('>=' if lower else '') + f'{need / GiB:.2f}':>9}" if need else f"{'-':>9}"
        out.append(f"{ln['technique']:<{tw}} {ln['verdict'] or '?':<8} {need_s} {profile['memory_bytes'] / GiB:>8.2f}  "
                   f"{fitted(seq, 47)} "
                   f"{fitted(bat, 40)} {speed(rec, gpu)}")
        if ln.get("reason"):
            out.append(f"    {ln['reason']}")
        for what, text, width in (("largest sequence", seq, 47), ("largest batch", bat, 40)):
            if len(text) > width and not (what == "largest batch" and text == seq):  # whole, never cut mid-word
                out.append(f"    {what}: {text}")
        if cli_format.rank_note(rec):
            out.append(f"    {cli_format.rank_note(rec)}")
        note = ((rec.get("details") or {}).get("verdict_notes") or {}).get(gpu)
        if note:  # fits with paging, oom while loading, no bf16 kernels: what the verdict rests on
            out.append(f"    {note}")
        out += [f"    {t}" for t in cli_format.vllm_lines(rec, gpu)]   # KV space, tokens, vLLM's error text
        if hint := cli_format.precision_hint(rec, ln.get("verdict")):
            out.append(f"    {hint}")
    out.append("")
    out.append(f"need: the modelled reserved peak of one step plus the {verdicts.RESERVE_BYTES // verdicts.MiB} MiB "
               "CUDA reserve (context, cuBLAS workspaces), the figure the verdict sets against the card's memory and "
               "the report's need (per rank for ZeRO/FSDP, whose speed is per rank and for the run; '>=' where no "
               "reserved peak was modelled). Where each answer came from:")
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
            out.append(f"  {ln['technique']}: {reach}; {speed(ln['record'], gpu)}")
    return "\n".join(out)


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


def parser() -> argparse.ArgumentParser:
    """The `ft-membench` command line, built without running anything (tests/test_docs.py reads it)."""
    ap = argparse.ArgumentParser(prog="ft-membench", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("fit", help="will MODEL fine-tune on GPU, and how far can it go",
                         description="Exit status: 0 fits, 1 does not fit (tight too, unless --allow-tight), "
                                     "2 bad input (docs/fit.md)")
    fit.add_argument("model", nargs="?", help="a matrix model name, a config.json path or a Hugging Face id "
                                              "(ORG/NAME[@revision]; only its config.json is fetched)")
    fit.add_argument("--config", help="a training config: TRL/transformers TrainingArguments (JSON/YAML), axolotl, "
                                      "LLaMA-Factory or torchtune YAML")
    fit.add_argument("--format", choices=["trl", "axolotl", "llamafactory", "torchtune"],
                     help="the --config's format (default: told from its keys)")
    fit.add_argument("--gpu", required=True, type=str.lower,
                     help=f"a GPU profile of matrix/gpus.yaml, any case: {', '.join(cuda_profiles())}")
    fit.add_argument("--techniques", help="comma-separated, e.g. lora+gc+bf16,qlora+gc (default: the 7-8B study's)")
    fit.add_argument("--seq", type=int, help="sequence length (default 2048)")
    fit.add_argument("--batch", type=int, help="batch size (default 1)")
    fit.add_argument("--results", default="results", help="results folder to reuse and write into")
    fit.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                     help="simulations at once (default: 2, or 1 on a 1-core machine)")
    fit.add_argument("--no-search", action="store_true", help="answer from records only, search nothing")
    fit.add_argument("--resimulate", action="store_true",
                     help="reuse only answers made with the installed library versions; simulate the others again")
    fit.add_argument("--json", action="store_true", help="print the answer as one JSON object (docs/fit.md)")
    fit.add_argument("--allow-tight", action="store_true", help="exit 0 on a tight verdict (warned)")
    fit.add_argument("--no-hints", action="store_true", help="skip what-to-change (no extra simulations)")
    fit.add_argument("--trust-remote-code", action="store_true",
                     help="run a Hub model's own code (auto_map); off by default")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    from bench.fit import guard, tofit
    from bench.fit import question as fitinput
    techniques = [t.strip() for t in args.techniques.split(",") if t.strip()] if args.techniques else None
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    try:
        if techniques == []:
            raise Usage("--techniques: empty list")
        q = fitinput.question(args.model, args.config, args.format, techniques, args.seq, args.batch,
                              args.trust_remote_code)
        asked = q.techniques is not None
        cells = specs(q.model, args.gpu, q.techniques or default_techniques(), q.seq, q.batch, q.options,
                      args.trust_remote_code)
    except (Usage, fitinput.Usage) as exc:
        print(f"ft-membench: {exc}", file=sys.stderr)
        return guard.BAD_INPUT
    profile = next(iter(cells.values()))["verdict_gpus"][args.gpu]
    lines = answer(cells, args.gpu, Path(args.results), search=not args.no_search, say=say, jobs=args.jobs,
                   resimulate=args.resimulate)

    def evaluate(variants: list[list[str]]) -> list[dict]:
        more = specs(q.model, args.gpu, ["+".join(v) for v in variants], q.seq, q.batch, q.options,
                     args.trust_remote_code)
        return answer(more, args.gpu, Path(args.results), search=False, say=say, jobs=args.jobs,
                      resimulate=args.resimulate)
    hints = [] if args.no_hints or not asked else \
        [dict(h, for_recipe=ln["technique"]) for ln in lines for h in tofit.hints(ln, args.gpu, profile, evaluate)]
    code = guard.exit_code(lines, args.gpu, asked, args.allow_tight)
    if args.json:
        print(json.dumps(guard.answer_object(q, lines, args.gpu, profile, hints, code, args.allow_tight), indent=1))
    else:
        print(render(lines, args.gpu, profile, q.asked, best=not asked))
        print(guard.describe(q, hints, guard.warnings(lines, args.gpu, args.allow_tight), code))
    for ln in lines:   # the reason is on stdout under its line; said on stderr too, and the exit says it
        if (ln.get("record") or {}).get("status") in ("error", "timeout"):
            say(f"ft-membench: {ln['technique']}: {ln['verdict']}: {ln.get('reason') or 'no reason given'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
