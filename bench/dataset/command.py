"""The ``--dataset`` / ``--lengths`` half of ``ft-membench fit``: one recipe over an epoch of the user's
data, on one GPU or per rank on several (bench/dataset/answer.py), with the node's host need, printed
as text (bench/dataset/words.py) or one JSON object. Exit status as ``fit``'s guard: 0 the epoch fits;
1 an out-of-memory at some step, or tight (no allocation fails, but only because the allocator
releases its cache: 0 with ``--allow-tight``), or a host need beyond ``--host-mem``; 2 bad input (the
file, row or key, and why)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from bench.dataset import answer as epoch_answer
from bench.dataset import epoch, hostshare, lengths as lengths_mod, words
from bench.dataset.lengths import DatasetError
from bench.dataset.stairs import GRID
from bench.fit import cells as fitcells
from bench.fit.question import Usage
from bench.cells import techniques


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
                 pad_to_multiple_of=None, packing=False, jobs=2, trust_remote_code=False, padding_free=False):
        self.dataset, self.lengths, self.tokenizer, self.sampling, self.seed = dataset, lengths, tokenizer, sampling, seed
        self.pad_to_multiple_of, self.packing, self.jobs = pad_to_multiple_of, packing, jobs
        self.trust_remote_code, self.padding_free = trust_remote_code, padding_free


def answer_doc(args, model: str, gpu: str, tech: str, batch: int, max_length: int, options=None, say=print,
               host_bytes: int | None = None) -> dict:
    """The epoch answer as one dict (what ``--json`` prints, less ``exit_code``)."""
    if max_length % GRID:
        say(f"ft-membench: note: widths are judged in {GRID}-token steps: --seq {max_length} judged as "
            f"{-(-max_length // GRID) * GRID} at most")

    def spec_at(seq: int, padded: bool, recipe: str = tech, rows: int = batch) -> dict:
        name = f"{recipe}+padding-growing" if padded else recipe
        (spec,) = fitcells.specs(model, gpu, [name], seq, rows, options, args.trust_remote_code).values()
        return dict(spec, cross_check=False)

    own = spec_at(max_length, False)
    knobs, world = own["knobs"], own.get("world_size") or 1
    if world > 1 and not techniques.traced_per_rank(own):
        raise Usage(f"--dataset: {tech} runs on {world} GPUs with {knobs['dist'] or 'no sharding engine'}, which sim "
                    "partitions by formula from one process's step rather than tracing a rank's own program; an "
                    "epoch replay needs a rank's own trace (FSDP: fsdp, fsdp-offload, fsdp1)")
    if world > 1 and knobs["dist"] in ("zero3", "zero3-offload"):
        raise Usage(f"--dataset: {tech} runs DeepSpeed {knobs['dist']} on {world} GPUs: sim traces its rank's own "
                    "program, but an epoch derived from a ZeRO-3 rank's trace differs from the rank's simulation "
                    "(its gathered parameters' events: tests/test_dataset_ranks.py); epochs are checked for FSDP "
                    "(fsdp, fsdp-offload, fsdp1) and ZeRO-1/2 (zero1, zero2, zero2-offload); not answered rather "
                    "than unchecked")
    accum, free = knobs["accum"], bool(getattr(args, "padding_free", False))
    if free and (args.packing or accum > 1):
        raise Usage("--dataset: padding-free batches " + ("or packing: one or the other" if args.packing else
                    f"with gradient accumulation ({tech}) are not modelled: sim's accumulation splits one padded batch"))
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
    outside = nccl_bytes(world, gpu, profile)
    from bench.records import reuse
    from bench.search.sample_cache import SampleCache
    from bench.search.simpool import SimPool
    with SimPool(args.jobs) as pool:
        samples = SampleCache(pool, reuse.versions(), say=say)
        packed_n = -(-epoch.packed_steps(lengths, batch, max_length) // world)   # a rank's steps, packed
        ranks = rank_steps(args, lengths, batch, max_length, world, accum, packed_n)
        padded = batch > 1 and not args.packing and not free
        if free:   # one row of the step's tokens: the recipe's unpadded step at batch 1
            fam, how = epoch_answer.family(lambda s, p: spec_at(s, False, rows=1), 1, False, samples.run_many, say)
        else:
            fam, how = epoch_answer.family(spec_at, batch, padded, samples.run_many, say)
        results = [epoch_answer.epoch_answer(fam, lengths, b, w, conf, profile, max_length, outside=outside)
                   for b, w in (ranks[:1] if args.packing else ranks)]   # packed: every rank's epoch alike
        rank = worst_rank(results)
        result = dict(results[rank], **({"rank": rank} if world > 1 else {}))
        packed_fam = None
        if not args.packing and not free:   # the unpadded step at this batch, for the packing remedy
            packed_fam = epoch_answer.family(spec_at, batch, False, samples.run_many, say)[0] if padded else fam
        split = None   # the same samples a step in twice the micro-batches, where the epoch does not fit
        if result["verdict"] != "fits" and not args.packing and not free and batch % (2 * accum) == 0:
            more = with_accum(tech, 2 * accum)
            split = (more, epoch_answer.family(lambda s, p: spec_at(s, p, more), batch, padded, samples.run_many, say)[0])
        fixes = epoch_answer.remedies(fam, lengths, ranks, conf, profile, args.pad_to_multiple_of,
                                      max_length, result, batch=batch, packed_fam=packed_fam, seed=args.seed,
                                      sampling=args.sampling, packed_steps=packed_n, outside=outside, accum=accum,
                                      split=split, free=free)
    host = data_share(args.dataset, world)
    need = hostshare.node_need(recipe_record(model, gpu, tech, batch, max_length, options, args, say), gpu, host,
                               host_bytes)
    if world > 1:
        result["ranks"] = [{"rank": r, "verdict": x["verdict"], "reserved_peak_bytes": x["reserved_peak_bytes"],
                            "first_oom_step": (x["first_oom"] or {}).get("step"), "steps": x["steps"]}
                           for r, x in enumerate(results)]
        result["outside_allocator_bytes"] = outside
    result["per_width"] = {str(k): v for k, v in result["per_width"].items()}
    return {"model": model, "gpu": gpu, "technique": tech, "batch": batch, "max_length": max_length, "world_size": world,
            "accum": accum, "padding_free": free,
            "dataset": info, "sampling": "packing" if args.packing else args.sampling, "seed": args.seed,
            "pad_to_multiple_of": args.pad_to_multiple_of, "simulation": how, "epoch": result, "to_change": fixes,
            "host_data_share": host, "host_need": need,
            "versions": reuse.versions(),
            "how": _how(free, accum, batch, world, how["sample_seqs"])}


SEVERITY = {"oom": 0, "tight": 1, "fits": 2}


def _how(free: bool, accum: int, batch: int, world: int, seqs: list[int]) -> str:
    """How the answer was made, in words."""
    return ((f"padding-free: each step one row of its samples' tokens together (rounded up to {GRID}), the recipe's "
             "unpadded step at batch 1" if free else
             f"each step's width is its batch's longest sample (rounded up to {GRID} tokens); the step")
            + f" derived exactly at that width from simulations at {seqs} tokens; the caching allocator replayed over "
            "the epoch's steps in the trainer's order"
            + (f"; with gradient accumulation, an optimizer step's {accum} micro-batches of {batch // accum} each "
               "judged at the width of the step's longest sample (sim's accumulation splits one batch of one width), "
               "at or above the trainer's own padding of each micro-batch" if accum > 1 else "")
            + (f"; on {world} GPUs, each rank's own batches (accelerate's prepare_data_loader for that rank) through "
               "rank 0's own step (it holds the largest shard), each rank's allocator replayed apart, the rank that "
               "fares worst shown, its NCCL buffers taken off the card" if world > 1 else ""))


def recipe_record(model: str, gpu: str, tech: str, batch: int, max_length: int, options, args, say) -> dict:
    """The recipe's own record at the asked shape, as ``fit`` answers it (bench/fit/answer.py: a stored record
    where one stands, else simulated now and kept under the results folder): its load, offloaded and
    paged-out state give the recipe's host need."""
    import tempfile
    from bench.fit.answer import answer as fit_answer
    specs = fitcells.specs(model, gpu, [tech], max_length, batch, options, args.trust_remote_code)
    results = getattr(args, "results", None)
    with tempfile.TemporaryDirectory(prefix="ftmb-dataset-") as tmp:   # no results folder: nothing kept
        (line,) = fit_answer(specs, gpu, Path(results or tmp), search=False, say=say, jobs=args.jobs)
    return line.get("record") or {}


