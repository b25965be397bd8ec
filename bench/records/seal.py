"""Seals: a results file is what was written, or no answer is built from it. Torch-free.

A record gate (bench/records/checks.py, agreement.py) re-derives what it can from a record's own fields,
so a number edited alone contradicts the others; one edited together with the fields it follows from
would still pass. A seal closes that:

- a JSON document the harness writes (a cell's record, bench/conftest.py; the fit command's own records
  and searches, bench/fit/answer.py) carries ``"seal": {"sha256": ...}``, the sha256 of its canonical JSON
  without that key (``canonical``). ``doc_state``: sealed, unsealed (written before seals, or by hand) or
  edited (the content is not what was sealed);
- a published folder (``results/reference/``) is sealed whole by a manifest, ``SEALS.sha256``, in
  sha256sum's format (``cd results/reference && sha256sum -c SEALS.sha256`` checks it too), written when
  the reference is published (``python -m bench.records.seal manifest results/reference``). Every file
  under it but the manifest and its README is listed; a file there that is not listed, or not as listed,
  is refused.

``problem(path, doc)`` is what a reader asks: why this file must not be used (an edited sealed document;
under a manifest, a file edited or added after it), or None. An unsealed document outside a manifest is
used: the fit command names it so in where its answer came from (``label``).

    python -m bench.records.seal manifest results/reference    # write SEALS.sha256 over the folder
    python -m bench.records.seal check results/reference       # exit 1 naming each file not as sealed
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
from pathlib import Path

KEY = "seal"
MANIFEST = "SEALS.sha256"
UNLISTED = (MANIFEST, "README.md")   # what a manifest does not seal: itself and the folder's prose


def canonical(doc: dict) -> bytes:
    """The document less its seal, as sorted, compact JSON (what the seal's sha256 is of)."""
    body = {k: v for k, v in doc.items() if k != KEY}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sealed(doc: dict) -> dict:
    """``doc`` with its seal."""
    return {**{k: v for k, v in doc.items() if k != KEY},
            KEY: {"sha256": hashlib.sha256(canonical(doc)).hexdigest(),
                  "of": "this document without its seal, as JSON with sorted keys and no spaces"}}


def doc_state(doc) -> str:
    """'sealed', 'unsealed' or 'edited'."""
    if not isinstance(doc, dict) or not isinstance(doc.get(KEY), dict) or not isinstance(doc[KEY].get("sha256"), str):
        return "unsealed"
    return "sealed" if hashlib.sha256(canonical(doc)).hexdigest() == doc[KEY]["sha256"] else "edited"


def file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_of(path: Path) -> Path | None:
    """The manifest sealing ``path``: ``SEALS.sha256`` in one of its folders, nearest first."""
    for folder in Path(path).resolve().parents:
        if (folder / MANIFEST).is_file():
            return folder / MANIFEST
    return None


def read_manifest(manifest: Path) -> dict[str, str]:
    """{path relative to the manifest's folder: sha256}, parsed once per version of the file (a lookup per
    record would otherwise parse the whole manifest each time); a rewritten manifest is read again."""
    st = Path(manifest).stat()
    return dict(_parsed(str(Path(manifest).resolve()), st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=8)
def _parsed(manifest: str, mtime_ns: int, size: int) -> tuple:
    out = []
    for line in Path(manifest).read_text().splitlines():
        if line.strip():
            sha, _, name = line.partition("  ")
            out.append((name, sha))
    return tuple(out)


def listed(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name not in UNLISTED)


def write_manifest(folder: Path) -> Path:
    folder = Path(folder)
    lines = [f"{file_sha(p)}  {p.relative_to(folder).as_posix()}" for p in listed(folder)]
    out = folder / MANIFEST
    out.write_text("\n".join(lines) + "\n")
    return out


def problem(path, doc=None, published: Path | None = None) -> str | None:
    """Why the file at ``path`` (``doc``: its parsed JSON, if it is a document) must not be used, or None.
    ``published``: a folder that must be sealed by a manifest (the reference): a file in it without one is
    refused, so that removing the manifest does not pass an edit."""
    path = Path(path)
    manifest = manifest_of(path)
    if manifest is None and published is not None and Path(published).resolve() in path.resolve().parents:
        return (f"{path}: the published folder {published} has no {MANIFEST} (python -m bench.records.seal "
                f"manifest {published} seals it when it is published)")
    if manifest is not None:
        name = path.resolve().relative_to(manifest.parent).as_posix()
        sha = read_manifest(manifest).get(name)
        if sha is None:
            return f"{path}: not among the files {manifest} seals (added after it was published)"
        if file_sha(path) != sha:
            return f"{path}: edited after it was sealed ({manifest} holds another sha256 for it)"
        return None
    if doc is not None and doc_state(doc) == "edited":
        return f"{path}: edited after it was written (its seal is not its content's sha256)"
    return None


def label(path, doc=None) -> str:
    """' (unsealed)' for a document that carries no seal and no manifest seals, else ''."""
    return " (unsealed)" if manifest_of(Path(path)) is None and doc is not None and doc_state(doc) == "unsealed" else ""


def check(folder: Path) -> list[str]:
    """Every file under ``folder`` its manifest does not seal as it is, and every listed file gone."""
    folder = Path(folder)
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return [f"{manifest}: no manifest (python -m bench.records.seal manifest {folder})"]
    out = [why for p in listed(folder) if (why := problem(p))]
    out += [f"{folder / name}: listed in {manifest} but gone" for name in read_manifest(manifest)
            if not (folder / name).is_file()]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.records.seal", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["manifest", "check"])
    ap.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    if args.action == "manifest":
        out = write_manifest(args.folder)
        print(f"{out}: {len(read_manifest(out))} files sealed")
        return 0
    bad = check(args.folder)
    for line in bad:
        print(line, file=sys.stderr)
    print(f"{args.folder}: {'every file as sealed' if not bad else f'{len(bad)} file(s) not as sealed'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
