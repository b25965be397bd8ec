"""Token lengths of a user's dataset, as the trainer will see them; only the lengths are kept.

    lengths, info = from_dataset("chat.jsonl", tokenizer, max_length=4096)
    lengths, info = from_file("lengths.txt", max_length=4096)     # one length a line

A dataset is a JSON Lines file (``.jsonl``), a JSON file holding a list of rows, a Parquet or Arrow
file (through pyarrow), or a Hugging Face dataset id whose train split is in the local cache
(offline, as for models). Each row is tokenized as TRL's SFTTrainer does for its
dataset types:

- ``messages`` (conversational): the tokenizer's chat template over the messages, tokenized
  (``apply_chat_template(..., tokenize=True)``);
- ``prompt`` and ``completion``: the prompt, then the completion (conversational ones each
  through the chat template, the completion's part being what the template adds after the
  prompt), with the end-of-sequence token;
- ``text``: the text tokenized, with the end-of-sequence token appended where the text lacks it.

Every length is truncated at ``max_length`` (TRL's ``max_length``); ``info`` counts the samples
truncated and the tokens cut. A file or row that cannot be read is a ``DatasetError`` naming the
file, the row and the reason, raised before anything is simulated.
"""
from __future__ import annotations

import json
from pathlib import Path

KINDS = ("messages", "prompt", "text")


class DatasetError(ValueError):
    """The dataset cannot be read: its message names the file, the row or key, and why."""


def from_file(path: str, max_length: int) -> tuple[list[int], dict]:
    """Lengths from a text file of one positive integer a line (blank lines and ``#`` comments skipped)."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read it: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            v = int(line)
        except ValueError:
            raise DatasetError(f"{path}: line {n}: {line[:40]!r} is not a length (one whole number a line)") from None
        if v < 1:
            raise DatasetError(f"{path}: line {n}: length {v}: must be 1 or more")
        out.append(v)
    if not out:
        raise DatasetError(f"{path}: no lengths in it")
    return _truncate(out, max_length, f"{path} (lengths)")


def rows(path: str) -> list[dict]:
    """The dataset's rows, each a dict."""
    p = Path(path)
    if not p.is_file():
        if not p.exists() and "/" in path and not path.startswith((".", "/")) and path.count("/") == 1:
            return _hub_rows(path)
        raise DatasetError(f"{path}: no such file")
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".arrow"):
        return _arrow_rows(p, suffix)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read it: {exc}") from None
    if suffix == ".json":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
        if not isinstance(doc, list):
            raise DatasetError(f"{path}: a JSON dataset must be a list of rows (JSON Lines: use .jsonl)")
        out = doc
    elif suffix == ".jsonl":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DatasetError(f"{path}: line {n}: not valid JSON: {exc.msg}") from None
    else:
        raise DatasetError(f"{path}: unknown dataset format {suffix or '(no suffix)'!r}: "
                           "use .jsonl, .json, .parquet or .arrow (or --lengths with one length a line)")
    for n, row in enumerate(out, 1):
        if not isinstance(row, dict):
            raise DatasetError(f"{path}: row {n}: a row must be an object, not {type(row).__name__}")
    if not out:
        raise DatasetError(f"{path}: no rows in it")
    return out


def _hub_rows(repo_id: str) -> list[dict]:
    """A Hugging Face dataset's train split from the local cache (offline, as for models)."""
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        import datasets
        from huggingface_hub import snapshot_download
        datasets.disable_progress_bars()
        # the cached snapshot's folder, loaded as a local one (datasets infers the format from its files)
        from bench.cells.modelref import _hf_cache_dir   # read from the environment now, as the model lookup does
        folder = snapshot_download(repo_id, repo_type="dataset", local_files_only=True, cache_dir=_hf_cache_dir())
        return datasets.load_dataset(folder, split="train").to_list()
    except ImportError:
        raise DatasetError(f"{repo_id}: reading a Hub dataset needs the datasets library (`pip install datasets`)") from None
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds for a dataset it cannot find offline
        first = " ".join(str(exc).split())[:200]
        raise DatasetError(f"{repo_id}: not a file, and not a dataset in the local Hugging Face cache ({first}); "
                           f"download it once (`hf download --repo-type dataset {repo_id}`) or give a file") from None


