"""Every path and module the tree names in its prose, comments and YAML exists (tests/test_tree_paths.py).

A path is a token under one of the tree's own folders (``bench/worker/train.py``, ``matrix/models/``); a
module is a dotted name under a package (``bench.records.checks``); either may end in an attribute
(``bench/records/checks.gate``). A path after a repository name (``huggingface/peft:docs/source/...``)
is another repository's; a pattern (``*``, ``<name>``, ``{a,b}``, an upper-case placeholder) is no path."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("bench", "report", "tests", "matrix", "docs", "profiles", ".ci")
PATH = re.compile(r"(?<![\w/.$:@-])((?:" + "|".join(re.escape(f) for f in FOLDERS) + r")/[\w./-]*[\w/])")
DOTTED = re.compile(r"(?<![\w./])((?:bench|report|tests)(?:\.[A-Za-z_]\w*)+)")
SUFFIXES = (".md", ".yaml", ".yml", ".py", ".toml")
# files whose text holds broken names on purpose (the docs checker's own examples)
EXAMPLES = {"tests/test_docs.py", "tests/test_tree_paths.py", "tests/tree_paths.py", "tests/docs_check.py"}
# the corpus cites its sources' own files (a row's notes: 'docs/source/package_reference/lora.md, ...')
SOURCES_CITED = ("matrix/published/",)


def tree_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [f for f in out if (f.endswith(SUFFIXES) or f.endswith("Snakefile")) and f not in EXAMPLES
            and not (f.startswith("results/") and not f.endswith(".md"))]


def _module_exists(parts: list[str]) -> bool:
    for k in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:k])
        if base.with_suffix(".py").exists() or (base / "__init__.py").exists() or (k == len(parts) and base.exists()):
            return k >= len(parts) - 1 or k >= 2  # a module, or a module and its attribute
    return False


def path_exists(token: str) -> bool:
    token = token.rstrip(".")
    if (ROOT / token).exists():
        return True
    head, _, last = token.rpartition("/")
    if "." in last:  # a module's attribute: bench/records/checks.gate
        stem = last.split(".", 1)[0]
        return (ROOT / head / f"{stem}.py").exists()
    return False


def problems(text: str, file: str = "") -> list[str]:
    out = []
    for m in PATH.finditer(text):
        token, after = m.group(1), text[m.end():m.end() + 1]
        if file.startswith(SOURCES_CITED) and token.startswith("docs/"):
            continue
        last = token.rstrip("/").rsplit("/", 1)[-1]
        if after in "*<{" and after or last.isupper() or last.endswith("_"):
            continue
        if not path_exists(token):
            out.append(token)
    for m in DOTTED.finditer(text):
        if not _module_exists(m.group(1).split(".")):
            out.append(m.group(1))
    return out
