"""Load a matrix YAML, validate it, and expand it into cells. The one loader of the matrix.

Used by the Snakefile (wildcards, inputs), by bench/conftest.py (pytest ids) and by tests.
Torch-free. Every problem is a ``MatrixError`` naming the file, the key path and the reason,
raised before any cell runs.

A cell id is ``<model>__<gpu>__<technique>[+<technique>...]``: the pytest id, the Snakemake
wildcard and the results file name (so at most ``ID_MAX_BYTES`` long). The axes travel as
data in the cell spec; nothing parses an id back. One set of techniques has one spelling:
``gc+lora`` beside ``lora+gc`` for the same model and device is refused, as is a cell listed
twice in a study. In sim mode the gpu part is ``sim``: one simulation serves every GPU
profile listed by the study, each of which gets a verdict.

    >>> cells = load("matrix/default.yaml")      # {cell id: spec dict}

Each spec carries ``inputs_sha256``: digests of the content of everything the cell depends on
(model config, DeepSpeed config, GPU profiles, catalogue entries, technique options), so the
Snakemake rule, whose ``params`` is the spec, reruns a cell exactly when one of them changes.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
from pathlib import Path

from bench import home
from bench.cells import catalogue, inputs, modelref
from bench.cells import techniques as tech
from bench.cells import workloads
from bench.cells.matrixfile import SCHEMA, MatrixError, check_schema, load_gpus, read_json, read_yaml

DEFAULT_MATRIX = home.root() / "matrix" / "default.yaml"  # the checkout, or $FT_MEMBENCH_HOME
SHAPE_KEYS = ("batch_size", "seq_len", "steps", "warmup_steps", "timeout_s", "seed")


NAME_MAX = 255  # bytes in one file name (ext4, xfs, btrfs, APFS)
# Every file name made from a cell id; the longest sets how long an id may be.
ID_FILE_NAMES = (
    "{id}.json",                 # results/cells/
    "{id}.log",                  # results/logs/ (snakemake's log of the rule)
    "{id}.worker.log",           # the worker's own log
    ".{id}.json.XXXXXXXX",       # bench.records.atomic's temp file (mkstemp: 8 random characters)
    "{id}.json.rank9999.pid",    # a rank's pid file beside its record (bench/runner/ranks.pid_path), w < 10000
)
ID_MAX_BYTES = NAME_MAX - max(len(name.format(id="")) for name in ID_FILE_NAMES)


def load(path=DEFAULT_MATRIX) -> dict[str, dict]:
    """Validate the matrix at ``path`` and return its cells, {cell id: spec}, in file order."""
    path = Path(path)
    return _unique(path, expand(path))


def expand(path) -> list[tuple[str, dict]]:
    """Every (key, spec) the studies of ``path`` expand to, duplicates included, where key
    is where the cell was asked for (``studies.<s>.techniques[<i>]``)."""
    path = Path(path)
    doc = read_yaml(path, what="matrix")
    check_schema(path, doc, SCHEMA)
    base = path.parent
    models_dir = _resolved(path, base / doc.get("models_dir", "models"), "models_dir")
    gpus = load_gpus(path, base, doc)
    digests: dict = {}  # {file: digest}, each input file read once per load
    models = _resolve_models(path, doc, models_dir)
    return [out for study, body in doc["studies"].items()
            for out in _expand(path, doc, study, body, models, gpus, digests)]


def _resolved(path, folder: Path, key: str) -> Path:
    """``folder`` resolved; a symlink loop (or an unreadable link) is a MatrixError, not a traceback."""
    try:
        return folder.resolve()
    except (RuntimeError, OSError) as exc:
        raise MatrixError(path, key, f"{folder}: cannot be resolved ({exc}): a symlink loop?") from None


def _resolve_models(path, doc: dict, models_dir: Path) -> dict[str, modelref.Model]:
    """{entry as written in a study's models: the model it names} (bench/cells/modelref.py): a name
    in models_dir, a config path (relative to the matrix's folder) or a Hugging Face id in the
    local cache; trust_remote_code only where ``model_options`` opts in. transformers is asked
    once for all of them; two entries that would make one cell name are refused."""
    options = doc.get("model_options", {})
    found: dict[str, modelref.Model] = {}
    where: dict[str, str] = {}
    for study, body in doc["studies"].items():
        for i, entry in enumerate(body["models"]):
            if entry in found:
                continue
            where[entry] = f"studies.{study}.models[{i}]"
            try:
                model = modelref.resolve(entry, models_dir=models_dir, base=path.parent, check=False)
            except modelref.ModelError as exc:
                raise MatrixError(path, where[entry], str(exc)) from None
            trust = options.get(entry, options.get(model.name, {})).get("trust_remote_code", False)
            found[entry] = dataclasses.replace(model, trust_remote_code=trust)
    names: dict[str, str] = {}
    for entry, model in found.items():
        other = names.setdefault(model.name, entry)
        if other != entry and found[other].path != model.path:
            raise MatrixError(path, where[entry], f"models {other!r} and {entry!r} both make the cell name "
                                               f"{model.name!r}: give one a config file of another name")
    unused = sorted(set(options) - set(found) - {m.name for m in found.values()})
    if unused:
        raise MatrixError(path, f"model_options.{unused[0]}", "names no model of any study")
    try:
        return dict(zip(found, modelref.check_all(list(found.values()))))
    except modelref.ModelError as exc:
        entry = next((e for e, m in found.items() if str(exc).startswith(f"model {m.source}:")), "")
        raise MatrixError(path, where.get(entry, "models"), str(exc)) from None


def _unique(path, expanded: list[tuple[str, dict]]) -> dict[str, dict]:
    """{cell id: spec}, refusing what would make two rows one or one row two: an id listed
    twice in a study, an id whose settings differ between studies, one set of techniques
    spelled two ways, and an id too long for a file name."""
    cells: dict[str, dict] = {}
    asked: dict[str, str] = {}
    spelled: dict[tuple, tuple[str, str]] = {}
    for key, spec in expanded:
        cid, combo = spec["cell"], "+".join(spec["techniques"])
        old = cells.get(cid)
        if old is not None:
            if old["study"] == spec["study"]:
                raise MatrixError(path, key, f"cell {cid} is listed twice (also at {asked[cid]})")
            if _sans_study(old) != _sans_study(spec):
                raise MatrixError(path, f"studies.{spec['study']}",
                                  f"cell {cid} is also in study {old['study']} with other settings")
            continue
        same = (spec["model"], spec["gpu"], frozenset(spec["techniques"]))
        if same in spelled:
            other, where = spelled[same]
            raise MatrixError(path, key, f"{combo} and {other} (at {where}) are the same techniques in another "
                                         f"order, one cell for {spec['model']} on {spec['gpu']}: keep one spelling")
        if len(cid.encode()) > ID_MAX_BYTES:
            raise MatrixError(path, key, f"cell id {cid} is {len(cid.encode())} bytes, over the limit of "
                                         f"{ID_MAX_BYTES}: a file name holds {NAME_MAX} bytes and up to "
                                         f"{NAME_MAX - ID_MAX_BYTES} are added to the id "
                                         f"({', '.join(n.format(id='<id>') for n in ID_FILE_NAMES)}): "
                                         f"shorten the model or technique names")
        spelled[same], asked[cid], cells[cid] = (combo, key), key, spec
    return cells


def cell_id(model: str, gpu: str, names: list[str]) -> str:
    return f"{model}__{gpu}__{'+'.join(names)}"


def _sans_study(spec: dict) -> dict:
    return {k: v for k, v in spec.items() if k not in ("study", "baseline_cell")}


def _published(path, where: str, table: dict) -> dict:
    """A study's published figures per technique combination, each read from its corpus row
    (matrix/published/corpus.yaml, the one copy of a published figure: the study names the row's
    id, never restates it). The row's techniques must be the combination's."""
    if not table:
        return {}
    from bench.corpus import published as corpus
    rows = {r.id: r for r in corpus.load()}
    out = {}
    for combo, rid in table.items():
        key = f"{where}.published.{combo}"
        row = rows.get(rid)
        if row is None:
            raise MatrixError(path, key, f"no row {rid!r} in {corpus.DEFAULT.relative_to(corpus.ROOT)}")
        if sorted((row.techniques or "").split("+")) != sorted(combo.split("+")):
            raise MatrixError(path, key, f"corpus row {rid} maps to techniques {row.techniques}, not {combo}")
        read = row.read_at[:8] if len(row.read_at) == 40 else row.read_at
        out[combo] = {"row": rid, "peak_gib": row.value_gib, "measure": row.measure,
                      "source": f"{row.source} at {read}",
                      **({"tokens_per_s": row.tokens_per_s} if row.tokens_per_s else {}),
                      **({"unmatched": row.unmatched} if row.unmatched else {})}
    return out


def _expand(path, doc, study, body, models, gpus, digests):
    where = f"studies.{study}"
    mode = body["mode"]
    shape = {**doc.get("defaults", {}), **{k: body[k] for k in SHAPE_KEYS if k in body}}
    for key in ("batch_size", "seq_len", "steps", "warmup_steps"):
        if key not in shape:
            raise MatrixError(path, f"{where}.{key}", "not set here nor in defaults")
    shape.setdefault("timeout_s", 900)
    shape.setdefault("seed", 0)
    for key, value in shape.items():   # NaN passes every schema comparison; infinity only the minimum
        if isinstance(value, float) and not math.isfinite(value):
            raise MatrixError(path, f"{where if key in body else 'defaults'}.{key}",
                              f"{value} is not a finite number (limit {tech.MAXIMUMS.get(key, 'finite')})")
    ctx = {"path": path, "where": where, "mode": mode, "shape": shape, "gpus": gpus, "study_gpus": body["gpus"],
           "models": models, "published": _published(path, where, body.get("published", {})),
           "options": {k: {**(catalogue.LORA_DEFAULTS if k == "lora" else {}),
                           **doc.get("technique_options", {}).get(k, {}), **v}
                       for k, v in {"lora": {}, **body.get("technique_options", {})}.items()},
           "ds_dir": _resolved(path, path.parent / doc.get("deepspeed_dir", "deepspeed"), "deepspeed_dir"),
           "digests": digests, "one_rank": body.get("ranks") == "rank0"}
    if ctx["one_rank"] and mode == "sim":
        raise MatrixError(path, f"{where}.ranks", "rank0 is for cpu and cuda studies: sim runs one rank's program "
                          "wherever it traces the engine per rank")
    for i, gpu in enumerate(body["gpus"]):
        if gpu not in gpus:
            raise MatrixError(path, f"{where}.gpus[{i}]", f"unknown gpu {gpu!r} (known: {', '.join(sorted(gpus))})")
        want = "cpu" if mode == "cpu" else "cuda"
        if gpus[gpu]["kind"] != want:
            raise MatrixError(path, f"{where}.gpus[{i}]",
                              f"{mode} mode needs a {want} gpu profile, {gpu!r} is {gpus[gpu]['kind']}")
    combos = []
    for i, combo in enumerate(body["techniques"]):
        key, names = f"{where}.techniques[{i}]", combo.split("+")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise MatrixError(path, key, f"{combo}: names {', '.join(repeated)} more than once")
        try:
            knobs = tech.knobs(names)
        except (KeyError, ValueError) as exc:
            raise MatrixError(path, key, f"{combo}: {exc.args[0]}") from None
        combos.append((key, names, knobs))
    if ["baseline"] not in [n for _, n, _ in combos]:
        combos.insert(0, (where, ["baseline"], tech.knobs(["baseline"])))
    excludes = body.get("exclude", [])
    device_axis = ["sim"] if mode == "sim" else body["gpus"]
    used, kept = [False] * len(excludes), 0
    for entry, gpu, (key, names, knobs) in itertools.product(body["models"], device_axis, combos):
        model = models[entry]
        hits = [i for i, rule in enumerate(excludes) if _excluded(rule, (entry, model.name), gpu, names)]
        for i in hits:
            used[i] = True
        if hits:
            continue
        kept += 1
        yield key, _spec(ctx, study, model, gpu, names, knobs)
    for i, rule in enumerate(excludes):   # a typo in a rule would silently exclude nothing
        if not used[i]:
            raise MatrixError(path, f"{where}.exclude[{i}]", f"{json.dumps(rule, sort_keys=True)} matches no cell of "
                              "the study: a misspelt model, gpu or technique?")
    if not kept:
        raise MatrixError(path, f"{where}.exclude", "excludes every cell of the study: nothing would run")


def _excluded(rule: dict, model: tuple[str, str], gpu: str, names: list[str]) -> bool:
    """Whether ``rule`` drops the cell; its model may be written as in models: or as the cell name."""
    return (rule.get("model", model[0]) in model and rule.get("gpu", gpu) == gpu
            and set(rule.get("techniques", "").split("+")) <= set(names) | {""})


def _spec(ctx: dict, study: str, model: modelref.Model, gpu: str, names: list[str], knobs: dict) -> dict:
    path, where, mode, shape, options = ctx["path"], ctx["where"], ctx["mode"], ctx["shape"], ctx["options"]
    batch = knobs["batch_size"] or shape["batch_size"]
    if batch % knobs["accum"]:
        raise MatrixError(path, f"{where}.techniques",
                          f"{'+'.join(names)}: batch {batch} does not split into {knobs['accum']} micro-batches")
    device = ctx["gpus"][gpu] if mode != "sim" else None
    cell_options = {"lora": options.get("lora", {})} if knobs["adapter"] else {}
    inputs = _inputs(ctx, model, gpu, names, knobs, cell_options)  # reads (and validates) the model config first
    bad = workloads.load_problem(model.path, knobs) or (
        f"model {model.source}: " + why if (why := workloads.config_problem(model.config, knobs["seq_len"]
                                                                              or shape["seq_len"])) else "")
    bad = bad or (f"model {model.source}: " + why if (why := modelref.bounds_problem(model.config)) else "")
    one_rank = ctx["one_rank"] and knobs["world_size"] > 1
    if one_rank and knobs["dist"] not in ("fsdp", "fsdp1"):
        raise MatrixError(path, f"{where}.ranks", f"{'+'.join(names)}: rank0 runs FSDP cells (fsdp, fsdp1) alone over the "
                          f"fake process group; {knobs['dist']} runs every rank")
    if mode == "cpu" and not one_rank and knobs["world_size"] > (cores := max(4, 2 * (os.cpu_count() or 1))):  # real ranks, each a process
        bad = (f"{knobs['world_size']} cpu ranks on a machine with {os.cpu_count()} cores: a cpu cell runs each rank "
               f"as a real process; at most {cores} here")
    if bad:
        raise MatrixError(path, f"{where}.techniques", f"{'+'.join(names)}: {bad}")
    ds = ctx["ds_dir"] / f"{knobs['dist']}.json"
    if (knobs["dist"] or "").startswith("zero") and not ds.is_file():
        raise MatrixError(path, f"{where}.techniques", f"{'+'.join(names)}: no DeepSpeed config {ds}")
    return {
        "cell": cell_id(model.name, gpu, names),
        "study": study,
        "baseline_cell": cell_id(model.name, gpu, ["baseline"]),
        **model.spec_fields(),
        "gpu": gpu,
        "gpu_memory_bytes": device["memory_bytes"] if device else None,
        "mode": mode,
        "techniques": names,
        "knobs": knobs,
        "options": cell_options,
        "world_size": knobs["world_size"],
        "batch_size": batch,
        "seq_len": knobs["seq_len"] or shape["seq_len"],
        "steps": shape["steps"],
        "warmup_steps": shape["warmup_steps"],
        "timeout_s": shape["timeout_s"] * knobs["world_size"],
        "seed": shape["seed"],
        "ds_config": str(ds) if (knobs["dist"] or "").startswith("zero") else None,
        "verdict_gpus": {g: ctx["gpus"][g] for g in ctx["study_gpus"]} if mode == "sim" else {},
        "skip_reason": tech.skip_reason(names, knobs, mode) or model.skip_reason,
        "inputs_sha256": inputs,
        **({"published": ctx["published"]["+".join(names)]} if "+".join(names) in ctx["published"] else {}),
        **({"one_rank": True} if one_rank else {}),
    }


def _inputs(ctx: dict, model: modelref.Model, gpu: str, names: list[str], knobs: dict, options: dict) -> dict:
    """Digests of the content of each thing the cell depends on (bench/cells/inputs.py)."""
    ds = ctx["ds_dir"] / f"{knobs['dist']}.json" if (knobs["dist"] or "").startswith("zero") else None
    used = tuple(ctx["study_gpus"]) if ctx["mode"] == "sim" else (gpu,)
    return {
        "model_config": _model_digest(ctx, model),
        "ds_config": _file_digest(ctx, ds, "DeepSpeed config") if ds else None,
        "gpus": _memo(ctx, ("gpus", used), lambda: {g: ctx["gpus"][g] for g in used}),
        "techniques": _memo(ctx, ("techniques", tuple(names)),
                            lambda: [[inputs.technique_entry(tech.lookup(n)) for n in names], knobs]),
        "options": inputs.digest(options),
    }


def _model_digest(ctx: dict, model: modelref.Model) -> str:
    """The digest of what the model is built from (its config; its code where trusted), once per load."""
    key = ("model", model.path, model.trust_remote_code)
    if key not in ctx["digests"]:
        ctx["digests"][key] = model.digest()
    return ctx["digests"][key]


def _memo(ctx: dict, key, content) -> str:
    """The digest of ``content()``, computed once per load for each key."""
    if key not in ctx["digests"]:
        ctx["digests"][key] = inputs.digest(content())
    return ctx["digests"][key]


def _file_digest(ctx: dict, file: Path, what: str) -> str:
    """The digest of a JSON input's content (read and checked once per load)."""
    if file not in ctx["digests"]:
        ctx["digests"][file] = inputs.digest(read_json(file, what))
    return ctx["digests"][file]
