"""The ``--dataset`` / ``--lengths`` half of ``ft-membench fit``: one recipe on one GPU over an epoch
of the user's data (bench/dataset/answer.py), printed as text or one JSON object. Exit status as
``fit``'s guard: 0 the epoch fits; 1 an out-of-memory at some step, or tight (no allocation fails,
but only because the allocator releases its cache: 0 with ``--allow-tight``); 2 bad input (the file,
row or key, and why)."""
from __future__ import annotations

import json
from pathlib import Path

from bench.dataset import answer as epoch_answer
from bench.dataset import epoch, lengths as lengths_mod
from bench.dataset.lengths import DatasetError
from bench.dataset.stairs import GRID
from bench.fit import cells as fitcells
from bench.fit.question import Usage

GiB = 2 ** 30


def tokenizer_ref(model: str, given: str | None) -> str:
    """The tokenizer to read: ``--tokenizer``, else the matrix's own folder for the model
    (matrix/tokenizers/MODEL), else the model's Hub id (a matrix model's ``_source``), else the
    folder of a config.json path, else the argument as a Hub id."""
    if given:
        return given
    base = fitcells.matrix.DEFAULT_MATRIX.parent
    if (base / "tokenizers" / model / "tokenizer.json").is_file():
        return str(base / "tokenizers" / model)
    p = base / "models" / f"{model}.json"
    if p.is_file():
        src = json.loads(p.read_text()).get("_source", "")
        if src.endswith("/config.json"):
            return src.removesuffix("/config.json")
    if Path(model).exists():
        return str(Path(model).parent if Path(model).is_file() else model)
    return model


class Asked:
    """The dataset question, as ``run`` takes it from the command line and the report's study
    (bench/dataset/study.py) sets it."""

    def __init__(self, dataset=None, lengths=None, tokenizer=None, sampling="random", seed=42,
                 pad_to_multiple_of=None, packing=False, jobs=2, trust_remote_code=False):
        self.dataset, self.lengths, self.tokenizer, self.sampling, self.seed = dataset, lengths, tokenizer, sampling, seed
        self.pad_to_multiple_of, self.packing, self.jobs = pad_to_multiple_of, packing, jobs
        self.trust_remote_code = trust_remote_code