def _arrow_rows(p: Path, suffix: str) -> list[dict]:
    try:
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise DatasetError(f"{p}: reading {suffix} files needs pyarrow (`pip install pyarrow`), "
                           "or give the rows as .jsonl") from None
    try:
        if suffix == ".parquet":
            table = pyarrow.parquet.read_table(p)
        else:
            try:
                table = pyarrow.ipc.open_stream(p).read_all()   # what `datasets` writes
            except pyarrow.ArrowInvalid:
                table = pyarrow.ipc.open_file(p).read_all()
    except (OSError, pyarrow.ArrowException) as exc:
        raise DatasetError(f"{p}: cannot read it as {suffix}: {exc}") from None
    return table.to_pylist()


def kind(path: str, data: list[dict]) -> str:
    """The dataset type of the first row (every row must be of it)."""
    first = data[0]
    found = next((k for k in KINDS if k in first), None)
    if found is None:
        raise DatasetError(f"{path}: row 1: none of the keys {', '.join(KINDS)} (TRL's dataset types); "
                           f"it has {', '.join(sorted(first)) or 'none'}")
    if found == "prompt" and "completion" not in first:
        raise DatasetError(f"{path}: row 1: 'prompt' without 'completion' (a prompt-only row is no SFT sample)")
    for n, row in enumerate(data, 1):
        need = ("prompt", "completion") if found == "prompt" else (found,)
        for key in need:
            if key not in row:
                raise DatasetError(f"{path}: row {n}: no {key!r} (row 1 is a {found!r} row)")
    return found


def from_dataset(path: str, tokenizer, max_length: int) -> tuple[list[int], dict]:
    """Lengths of every row of ``path`` under ``tokenizer`` (a transformers tokenizer), truncated."""
    data = rows(path)
    k = kind(path, data)
    out = []
    for n, row in enumerate(data, 1):
        try:
            out.append(_length(tokenizer, k, row))
        except DatasetError as exc:
            raise DatasetError(f"{path}: row {n}: {exc}") from None
        except (TypeError, ValueError, KeyError) as exc:   # the template or tokenizer refused the row
            raise DatasetError(f"{path}: row {n}: the tokenizer refused it: {type(exc).__name__}: {exc}") from None
    lengths, info = _truncate(out, max_length, path)
    info["dataset_type"] = k
    return lengths, info


def _ids(x) -> list:
    """Token ids from what a tokenizer call returned (a list, or a BatchEncoding / dict)."""
    if isinstance(x, dict) or hasattr(x, "keys"):
        x = x["input_ids"]
    return list(x)


def _length(tok, k: str, row: dict) -> int:
    eos = tok.eos_token_id
    if k == "messages":
        if not isinstance(row["messages"], list) or not row["messages"]:
            raise DatasetError("'messages' must be a non-empty list of {role, content}")
        return len(_ids(_template(tok, row["messages"])))
    if k == "text":
        if not isinstance(row["text"], str):
            raise DatasetError("'text' must be a string")
        ids = _ids(tok(row["text"]))
        return len(ids) + (1 if eos is not None and (not ids or ids[-1] != eos) else 0)
    prompt, completion = row["prompt"], row["completion"]
    if isinstance(prompt, list):   # conversational prompt-completion: the whole conversation through the template
        return len(_ids(_template(tok, prompt + completion)))
    if not isinstance(prompt, str) or not isinstance(completion, str):
        raise DatasetError("'prompt' and 'completion' must both be strings or both lists of messages")
    ids = _ids(tok(prompt + completion))
    return len(ids) + (1 if eos is not None and (not ids or ids[-1] != eos) else 0)


def _template(tok, messages: list):
    if not getattr(tok, "chat_template", None):
        raise DatasetError("conversational rows need the tokenizer's chat template, and this tokenizer has none")
    return tok.apply_chat_template(messages, tokenize=True)


def _truncate(lengths: list[int], max_length: int, source: str) -> tuple[list[int], dict]:
    cut = [n - max_length for n in lengths if n > max_length]
    return [min(n, max_length) for n in lengths], {
        "source": str(source), "samples": len(lengths), "max_length": max_length,
        "truncated_samples": len(cut), "tokens_cut": sum(cut), "longest": max(lengths)}


def tokenizer(ref: str):
    """A transformers tokenizer from a local folder or the Hugging Face cache (offline, as for models)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:  # pragma: no cover - transformers is a dependency
        raise DatasetError("tokenizing a dataset needs transformers") from None
    try:
        return AutoTokenizer.from_pretrained(ref, local_files_only=True)
    except (OSError, ValueError) as exc:
        first = " ".join(str(exc).split())[:160]
        raise DatasetError(
            f"no tokenizer for {ref!r} in a local folder or the Hugging Face cache ({first}); download it "
            f"(`hf download {ref} tokenizer.json tokenizer_config.json`), give a folder with --tokenizer, "
            "or give the lengths with --lengths FILE (one a line)") from None
