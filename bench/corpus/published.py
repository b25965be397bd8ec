"""Load the corpus of published GPU memory measurements (matrix/published/corpus.yaml).

Torch-free. The corpus is validated through its types (bench/corpus/row.py, from which corpus.schema.json is
generated), then across fields:

- ``model_config`` names a file in matrix/models (``<name>.json``);
- ``gpu_profile`` is a CUDA profile of matrix/gpus.yaml;
- ``techniques`` parse with bench.cells.techniques.knobs (a combination our tool can run);
- ids are unique;
- ``value_gib`` agrees with ``value`` and ``unit`` within 0.5%;
- ``gap`` (only on a row that is not simulated: ``source``, ``ours`` or ``both``) agrees with
  ``lacks_source`` (what the source leaves out) and ``lacks_ours`` (what ft-membench lacks);
- only a ``held-out`` row carries ``first_score`` (a development row was seen while the model
  was built, so its first score says nothing out of sample).

Every row has a ``role`` (``ROLES``): ``development``, seen while the model was built or
calibrated, or ``held-out``, added after and never used to change the model. A held-out row
enters with its first score (``first_score``: error_pct, verdict, engine_digest, date),
written once by ``python -m bench.corpus.scoreboard --record-first-scores`` and never
rewritten, so a later change of the model shows the first score beside today's. Our own GPU
measurements enter the same way: ``source: ft-membench cuda run`` (or ``ft-membench cuda run:
<results path>``), ``source_kind: own-run``.

Every problem is a ``PublishedError`` (a ``MatrixError``: ``file: key: reason``) whose key names
the row by id and the field, e.g. ``rows[tt-8b-lora-4090].gpu_profile``. A key written twice in
one YAML mapping is refused too: the second would silently replace a published figure.

    >>> rows = load()          # [row.Row, ...] in file order: rows[0].gpu_profile, rows[0].model_config_name
"""
from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from bench import home
from bench.cells import techniques as tech
from bench.cells.matrixfile import SAFE_LOADER, MatrixError, one_line
from bench.corpus.row import Corpus, Row

ROOT = home.root()  # the checkout, or $FT_MEMBENCH_HOME for an installed wheel
DEFAULT = ROOT / "matrix" / "published" / "corpus.yaml"
MODELS_DIR = ROOT / "matrix" / "models"
GPUS_FILE = ROOT / "matrix" / "gpus.yaml"

GIB = 2**30
UNIT_BYTES = {"GiB": GIB, "GB": 10**9, "MiB": 2**20, "MB": 10**6, "bytes": 1}
TOLERANCE = 0.005  # value_gib against value x unit
ROLES = ("development", "held-out")
OWN_RUN = "ft-membench cuda run"


class PublishedError(MatrixError):
    """The corpus is wrong: the message names the file, the row (by id) and the key."""


class _UniqueKeyLoader(SAFE_LOADER):
    """YAML's safe loader, refusing a mapping that writes one key twice."""


def _mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def gib(value: float, unit: str) -> float:
    """``value`` written in ``unit`` (as a source writes it), in GiB."""
    return value * UNIT_BYTES[unit] / GIB


def load(path=DEFAULT, *, models_dir=MODELS_DIR, gpus_file=GPUS_FILE) -> list[Row]:
    """The corpus rows at ``path``, validated; PublishedError on the first problem."""
    path = Path(path)
    doc = _read(path)
    rows = _typed(path, doc).rows
    models = {p.stem for p in Path(models_dir).glob("*.json")}
    gpus = _gpu_profiles(gpus_file)
    seen: dict[str, int] = {}
    for i, row in enumerate(rows):
        where = f"rows[{row.id}]"
        if row.id in seen:
            raise PublishedError(path, f"{where}.id", f"duplicate id (rows {seen[row.id]} and {i})")
        seen[row.id] = i
        _check_row(path, where, row, models, gpus)
    return rows


def _read(path: Path):
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise PublishedError(path, "", "no such corpus file") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise PublishedError(path, "", f"not valid YAML (safe subset, no duplicate keys): {one_line(exc)}") from None


def _typed(path: Path, doc) -> Corpus:
    """``doc`` through the corpus's types (bench/corpus/row.py); the first problem as ``rows[<id>].<field>: reason``."""
    try:
        return Corpus.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
    parts = list(err["loc"])
    if len(parts) >= 2 and parts[0] == "rows" and isinstance(parts[1], int):
        row = doc["rows"][parts[1]]
        rid = row.get("id") if isinstance(row, dict) else None
        label = f"rows[{rid}]" if isinstance(rid, str) and rid else f"rows[{parts[1]}]"
        parts = [label, *parts[2:]]
    key = ".".join(map(str, parts))
    if err["type"] == "missing":
        raise PublishedError(path, key, "a required key is missing")
    got = err.get("input")
    said = f" (it is {got!r})" if not isinstance(got, (dict, list)) else ""
    raise PublishedError(path, key, one_line(err["msg"]) + said)


def _gpu_profiles(gpus_file) -> set[str]:
    """The CUDA profiles of ``gpus_file``: a published GPU figure cannot be the host CPU's."""
    try:
        doc = yaml.load(Path(gpus_file).read_text(), Loader=SAFE_LOADER) or {}
    except FileNotFoundError:
        raise PublishedError(gpus_file, "", "no such gpus file") from None
    return {name for name, prof in doc.items() if isinstance(prof, dict) and prof.get("kind") == "cuda"}


def _check_row(path: Path, where: str, row: Row, models: set, gpus: set) -> None:
    if row.first_score is not None and row.role != "held-out":
        raise PublishedError(path, f"{where}.first_score",
                             f"only a held-out row carries a first score (this row's role is {row.role})")
    name = row.model_config_name
    if name is not None and name not in models:
        raise PublishedError(path, f"{where}.model_config",
                             f"no matrix/models/{name}.json (known: {', '.join(sorted(models))})")
    profile = row.gpu_profile
    if profile is not None and profile not in gpus:
        raise PublishedError(path, f"{where}.gpu_profile",
                             f"unknown gpu profile {profile!r} (known CUDA profiles: {', '.join(sorted(gpus))})")
    if row.techniques is not None:
        try:
            tech.knobs(row.techniques.split("+"))
        except (KeyError, ValueError) as exc:
            raise PublishedError(path, f"{where}.techniques", one_line(exc.args[0] if exc.args else exc)) from None
    _check_gap(path, where, row)
    want = gib(row.value, row.unit)
    if abs(row.value_gib - want) > TOLERANCE * want:
        raise PublishedError(path, f"{where}.value_gib",
                             f"{row.value_gib} disagrees with {row.value} {row.unit} = {want:.4f} GiB (more than 0.5%)")


GAPS = {"source": (True, False), "ours": (False, True), "both": (True, True)}  # gap: (lacks_source, lacks_ours)


def _check_gap(path: Path, where: str, row: Row) -> None:
    """``gap`` agrees with its two lists: source names only what the source leaves out, ours only
    what we lack, both names each; the lists never stand without a gap."""
    gap = row.gap
    lists = {"lacks_source": row.lacks_source, "lacks_ours": row.lacks_ours}
    if gap is None:
        for key, items in lists.items():
            if items:
                raise PublishedError(path, f"{where}.{key}", "set without a gap (source, ours or both)")
        return
    for key, want in zip(lists, GAPS[gap]):
        if bool(lists[key]) != want:
            raise PublishedError(path, f"{where}.{key}",
                                 f"gap {gap} {'needs' if want else 'takes no'} {key} (it is {lists[key] or 'empty'})")
