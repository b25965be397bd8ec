"""What a model argument names: the one resolver of models, for the matrix and the command line.

A model is given as
  * a name in the models folder (``matrix/models/<name>.json``, published config.json values),
  * a local path to a ``config.json`` (any ``*.json``) or to a folder holding one,
  * a Hugging Face model id (``org/name``, optionally ``@revision``) found in the local Hugging
    Face cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``);
    nothing is downloaded.

    >>> name, config, source = resolve("Qwen/Qwen3-30B-A3B")

``resolve`` returns a ``Model`` (it unpacks as ``(name, config, source)``; ``.path`` is the
config file the worker reads, ``.spec_fields()`` what a cell spec needs). ``name`` is a slug
of ``[a-z0-9.-]`` fit for a cell id. Every problem is a ``ModelError`` whose one-line message
names the model and what is wrong: unknown, unreadable JSON, no ``model_type``, a config
transformers cannot read, code that needs ``trust_remote_code`` without the opt-in.

Torch-free: whether transformers can read a config is asked of a subprocess
(``python -m bench.worker.configcheck``, about 3 s of imports) once per config content and
transformers version; the answer is cached under ``$FT_MEMBENCH_CACHE/config-check/``.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import home
from bench.records import atomic
from bench.cells import inputs

ROOT = home.root()  # the checkout, or $FT_MEMBENCH_HOME for an installed wheel
MODELS_DIR = ROOT / "matrix" / "models"
CACHE = Path(os.environ.get("FT_MEMBENCH_CACHE", ROOT / "results" / "cache")) / "config-check"
REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?(@[\w./-]+)?$")
SLUG = re.compile(r"^[a-z0-9.-]+$")


class ModelError(ValueError):
    """A model argument that cannot be used: the message is one line naming it and why."""


@dataclass(frozen=True)
class Model:
    name: str                 # slug for cell ids and file names
    config: dict              # the config.json content
    source: str               # where it came from, in words
    path: Path                # the config file the worker reads
    trust_remote_code: bool = False
    causal_lm: str | None = None   # transformers' causal-LM class for it; None: not checked, or none
    skip_reason: str = ""     # why no cell of it can run ('' when they can)

    def __iter__(self):  # name, config, source = resolve(...)
        return iter((self.name, self.config, self.source))

    def spec_fields(self) -> dict:
        """What a cell spec carries of the model (the worker builds it from these)."""
        return {"model": self.name, "model_config": str(self.path),
                **({"trust_remote_code": True} if self.trust_remote_code else {})}

    def digest(self) -> str:
        """Digest of what the model is built from: the config, and its own code where trusted."""
        if not self.trust_remote_code:
            return inputs.digest(self.config)
        code = {p.name: inputs.digest(p.read_text()) for p in sorted(self.path.parent.glob("*.py"))}
        return inputs.digest({"config": self.config, "code": code})


def resolve(name_or_path, trust_remote_code: bool = False, *, models_dir=MODELS_DIR, base=None,
            check: bool = True) -> Model:
    """The model ``name_or_path`` names (see the module docstring). ``base``: the folder a
    relative path is taken from (default: the working directory). ``check``: ask transformers
    whether it reads the config (``check_all`` does many at once)."""
    text = str(name_or_path).strip()
    if not text:
        raise ModelError("model: empty name")
    models_dir = Path(models_dir)
    builtin = models_dir / f"{text}.json"
    path = Path(text).expanduser()
    path = path if path.is_absolute() else Path(base or Path.cwd()) / path
    if SLUG.match(text) and builtin.is_file():
        model = _from_file(builtin, text, f"{builtin}", trust_remote_code)
    elif path.exists():
        model = _from_path(text, path, trust_remote_code)
    elif text.endswith(".json") or text.startswith((".", "/", "~")):
        raise ModelError(f"model {text}: no such file or folder ({path})")
    elif REPO_ID.match(text):
        model = _from_hf_cache(text, trust_remote_code, models_dir)
    else:
        raise ModelError(f"model {text!r}: not a name in {models_dir} ({_known(models_dir)}), "
                         "a config.json path, nor a Hugging Face id")
    return check_all([model])[0] if check else model


def check_all(models: list[Model]) -> list[Model]:
    """``models`` with transformers' answer on each config: a ModelError for the first one it
    cannot read, else each with its causal-LM class (or the reason it has none)."""
    version = _transformers_version()
    keys = [check_key(m, version) for m in models]
    answers = {k: _cached(k) for k in keys}
    todo = [(k, m) for k, m in zip(keys, models) if answers[k] is None]
    if todo:
        fresh = _ask_transformers([m for _, m in todo])
        for (k, _), answer in zip(todo, fresh):
            answers[k] = answer
            _store(k, answer)
    out = []
    for k, m in zip(keys, models):
        answer = answers[k]
        if not answer["ok"]:
            raise ModelError(f"model {m.source}: {answer['error']}")
        out.append(Model(m.name, m.config, m.source, m.path, m.trust_remote_code,
                         causal_lm=answer["causal_lm"], skip_reason=answer.get("why", "")))
    return out


def check_key(m: Model, version: str) -> str:
    """The config-check cache key: the config's content, the transformers version and, for a
    model with its own code, the folder it is read from (its code imports what lies beside it,
    beyond the *.py files the digest covers), so one folder's answer never answers another's."""
    key = {"model": m.digest(), "trust": m.trust_remote_code, "transformers": version}
    if m.trust_remote_code:
        key["folder"] = str(Path(m.path).parent.resolve())
    return inputs.digest(key)


def slug(text: str) -> str:
    """A cell-id-safe name for ``text``: lower case, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "model"


