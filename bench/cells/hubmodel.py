"""A Hugging Face model id made answerable: its ``config.json`` in the local Hub cache.

``fit ORG/NAME`` needs the model's config.json and nothing else (as ``accelerate
estimate-memory`` does): ``ensure_config`` puts it in the Hub cache with
``huggingface_hub.hf_hub_download(repo, "config.json")``, which uses the user's token (``HF_TOKEN``
or ``huggingface-cli login``) for gated models, and answers from the cache alone when
``HF_HUB_OFFLINE=1`` or when the Hub cannot be reached. No weights, tokenizer or code file is
fetched; a config whose ``auto_map`` names its own code is refused here unless the caller opts
into ``trust_remote_code`` (then, and only then, the ``*.py`` files ``auto_map`` names are fetched
beside it). bench/cells/modelref.py then reads the cached snapshot as it reads any cached id.

``local_name`` maps a Hub id to a model of ``matrix/models`` whose ``_source`` names the same
repository (case-insensitive; Meta's ``Meta-Llama-3.1-*`` spelling of the renamed
``Llama-3.1-*`` repositories and an ``-Instruct`` suffix, which changes no layer shape, count
as the same; ``_mirrors`` lists other repositories that hold a byte-identical copy of
the same config, as NousResearch's mirrors of Meta's gated Llama 3), so a config's ``meta-llama/Llama-3.1-8B-Instruct`` is the matrix's ``llama-3.1-8b``
with its stored records. Torch-free.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from bench.cells.modelref import MODELS_DIR, REPO_ID, ModelError, fetch_hint

CONFIG = "config.json"
HUB_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")   # the Hub's rules: ASCII, no '..' or '--', <= 96 chars


def check_id(text: str) -> None:
    """Refuse (ModelError, one line) an ``org/name[@revision]`` the Hub would refuse, before any
    library or the file system sees it: a non-ASCII, '..' or '--' name, or one too long."""
    repo_id = text.partition("@")[0]
    shown = text if len(text) <= 100 else text[:97] + "..."
    bad = [p for p in repo_id.split("/") if not HUB_PART.match(p) or ".." in p or "--" in p or p.endswith(".")]
    if len(repo_id) > 96 or bad or repo_id.count("/") != 1:
        raise ModelError(f"model {shown}: not a valid Hugging Face repository id (ORG/NAME: ASCII letters, digits, "
                         "'-', '_', '.', no '..' or '--', at most 96 characters)")


def is_hub_id(text: str) -> bool:
    """``org/name`` (optionally ``@revision``) that is not a local path."""
    text = str(text)
    try:
        exists = Path(text).expanduser().exists()
    except (OSError, ValueError):   # a name too long (or with a NUL) for a path is no local file
        exists = False
    return "/" in text.split("@")[0] and bool(REPO_ID.match(text)) and not exists \
        and not text.startswith((".", "/", "~")) and not text.endswith(".json")


def _canonical(repo_id: str) -> str:
    name = repo_id.strip().lower()
    name = re.sub(r"^meta-llama/meta-llama-3\.1-", "meta-llama/llama-3.1-", name)
    return re.sub(r"-(instruct|chat|it)$", "", name)


def local_name(repo_id: str, models_dir: Path = MODELS_DIR) -> str | None:
    """The matrix model whose ``_source`` is ``repo_id``'s repository (see the module
    docstring), else None."""
    want = _canonical(repo_id.split("@")[0])
    for path in sorted(Path(models_dir).glob("*.json")):
        try:
            data = json.loads(path.read_text())
            repos = [str(data.get("_source", "")).split("/config.json")[0].strip()]
            repos += [str(m).strip() for m in data.get("_mirrors", [])]
        except (OSError, ValueError, AttributeError, TypeError):
            continue
        if any("/" in repo and _canonical(repo) == want for repo in repos):
            return path.stem
    return None


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def reachable(timeout: float = 3.0) -> bool:
    """Whether the Hub's endpoint takes a connection within ``timeout`` s: where it does not, the
    cache alone answers at once, without huggingface_hub's retries (tens of seconds)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
        return True
    except (OSError, ValueError):
        return False


