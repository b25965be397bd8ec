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

It shares all its code with the matrix path: the spec comes from bench.cells.matrix (a one-study
matrix written for the question), a missing simulation runs in the warm sim worker
(bench/search/simpool.py) exactly as the cell's Snakemake job would, and the searches are
bench.search.fits'. Answers already computed are reused, never approximated: a cell record in
``results/cells`` or ``results/reference/cells`` that passes the record gate (bench/records/checks.gate:
the contract, and the same inputs_sha256, knobs and shape; a study's record for a GPU that study
judged: bench/fit/stored.py's ``judged_on``), and a search in ``results/fits/`` or a ``fits.csv`` for the same inputs,
each by bench/records/reuse.py's one rule: made by the same engine code (``versions.ft_membench_engine``);
made with other library versions, it is reused and says which (a note before anything runs says
the installed versions differ from the reference's), or with ``--resimulate`` simulated again.
Each line says where its answer came from. A simulation is deterministic, so a reused record
is the one a new run would write. Torch-free.

Bad input (an unknown model or GPU or technique, a negative or absurd shape, a bad option) is one
line on stderr naming what is wrong, exit status 2; a failure of the command itself (a bug) is one
line too, exit status 3, never 1 ("does not fit"). With ``--json`` either is also one object on
stdout, its ``error`` naming the cause (``guard.error_object``). A technique whose simulation ended in an error or a
time-out prints its reason and makes the exit status 1. An unwritable ``--results`` folder is
a one-line warning: the answer is printed, not kept.

This module is the command line only (``parser``, ``main``); the fit command's parts are in
bench/fit/: the question (question.py) as matrix cells (cells.py), the stored answers that stand
(stored.py), the answer per technique (answer.py), its table (table.py, with bench/cli_format.py's
lines under a row), the exit status and ``--json`` object (guard.py) and what to change (tofit.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bench import home
from bench.estimate import hostmem
from bench.fit import cells as fitcells
from bench.fit import gpus as fitgpus
from bench.fit import guard, tofit
from bench.fit import question as fitinput
from bench.fit.answer import answer
from bench.fit.table import render


class ArgError(Exception):
    """A command line argparse refuses: its message and the usage line of the (sub)command."""

    def __init__(self, message: str, usage: str):
        super().__init__(message)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # raised, not printed and exited: main says it (and in --json too)
        raise ArgError(f"{self.prog}: {message}", self.format_usage())


def parser() -> argparse.ArgumentParser:
    """The `ft-membench` command line, built without running anything (tests/test_docs.py reads it)."""
    ap = _Parser(prog="ft-membench", description=__doc__.splitlines()[0])
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
    fit.add_argument("--launch-config", help="accelerate's config file the --config runs under (accelerate launch "
                                             "--config_file FILE): its engine, processes and precision")
    fit.add_argument("--gpu", required=True,
                     help=f"a GPU profile of matrix/gpus.yaml ({', '.join(fitcells.cuda_profiles())}) in any case, "
                          "or as people type it (4090, 'RTX 4090', h100), or NxGPU for N of them (2xrtx-4090)")
    fit.add_argument("--gpus", type=int, help="how many GPUs (default 1): sharding recipes run on that many ranks")
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
    fit.add_argument("--host-mem", help="the node's host memory (e.g. 128GB, 96GiB): judge each recipe's host "
                     "memory need against it (without it the need is shown, not judged)")
    fit.add_argument("--no-hints", action="store_true", help="skip what-to-change (no extra simulations)")
    data = fit.add_argument_group("your dataset (one recipe over an epoch, on one GPU or per rank: docs/fit.md)")
    data.add_argument("--dataset", help="a .jsonl/.json/.parquet/.arrow file of TRL rows (messages, prompt+completion "
                                        "or text): is the epoch survived, and if not at which step")
    data.add_argument("--lengths", help="instead of --dataset: a file of token lengths, one a line")
    data.add_argument("--tokenizer", help="the tokenizer folder or Hub id (default: the model's, from the HF cache)")
    data.add_argument("--sampling", choices=["random", "group_by_length", "sequential"],
                      help="the trainer's train_sampling_strategy (default: the --config's, else random)")
    data.add_argument("--seed", type=int, help="the trainer's seed (default: the --config's data_seed or seed, "
                                               "else 42 as TrainingArguments)")
    data.add_argument("--pad-to-multiple-of", type=int, help="the collator's pad_to_multiple_of")
    data.add_argument("--packing", action="store_true", help="packed rows of --seq tokens instead of padding")
    data.add_argument("--padding-free", action="store_true",
                      help="TRL's padding_free: each batch's samples in one row, no pads (default: the --config's)")
    fit.add_argument("--trust-remote-code", action="store_true",
                     help="run a Hub model's own code (auto_map); off by default")
    meas = sub.add_parser("measure", help="run the recipes for real on this machine's GPU, beside sim's prediction",
                          description="Exit status: 0 every recipe ran (fits or oom), 1 a run failed or was "
                                      "skipped (no CUDA device), 2 bad input (bench/fit/measure.py)")
    meas.add_argument("model", nargs="?", help="as for fit: a matrix model name, a config.json path or a Hub id")
    meas.add_argument("--config", help="a training config, as for fit")
    meas.add_argument("--format", choices=["trl", "axolotl", "llamafactory", "torchtune"])
    meas.add_argument("--launch-config", help="accelerate's config file, as for fit")
    meas.add_argument("--gpu", required=True, help="the GPU profile to run as (runs are capped to its memory)")
    meas.add_argument("--techniques", help="comma-separated recipes (default: the 7-8B study's)")
    meas.add_argument("--seq", type=int, help="sequence length (default 2048)")
    meas.add_argument("--batch", type=int, help="batch size (default 1)")
    meas.add_argument("--results", default="results", help="results folder: records go to RESULTS/measured/")
    meas.add_argument("--ranks", choices=["all", "rank0"], default="all",
                      help="rank0: an FSDP recipe of N GPUs (fsdp+...+wN, fsdp1+...+wN) runs as its rank 0 alone on this GPU over "
                      "torch's fake process group: the rank's memory, without NCCL's buffers or the collectives' time")
    meas.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                      help="where the runs happen: this machine's GPU (default), or its CPU (the same command and "
                      "worker end to end on a small model; a CPU run is not the CUDA device the prediction models, "
                      "and gives no corpus rows)")
    meas.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    meas.add_argument("--trust-remote-code", action="store_true", help="run a Hub model's own code (auto_map)")
    return ap


def measure_main(args, techniques, say) -> int:
    """``ft-membench measure`` (bench/fit/measure.py); bad input is ``main``'s, as for fit."""
    from bench.fit import measure
    gpu, n_gpus = fitgpus.resolve(args.gpu, fitcells.cuda_profiles(), None)
    q = fitinput.question(args.model, args.config, args.format, techniques, args.seq, args.batch,
                          args.trust_remote_code, args.launch_config, n_gpus)
    chosen = fitcells.canonical_techniques(q.techniques or fitcells.default_techniques())[0]
    real = args.device   # the measured cells' mode: cuda, or cpu (the matrix's own cpu cells, its "cpu" profile)
    cells = {m: fitcells.specs(q.model, gpu if m == "sim" else real if real == "cpu" else gpu, chosen, q.seq, q.batch,
                               q.options, args.trust_remote_code, mode=m,
                               ranks=args.ranks if m == "cuda" and args.ranks != "all" else None)
             for m in ("sim", real)}
    predicted = answer(cells["sim"], gpu, Path(args.results), search=False, say=say)
    got = measure.run(cells[real], predicted, gpu, Path(args.results), say=say)
    code = guard.OK if all(c["measured"]["status"] in ("ok", "oom") for c in got) else guard.NO_FIT
    if args.json:
        print(json.dumps({"exit_code": code, "gpu": gpu, "recipes": [{k: v for k, v in c.items() if k != "record"}
                                                                      for c in got]}, indent=1))
    else:
        print(measure.render(got, Path(args.results)))
    return code


PIPE_CLOSED = 141  # 128 + SIGPIPE, what a shell reports for a tool whose reader went away


def main(argv=None) -> int:
    """Every outcome is an exit status of guard's (0, 1, 2, 3) and, with ``--json``, one object on stdout."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    try:
        args = parser().parse_args(argv)
        as_json = args.json
        if why := home.missing():  # an installed wheel without $FT_MEMBENCH_HOME: no matrix, no reference answers
            return _fail(guard.BAD_INPUT, f"ft-membench: {why}", as_json)
        return _fit(args)
    except ArgError as exc:
        print(exc.usage.rstrip(), file=sys.stderr)
        return _fail(guard.BAD_INPUT, str(exc), as_json)
    except fitinput.Usage as exc:
        return _fail(guard.BAD_INPUT, f"ft-membench: {exc}", as_json)
    except BrokenPipeError:  # the reader stopped early (`| head`): no bug to report; exit as a tool killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's final flush goes nowhere
        return PIPE_CLOSED
    except Exception as exc:  # noqa: BLE001 - a bug: one line naming it, never exit 1 ("does not fit")
        where = exc.__traceback__
        while where is not None and where.tb_next is not None:
            where = where.tb_next
        at = f" (at {Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno})" if where else ""
        text = " ".join(str(exc).split())[:300]
        return _fail(guard.FAILED, f"ft-membench: failed: {type(exc).__name__}: {text}{at}; please report it "
                                   "with the command", as_json)


def _fail(code: int, message: str, as_json: bool) -> int:
    print(message, file=sys.stderr)
    if as_json:
        print(json.dumps(guard.error_object(code, message), indent=1))
    return code


def _fit(args) -> int:
    techniques = [t.strip() for t in args.techniques.split(",") if t.strip()] if args.techniques else None
    say = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if args.command == "measure":
        return measure_main(args, techniques, say)
    try:
        host_bytes = hostmem.parse_bytes(args.host_mem) if args.host_mem is not None else None
    except ValueError as exc:
        raise fitinput.Usage(f"--host-mem: {exc}") from None
    if techniques == []:
        raise fitinput.Usage("--techniques: empty list")
    gpu, n_gpus = fitgpus.resolve(args.gpu, fitcells.cuda_profiles(), args.gpus)
    q = fitinput.question(args.model, args.config, args.format, techniques, args.seq, args.batch,
                          args.trust_remote_code, args.launch_config, n_gpus)
    if args.dataset or args.lengths:
        if args.dataset and args.lengths:
            raise fitinput.Usage("--dataset and --lengths: give one")
        from bench.dataset import command
        return command.run(args, q, gpu, say, n_gpus=n_gpus, host_bytes=host_bytes)
    asked = q.techniques is not None
    chosen, renamed = fitcells.canonical_techniques(q.techniques or fitcells.default_techniques())
    for said, spelled in (renamed if asked else {}).items():
        say(f"ft-membench: {said} is the recipe {spelled} (one spelling per recipe: its cell and records)")
    chosen, notes = fitgpus.on_gpus(chosen, n_gpus, asked)
    for note in notes:
        say(f"ft-membench: note: {note}")
    cells = fitcells.specs(q.model, gpu, chosen, q.seq, q.batch, q.options, args.trust_remote_code)
    profile = next(iter(cells.values()))["verdict_gpus"][gpu]
    lines = answer(cells, gpu, Path(args.results), search=not args.no_search, say=say, jobs=args.jobs,
                   resimulate=args.resimulate)

    def evaluate(variants: list[list[str]]) -> list[dict]:
        more = fitcells.specs(q.model, gpu, ["+".join(v) for v in variants], q.seq, q.batch, q.options,
                              args.trust_remote_code)
        return answer(more, gpu, Path(args.results), search=False, say=say, jobs=args.jobs,
                      resimulate=args.resimulate)
    hints = [] if args.no_hints or not asked else \
        [dict(h, for_recipe=ln["technique"]) for ln in lines for h in tofit.hints(ln, gpu, profile, evaluate)]
    code = guard.exit_code(lines, gpu, asked, args.allow_tight, host_bytes)
    if args.json:
        print(json.dumps(guard.answer_object(q, lines, gpu, profile, hints, code, args.allow_tight, host_bytes), indent=1))
    else:
        print(render(lines, gpu, profile, q.asked, best=not asked))
        print(guard.describe(q, hints, guard.warnings(lines, gpu, args.allow_tight), code,
                             guard.host_lines(lines, gpu, host_bytes)))
    for warning in guard.warnings(lines, gpu, args.allow_tight):   # paging, --allow-tight: on stderr too (docs/fit.md)
        say(f"ft-membench: warning: {warning}")
    for ln in lines:   # the reason is on stdout under its line; said on stderr too, and the exit says it
        if (ln.get("record") or {}).get("status") in ("error", "timeout"):
            say(f"ft-membench: {ln['technique']}: {ln['verdict']}: {ln.get('reason') or 'no reason given'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