def _known(models_dir: Path) -> str:
    names = ", ".join(sorted(p.stem for p in models_dir.glob("*.json")))
    return f"known: {names}" if names else "none there"


def _from_path(text: str, path: Path, trust: bool) -> Model:
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise ModelError(f"model {text}: folder {path} holds no config.json")
    folder = file.parent
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        name = folder.parent.parent.name.split("--")[-1]   # a snapshot in a Hugging Face cache
    else:
        name = folder.name if file.name == "config.json" else file.stem
    return _from_file(file, slug(name), str(file), trust)


def fetch_hint(repo_id: str, revision: str | None = None) -> str:
    """How to get a config.json answered here: the Hub CLI that is installed (huggingface_hub
    1.x ships ``hf``, older ones ``huggingface-cli``), for an ORG/NAME id only, or a path to the file."""
    import shutil
    import sys
    path = "or pass the path of a config.json (or of its folder) as the model"
    if "/" not in repo_id:
        return f"{repo_id} is not a Hugging Face id (ORG/NAME): name a model of matrix/models, {path}"
    cli = next((c for c in ("hf", "huggingface-cli")
                if shutil.which(c) or (Path(sys.executable).parent / c).is_file()), None)
    rev = f" --revision {revision}" if revision else ""
    how = f"`{cli} download {repo_id} config.json{rev}`" if cli else \
        f"`python -c \"import huggingface_hub as h; h.hf_hub_download('{repo_id}', 'config.json'" + \
        (f", revision='{revision}'" if revision else "") + ")\"`"
    return f"{how} fetches it alone, {path}"


def _from_hf_cache(text: str, trust: bool, models_dir: Path) -> Model:
    repo_id, _, revision = text.partition("@")
    file = _hf_cached_config(repo_id, revision or "main")
    if file is None:
        raise ModelError(f"model {text}: not a name in {models_dir} ({_known(models_dir)}), not a file or "
                         f"folder, and not in the local "
                         f"Hugging Face cache ({_hf_cache_dir()}; offline, nothing is downloaded: "
                         f"{fetch_hint(repo_id, revision)})")
    rev = file.parent.name
    return _from_file(file, slug(repo_id.split("/")[-1]), f"{repo_id}@{rev[:12]} (Hugging Face cache: {file})", trust)


def _from_file(file: Path, name: str, source: str, trust: bool) -> Model:
    try:
        config = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"model {source}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ModelError(f"model {source}: not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ModelError(f"model {source}: a model config must be a JSON object, not {type(config).__name__}")
    if not isinstance(config.get("model_type"), str):
        raise ModelError(f"model {source}: model_type missing: transformers needs it to build the architecture")
    return Model(name, config, source, file.resolve() if not _in_hf_cache(file) else file.absolute(), trust)


def _in_hf_cache(file: Path) -> bool:
    """A snapshot file is a link into blobs/: keep the snapshot path (its code lies beside it)."""
    return file.parent.parent.name == "snapshots"


def _hf_cache_dir() -> Path:
    """Where huggingface_hub keeps its cache (its documented variables, in its order)."""
    env = os.environ
    if env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env.get("HF_HUB_CACHE") or env["HUGGINGFACE_HUB_CACHE"]).expanduser()
    home = env.get("HF_HOME") or Path(env.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface"
    return Path(home).expanduser() / "hub"


def _hf_cached_config(repo_id: str, revision: str) -> Path | None:
    """config.json of ``repo_id`` at ``revision`` (a branch, tag or commit) in the cache, else
    None: the cache layout huggingface_hub documents, ``models--<org>--<name>/refs/<revision>``
    holding a commit and ``snapshots/<commit>/config.json``."""
    repo = _hf_cache_dir() / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    file = repo / "snapshots" / commit / "config.json"
    return file if file.is_file() else None


def _transformers_version() -> str:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        raise ModelError("transformers is not installed: models are built from its classes") from None


def _cached(key: str) -> dict | None:
    try:
        return json.loads((CACHE / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None


def _store(key: str, answer: dict) -> None:
    try:
        atomic.write_json(CACHE / f"{key}.json", answer)
    except OSError:
        pass  # a read-only cache only costs the next load another check


def _ask_transformers(models: list[Model]) -> list[dict]:
    request = [{"path": str(m.path), "trust_remote_code": m.trust_remote_code} for m in models]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.run([sys.executable, "-m", "bench.worker.configcheck"], input=json.dumps(request),
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.split()[-40:])
        raise ModelError(f"model {models[0].source}: the transformers check failed ({tail})")
    return json.loads(proc.stdout)


def bounds_problem(config: dict) -> str:
    """What bench/cells/workloads.config_problem leaves to the loader ('' when nothing): a model
    without a vocabulary (the step's token sampler fails cryptically), or a rotary base or norm
    epsilon that is infinite (the step trains nothing: every output uniform)."""
    cfg = config.get("text_config", config) if isinstance(config.get("text_config"), dict) else config
    vocab = cfg.get("vocab_size")
    if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab < 1:
        return f"vocab_size is {vocab}: a model without a vocabulary has no tokens to train on"
    for key in ("rope_theta", "rms_norm_eps", "layer_norm_eps"):
        v = cfg.get(key)
        if isinstance(v, float) and v in (float("inf"), float("-inf")):
            return f"{key} is {v}: it must be finite (an infinite epsilon or base trains nothing)"
    return ""