def ensure_config(text: str, trust_remote_code: bool = False) -> Path:
    """The cached config.json of the Hub id ``text`` (``org/name[@revision]``), fetched alone if
    it is not cached and the Hub may be asked. A ModelError names the id and the reason: not
    cached while offline, not found, gated without access, not valid JSON ("malformed"), or
    remote code without the opt-in."""
    check_id(text)
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        raise ModelError(f"model {text}: reading a Hugging Face id needs huggingface_hub, which is not "
                         "installed (pip install huggingface_hub), or give a config.json path") from None
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)
    repo_id, _, revision = text.partition("@")
    revision = revision or None
    try:   # the Hub's own rules for a repository id (no '..', ASCII, at most 96 characters)
        cached = try_to_load_from_cache(repo_id, CONFIG, revision=revision)
    except (ValueError, OSError) as exc:   # HFValidationError is a ValueError
        raise ModelError(f"model {text[:100]}{'...' if len(text) > 100 else ''}: not a valid Hugging Face "
                         f"repository id: {' '.join(str(exc).split())[:200]}") from None
    path = Path(cached) if isinstance(cached, str) else None
    if path is None:
        local_only = offline() or not reachable()
        try:
            path = Path(hf_hub_download(repo_id, CONFIG, revision=revision, local_files_only=local_only))
        except GatedRepoError:
            raise ModelError(f"model {text}: a gated repository and this token has no access to it: accept its "
                             "licence on huggingface.co and log in (huggingface-cli login or HF_TOKEN)") from None
        except RepositoryNotFoundError:
            raise ModelError(f"model {text}: no such repository on the Hugging Face Hub (or it is private and no "
                             "token with access is set)") from None
        except RevisionNotFoundError:
            raise ModelError(f"model {text}: no revision {revision!r} in that repository") from None
        except LocalEntryNotFoundError:
            why = "HF_HUB_OFFLINE is set" if offline() else "the Hub cannot be reached"
            raise ModelError(f"model {text}: its config.json is not in the Hugging Face cache and {why} "
                             f"({fetch_hint(repo_id, revision)})") from None
        except EntryNotFoundError:  # after its Local subclass
            raise ModelError(f"model {text}: the repository holds no config.json") from None
        except (OSError, ValueError) as exc:
            raise ModelError(f"model {text}: fetching its config.json failed: {exc}") from None
    check_config(path, text, trust_remote_code)
    if trust_remote_code:
        _fetch_code(repo_id, revision, path)
    return path


def check_config(path: Path, text: str, trust_remote_code: bool) -> dict:
    """The config at ``path``, refused with the reason where it is not one: malformed JSON, not
    an object, no model_type, or its own code (``auto_map``) without the opt-in."""
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"model {text}: cannot read {path}: {exc}") from None
    except ValueError as exc:
        raise ModelError(f"model {text}: malformed config.json ({path}): not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ModelError(f"model {text}: malformed config.json ({path}): a JSON object is needed, "
                         f"not {type(config).__name__}")
    if config.get("auto_map") and not trust_remote_code:
        raise ModelError(f"model {text}: its config.json names its own code (auto_map: "
                         f"{sorted(config['auto_map'])}), which runs only with --trust-remote-code")
    return config


def _fetch_code(repo_id: str, revision: str | None, config_path: Path) -> None:
    """The ``*.py`` modules a trusted config's ``auto_map`` names, beside it in the snapshot."""
    from huggingface_hub import hf_hub_download
    config = json.loads(config_path.read_text())
    refs = (config.get("auto_map") or {}).values()
    modules = {str(r).split("--")[-1].split(".")[0] for r in refs if isinstance(r, str)}
    for module in sorted(modules):
        try:
            hf_hub_download(repo_id, f"{module}.py", revision=revision, local_files_only=offline())
        except Exception as exc:  # noqa: BLE001 - any failure is the user's to read, in one line
            raise ModelError(f"model {repo_id}: its code {module}.py (auto_map) cannot be fetched: {exc}") from None