def answer_doc(args, model: str, gpu: str, tech: str, batch: int, max_length: int, options=None, say=print) -> dict:
    """The epoch answer as one dict (what ``--json`` prints, less ``exit_code``)."""
    if max_length % GRID:
        say(f"ft-membench: note: widths are judged in {GRID}-token steps: --seq {max_length} judged as "
            f"{-(-max_length // GRID) * GRID} at most")

    def spec_at(seq: int, padded: bool) -> dict:
        name = f"{tech}+padding-growing" if padded else tech
        (spec,) = fitcells.specs(model, gpu, [name], seq, batch, options, args.trust_remote_code).values()
        return dict(spec, cross_check=False)

    own = spec_at(max_length, False)
    knobs = own["knobs"]
    if knobs["dist"] or (own.get("world_size") or 1) > 1:
        raise Usage(f"--dataset: {tech} runs on several GPUs; the epoch is answered for one GPU for now")
    if knobs["accum"] > 1:
        raise Usage(f"--dataset: {tech} accumulates gradients; the epoch is answered without accumulation for now")
    if knobs["batching"] != "fixed":
        raise Usage(f"--dataset: {tech} sets its own batching ({knobs['batching']}); the dataset sets it here "
                    "(padding, or --packing)")
    try:
        if args.lengths:
            lengths, info = lengths_mod.from_file(args.lengths, max_length)
        else:
            ref = tokenizer_ref(model, args.tokenizer)
            lengths, info = lengths_mod.from_dataset(args.dataset, lengths_mod.tokenizer(ref), max_length)
            info["tokenizer"] = ref
    except DatasetError as exc:
        raise Usage(str(exc)) from None
    profile = own["verdict_gpus"][gpu]
    conf = knobs["alloc_conf"]
    from bench.records import reuse
    from bench.search.sample_cache import SampleCache
    from bench.search.simpool import SimPool
    with SimPool(args.jobs) as pool:
        samples = SampleCache(pool, reuse.versions(), say=say)
        if args.packing:
            n = epoch.packed_steps(lengths, batch, max_length)
            batches, widths = [[] for _ in range(n)], [-(-max_length // GRID) * GRID] * n
        else:
            batches = epoch_answer.orders(lengths, batch, args.seed, args.sampling)
            widths = epoch.padded_widths(lengths, batches, args.pad_to_multiple_of)
        padded = batch > 1 and not args.packing
        fam, how = epoch_answer.family(spec_at, batch, padded, samples.run_many, say)
        result = epoch_answer.epoch_answer(fam, lengths, batches, widths, conf, profile, max_length)
        packed_fam = None
        if not args.packing:   # the unpadded step at this batch, for the packing remedy
            packed_fam = epoch_answer.family(spec_at, batch, False, samples.run_many, say)[0] if padded else fam
        fixes = epoch_answer.remedies(fam, lengths, batches, widths, conf, profile, args.pad_to_multiple_of,
                                      max_length, result, batch=batch, packed_fam=packed_fam, seed=args.seed,
                                      sampling=args.sampling)
    result["per_width"] = {str(k): v for k, v in result["per_width"].items()}
    return {"model": model, "gpu": gpu, "technique": tech, "batch": batch, "max_length": max_length,
            "dataset": info, "sampling": "packing" if args.packing else args.sampling, "seed": args.seed,
            "pad_to_multiple_of": args.pad_to_multiple_of, "simulation": how, "epoch": result, "to_change": fixes,
            "versions": reuse.versions(),
            "how": (f"each step's width is its batch's longest sample (rounded up to {GRID} tokens); the step derived "
                    f"exactly at that width from simulations at {how['sample_seqs']} tokens; the caching allocator "
                    "replayed over the epoch's steps in the trainer's order")}


def from_config(args, q, tech: str, say) -> str:
    """A --config's epoch settings where the command line leaves them (its packing, seed, sampling
    strategy and pad_to_multiple_of); the recipe without its batching, which the dataset sets here."""
    parts = tech.split("+")
    if "packing" in parts:
        if not args.packing:
            say("ft-membench: --dataset: packing, as the config says")
        args.packing = True
    tech = "+".join(p for p in parts if p not in ("packing", "padding"))
    epoch_cfg = getattr(q.recipe, "epoch", None) or {}
    for key, flag in (("seed", "seed"), ("sampling", "sampling"), ("pad_to_multiple_of", "pad_to_multiple_of")):
        if getattr(args, flag) is None and key in epoch_cfg:
            setattr(args, flag, epoch_cfg[key])
            say(f"ft-membench: --dataset: {key} {epoch_cfg[key]}, as the config says")
    args.seed = 42 if args.seed is None else args.seed            # TrainingArguments' default
    args.sampling = args.sampling or "random"
    return tech


def run(args, q, gpu: str, say) -> int:
    techniques = q.techniques or []
    if len(techniques) != 1:
        raise Usage("--dataset answers one recipe at a time: give --techniques with one (e.g. lora+gc+bf16)")
    tech = from_config(args, q, techniques[0], say)
    doc = answer_doc(args, q.model, gpu, tech, q.batch or 1, q.seq or 2048, q.options, say)
    verdict = doc["epoch"]["verdict"]
    code = 0 if verdict == "fits" or (verdict == "tight" and args.allow_tight) else 1   # as fit's guard
    if args.json:
        print(json.dumps(dict(doc, exit_code=code), indent=1))
    else:
        print(text(doc))
    return code


def _g(b) -> str:
    return f"{b / GiB:.2f} GiB"


def text(doc: dict) -> str:
    info, ep, cap = doc["dataset"], doc["epoch"], doc["epoch"]["capacity_bytes"]
    lines = [f"{doc['model']} {doc['technique']} on {doc['gpu']} ({_g(cap)} for the allocator), batch {doc['batch']}, "
             f"max_length {doc['max_length']}",
             f"dataset {info['source']}: {info['samples']} samples"
             + (f" ({info['dataset_type']}, tokenized with {info['tokenizer']})" if "tokenizer" in info else "")
             + f"; longest {info['longest']} tokens; {info['truncated_samples']} truncated at {info['max_length']} "
             f"({info['tokens_cut']} tokens cut)",
             f"epoch: {ep['steps']} steps, {doc['sampling']} sampling"
             + ("" if doc["sampling"] == "packing" else f" (seed {doc['seed']}), each padded to its longest sample")
             + (f"; {ep['replayed_steps']} of them replayed (the first {epoch.HEAD}, and each step that is the "
                f"longest so far with {epoch.AROUND} on either side; the others are no longer than one before them)"
                if ep["replayed_steps"] < ep["steps"] else "; every step replayed")]
    oom = ep["first_oom"]
    if ep["verdict"] == "fits":
        lines.append(f"survives the epoch: reserved climbs to {_g(ep['reserved_peak_bytes'])} of {_g(cap)}")
    elif ep["verdict"] == "tight":
        over = next(s for s in ep["staircase"] if s["reserved_bytes"] > cap)
        lines.append(f"tight: survives the epoch only by releasing the allocator's cache (cudaFree and a synchronize) "
                     f"from step {over['step']} (width {over['width']}) on; on a card big enough it would reserve "
                     f"{_g(ep['reserved_peak_bytes'])}, beyond {_g(cap)}")
    elif oom:
        where = "while the model builds" if oom["during"] else \
            f"at step {oom['step']} (width {oom['width']}; lengths {', '.join(map(str, oom['lengths']))})"
        lines.append(f"oom {where}: {oom['op']} asks {_g(oom['bytes'])} beyond {_g(cap)}")
    else:
        lines.append(f"does not fit: reserved reaches {_g(ep['reserved_peak_bytes'])} of {_g(cap)}")
    p = ep["per_step_allocated"]
    lines.append(f"allocated peak per step: p50 {_g(p['p50'])}, p99 {_g(p['p99'])}, max {_g(p['max'])}")
    lines.append("reserved staircase: " + ", ".join(f"step {s['step']} (width {s['width']}) {_g(s['reserved_bytes'])}"
                                                    for s in epoch.rises(ep["staircase"])))
    if doc["to_change"]:
        lines.append("what to change:")
        for f in doc["to_change"]:
            figure = f" -> {_g(f['reserved_peak_bytes'])}" if f.get("reserved_peak_bytes") else ""
            cut = (f" (cuts {f['samples_cut']} samples, {f['tokens_cut']} tokens, {f['tokens_share']:.1%})"
                   if "samples_cut" in f else "")
            lines.append(f"  {f['change']}{cut}{figure}: {'fits' if f.get('survives') else 'does not fit'}"
                         + (f" ({f['why']})" if f.get("why") else ""))
        if doc["batch"] > 1:
            lines.append(f"  a smaller batch with gradient accumulation: ask again with --batch {doc['batch'] // 2}")
    lines.append(f"how: {doc['how']}")
    return "\n".join(lines)