def rank_steps(args, lengths, batch: int, max_length: int, world: int, accum: int, packed_n: int) -> list[tuple]:
    """Each rank's (steps' samples, steps' widths): packed rows of max_length, padding-free rows of each
    step's tokens, or padded batches, in the trainer's order for that rank."""
    if args.packing:
        return [([[] for _ in range(packed_n)], [-(-max_length // GRID) * GRID] * packed_n)] * world
    width = ((lambda b: epoch.free_widths(lengths, b)) if getattr(args, "padding_free", False) else
             (lambda b: epoch.padded_widths(lengths, b, args.pad_to_multiple_of)))
    return [(b, width(b)) for b in epoch_answer.orders(lengths, batch, args.seed, args.sampling, world, accum)]
HOSTLOAD = fitcells.matrix.DEFAULT_MATRIX.parent.parent / "results" / "reference" / "dataset" / "hostload.json"


def data_share(dataset: str | None, world: int) -> dict | None:
    """The data's share of the node's host memory (bench/dataset/hostshare.py), for a JSON-lines file like the
    measured one; None without a dataset file (``--lengths``), and the reason where it is not modelled."""
    if not dataset:
        return None
    p = Path(dataset)
    if not p.is_file() or p.suffix not in (".jsonl", ".json"):
        return {"missing": "modelled for JSON lines files only: the load paths were measured on one "
                           f"(bench/dataset/hostload.py); {dataset} is {'a Hub dataset' if not p.is_file() else p.suffix}"}
    doc, why = hostshare.read(HOSTLOAD)
    if doc is None:
        return {"missing": why}
    return hostshare.share(doc, p.stat().st_size, world)


def with_accum(tech: str, n: int) -> str:
    """The recipe with gradient accumulation over ``n`` micro-batches (its ``gaN`` replaced)."""
    return "+".join([p for p in tech.split("+") if not re.fullmatch(r"ga\d+", p)] + [f"ga{n}"])


def worst_rank(results: list[dict]) -> int:
    """The rank whose epoch fares worst: an out-of-memory before the others', else tight, else the most reserved."""
    def key(r):
        x = results[r]
        return (SEVERITY[x["verdict"]], (x["first_oom"] or {}).get("step", 0), -x["reserved_peak_bytes"])
    return min(range(len(results)), key=key)


def nccl_bytes(world: int, gpu: str, profile: dict) -> int:
    """A rank's NCCL device buffers on ``gpu`` (0 on one GPU), as the per-rank verdicts take them off the card."""
    if world <= 1:
        return 0
    from bench.estimate import nccl
    return nccl.by_gpu(world, {gpu: profile}).get(gpu, {}).get("bytes", 0)


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
    if epoch_cfg.get("padding_free") and not getattr(args, "padding_free", False):
        args.padding_free = True
        say("ft-membench: --dataset: padding_free, as the config says")
    args.seed = 42 if args.seed is None else args.seed            # TrainingArguments' default
    args.sampling = args.sampling or "random"
    return tech


def run(args, q, gpu: str, say, n_gpus: int = 1, host_bytes: int | None = None) -> int:
    techniques = q.techniques or []
    if len(techniques) != 1:
        raise Usage("--dataset answers one recipe at a time: give --techniques with one (e.g. lora+gc+bf16)")
    from bench.fit import gpus as fitgpus
    (tech,), notes = fitgpus.on_gpus([from_config(args, q, techniques[0], say)], n_gpus, True)   # --gpus N: wN
    for note in notes:
        say(f"ft-membench: note: {note}")
    doc = answer_doc(args, q.model, gpu, tech, q.batch or 1, q.seq or 2048, q.options, say, host_bytes)
    verdict = doc["epoch"]["verdict"]
    code = 0 if verdict == "fits" or (verdict == "tight" and args.allow_tight) else 1   # as fit's guard
    if (doc.get("host_need") or {}).get("verdict") == "oom":   # --host-mem: the node's need beyond it
        code = 1
    if args.json:
        print(json.dumps(dict(doc, exit_code=code), indent=1))
    else:
        print(words.text(doc))
    return code
