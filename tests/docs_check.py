"""What README.md and docs/*.md name must exist: the checker behind tests/test_docs.py.

`problems(text, doc)` reads one markdown text and returns one line per thing it names that
does not exist: a `python -m` module (found by its file in the repo, else `find_spec`) or a
flag its `--help` does not list; an `ft-membench` subcommand, flag, GPU or technique the CLI's
parser and the catalogue do not know; a `snakemake` target that is neither a rule nor an output
the Snakefile names, or a flag `snakemake --help` lacks; a `pytest` path, flag or `-k` word
that matches nothing; a `pip` constraints file or extra; a repo path in the prose; a technique
combination, cell id, study name or matrix key; a relative link. Commands are the lines of
shell code blocks and inline code spans that start with one of COMMANDS. Nothing is simulated:
the only programs run are `--help` of the parent-side modules, of snakemake and of pytest.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("python -m ", "ft-membench ", "snakemake ", "pytest", "pip install ", ".ci/")
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}
REPO_PATH = re.compile(r"(?<![\w/.<-])((?:bench|report|matrix|tests|docs|profiles|results/reference|\.ci)/[\w.+/*<>:-]*)")
PLACEHOLDER = re.compile(r"[<>*]|\.\.\.|\b[A-Z]{2,}\b")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
COMBINATION = re.compile(r"[a-z][a-z0-9.-]*(\+[a-z][a-z0-9.-]*)+")
CELL_ID = re.compile(r"([a-z0-9.-]+)__([a-z0-9.-]+)__([a-z0-9.+-]+)")
STUDY = re.compile(r"(?:[Ss]tudy|[Ss]tudies)\s+`([a-z0-9.-]+)`|`([a-z0-9.-]+)`\s+study")
DOTTED = re.compile(r"(?:bench|report)(?:\.\w+)+")
YAML_KEY = re.compile(r"([a-z_]+):(?: .*)?")
VALUE_FLAGS = {"snakemake": {"--cores", "-c", "--jobs", "-j", "--profile"},
               "pytest": {"-k", "-m", "-p", "-n", "--dist", "--matrix", "--cell", "--cell-out", "--benchmark-json"}}


def run_help(*argv: str) -> str:
    """stdout+stderr of `python <argv> --help` in the repo root; '' if it fails."""
    out = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return out.stdout + out.stderr if out.returncode == 0 else ""


@functools.cache
def help_flags(*argv: str) -> frozenset[str] | None:
    text = run_help(*argv)
    return frozenset(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", text)) if text else None


def module_file(module: str) -> Path | None:
    """The repo file `python -m module` runs, or None if the module is not the repo's."""
    base = ROOT.joinpath(*module.split("."))
    if not (ROOT / module.split(".")[0]).is_dir():
        return None
    for path in (base.with_suffix(".py"), base / "__main__.py"):
        if path.is_file():
            return path
    return base  # the repo's package, but no such module: the caller reports it


def worker_side(module: str) -> bool:
    """Modules of the worker process import torch: named, found, but not run here."""
    return "worker" in module.split(".")


def cli_module() -> str:
    """The module behind the `ft-membench` script (pyproject.toml's [project.scripts])."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["ft-membench"].partition(":")[0]


@functools.cache
def facts() -> dict:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    snakefile = (ROOT / "Snakefile").read_text()
    matrices = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "matrix").glob("*.yaml"))]
    catalogue = next(p for p in sorted((ROOT / "bench").rglob("*.py"))
                     if "def lookup(" in p.read_text() and "def knobs(" in p.read_text())
    return {
        "cli": importlib.import_module(cli_module()).parser(),
        "techniques": importlib.import_module(".".join(catalogue.relative_to(ROOT).with_suffix("").parts)),
        "rules": set(re.findall(r"^rule (\w+):", snakefile, re.M)),
        "snakefile": snakefile,
        "extras": set(project.get("optional-dependencies", {})),
        "gpus": set(yaml.safe_load((ROOT / "matrix/gpus.yaml").read_text()) or {}),
        "models": {p.stem for p in (ROOT / "matrix/models").glob("*.json")},
        "studies": {s for m in matrices if isinstance(m, dict) for s in (m.get("studies") or {})},
        "yaml": "\n".join(p.read_text() for d in ("matrix", "profiles") for p in sorted((ROOT / d).rglob("*.yaml"))),
        "python": "\n".join(p.read_text() for p in sorted((ROOT / "bench").rglob("*.py"))),
        "selectable": "\n".join([p.read_text() for p in sorted((ROOT / "matrix").rglob("*.yaml"))]
                                + [p.read_text() for p in sorted(ROOT.glob("bench/**/test_*.py"))]),
    }


def fenced_commands(text: str) -> list[str]:
    """Lines of the shell code blocks, comments and blank lines dropped."""
    out, fence = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            fence = line[3:].strip() if fence is None else None
            continue
        if fence in SHELL_FENCES and line.strip():
            out.append(re.sub(r"(^|\s)#.*", "", line).strip())
    return [c for c in out if c]


def prose(text: str) -> str:
    """The text outside code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def inline_spans(text: str) -> list[str]:
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", prose(text))]


def commands(text: str) -> list[str]:
    return fenced_commands(text) + [s for s in inline_spans(text) if s.startswith(COMMANDS)]


def words(command: str) -> list[list[str]]:
    """The simple commands of one line, each as tokens; optional `[...]` brackets dropped."""
    out = []
    for part in re.split(r"&&|\|\||[|;]", command):
        try:
            tokens = shlex.split(part)
        except ValueError:
            tokens = part.split()
        tokens = [t.strip("[]") for t in tokens if t.strip("[]")]
        while tokens and re.fullmatch(r"\w+=\S*", tokens[0]):
            tokens = tokens[1:]
        if tokens:
            out.append(tokens)
    return out


def placeholder(token: str) -> bool:
    return bool(PLACEHOLDER.search(token))


def positionals(args: list[str], value_flags: set[str]) -> tuple[list[str], dict[str, str]]:
    """(positional arguments, {flag: value}) of a command's arguments."""
    pos, values, i = [], {}, 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-"):
            flag, eq, value = arg.partition("=")
            if flag in value_flags and not eq and i + 1 < len(args):
                values[flag], i = args[i + 1], i + 1
            elif eq:
                values[flag] = value
        elif "=" not in arg:
            pos.append(arg)
        i += 1
    return pos, values


def flags(args: list[str]) -> list[str]:
    return [a.partition("=")[0] for a in args if re.match(r"--?[A-Za-z]", a)]


def check_techniques(combination: str) -> list[str]:
    out = []
    for name in combination.split("+"):
        try:
            facts()["techniques"].lookup(name)
        except (KeyError, ValueError) as exc:
            out.append(f"technique {name!r} of {combination!r}: {exc}")
    return out


def check_module(module: str, args: list[str]) -> list[str]:
    path = module_file(module)
    if path is None:
        return [] if importlib.util.find_spec(module.split(".")[0]) else [f"no module {module!r}"]
    if not path.is_file():
        return [f"no module {module!r} (no {path.relative_to(ROOT)}.py)"]
    if worker_side(module):
        return []
    known = help_flags("-m", module)
    if known is None:
        return [f"`python -m {module} --help` fails"]
    return [f"`python -m {module}` has no flag {f}" for f in flags(args) if f not in known]


def check_cli(args: list[str]) -> list[str]:
    ap = facts()["cli"]
    subs = next(a for a in ap._actions if a.choices and hasattr(a, "_name_parser_map")).choices
    if not args or args[0] not in subs:
        return [f"ft-membench has no subcommand {args[:1]} (it has {sorted(subs)})"] if args and args[0] != "--help" else []
    sub = subs[args[0]]
    known = {s for a in sub._actions for s in a.option_strings}
    out = [f"`ft-membench {args[0]}` has no flag {f}" for f in flags(args[1:]) if f not in known]
    pos, values = positionals(args[1:], {s for a in sub._actions if a.nargs != 0 for s in a.option_strings})
    gpu = values.get("--gpu", "")
    if gpu and not placeholder(gpu) and gpu.lower() not in facts()["gpus"]:
        out.append(f"no GPU profile {gpu!r} in matrix/gpus.yaml")
    for combo in filter(None, values.get("--techniques", "").split(",")):
        out += check_techniques(combo)
    for model in pos[:1]:
        if not placeholder(model) and "/" not in model and model not in facts()["models"]:
            out.append(f"no model {model!r} in matrix/models/")
    return out


def check_snakemake(args: list[str]) -> list[str]:
    known = help_flags("-m", "snakemake")
    out = [] if known is None else [f"snakemake has no flag {f}" for f in flags(args) if f not in known]
    pos, values = positionals(args, VALUE_FLAGS["snakemake"])
    if "--profile" in values and not (ROOT / values["--profile"]).is_dir():
        out.append(f"no snakemake profile {values['--profile']}")
    for target in pos:
        if target not in facts()["rules"] and f'"{target}"' not in facts()["snakefile"]:
            out.append(f"snakemake target {target!r} is no rule and no output named in the Snakefile")
    return out


def check_pytest(args: list[str]) -> list[str]:
    pos, values = positionals(args, VALUE_FLAGS["pytest"])
    dirs = sorted({(p if (ROOT / p).is_dir() else str(Path(p).parent)) for p in (q.split("::")[0] for q in pos)
                   if (ROOT / p).exists()})
    known = help_flags("-m", "pytest", "-p", "no:cacheprovider", *dirs)
    out = [] if known is None else [f"pytest has no flag {f}" for f in flags(args) if f not in known]
    for path in pos:
        if not (ROOT / path.split("::")[0]).exists():
            out.append(f"pytest path {path} does not exist")
    if "--matrix" in values and not (ROOT / values["--matrix"]).is_file():
        out.append(f"no matrix file {values['--matrix']}")
    for word in re.findall(r"[\w.-]+", values.get("-k", "")):
        if word not in ("and", "or", "not") and word not in facts()["selectable"]:
            out.append(f"`pytest -k {word}` matches no study, cell or benchmark")
    return out


def check_pip(args: list[str]) -> list[str]:
    out = []
    pos, values = positionals(args, {"-c", "-r", "--index-url", "-e"})
    for flag in ("-c", "-r"):
        if flag in values and not (ROOT / values[flag]).is_file():
            out.append(f"pip {flag} {values[flag]}: no such file")
    for extra in re.findall(r"^\.\[([\w,]+)\]$", values.get("-e", "")):
        out += [f"no extra [{e}] in pyproject.toml" for e in extra.split(",") if e not in facts()["extras"]]
    return out


def check_command(tokens: list[str]) -> list[str]:
    prog, args = tokens[0], tokens[1:]
    if prog in ("python", "python3") and args[:1] == ["-m"] and len(args) > 1:
        return check_pytest(args[2:]) if args[1] == "pytest" else check_module(args[1], args[2:])
    if prog == "ft-membench":
        return check_cli(args)
    if prog == "snakemake":
        return check_snakemake(args)
    if prog == "pytest":
        return check_pytest(args)
    if prog == "pip" and args[:1] == ["install"]:
        return check_pip(args[1:])
    if prog.startswith((".ci/", "./")) and not (ROOT / prog).exists():
        return [f"no program {prog}"]
    return []


def check_dotted(name: str) -> list[str]:
    """`bench.launch.run_cell`: the longest prefix that is a repo module, and the rest defined in it."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:i]))
        path = path if path and path.is_file() else (path / "__init__.py" if path else None)
        if path and path.is_file() and i > 1:
            rest = parts[i:]
            if rest and not re.search(rf"^\s*(?:def |class )?{rest[0]}\b", path.read_text(), re.M):
                return [f"{name}: {rest[0]} is not defined in {path.relative_to(ROOT)}"]
            return []
    return [f"no module {name}"]


def check_names(text: str, pending: set[str]) -> list[str]:
    """Repo paths, technique combinations, cell ids, studies and matrix keys in the prose."""
    out, f = [], facts()
    for path in set(REPO_PATH.findall(prose(text))):
        path = path.split("::")[0].rstrip(".:,")
        if not placeholder(path) and not (ROOT / path).exists() and path not in pending:
            out.append(f"no file {path}")
    for span in set(inline_spans(text)):
        cell = CELL_ID.fullmatch(span)
        if cell:
            out += check_techniques(cell.group(3))
            if cell.group(2) not in f["gpus"] | {"cpu", "sim"}:
                out.append(f"cell {span}: no GPU profile {cell.group(2)!r}")
        elif COMBINATION.fullmatch(span):
            out += check_techniques(span)
        if DOTTED.fullmatch(span):
            out += check_dotted(span)
        key = YAML_KEY.fullmatch(span)
        if key and not re.search(rf"\b{key.group(1)}:", f["yaml"]) and f'"{key.group(1)}"' not in f["python"]:
            out.append(f"matrix key {key.group(1)!r} is in no matrix file nor the loader")
    for study in (a or b for a, b in STUDY.findall(prose(text))):
        if study not in f["studies"]:
            out.append(f"no study {study!r} in matrix/*.yaml")
    return out


def check_links(text: str, doc: Path, pending: set[str]) -> list[str]:
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:|#", target):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        if not path.exists() and rel not in pending:
            out.append(f"link {target} -> {rel}: no such file")
    return out


def problems(text: str, doc: Path, pending: set[str] = frozenset()) -> list[str]:
    """Every name in `text` (the markdown of `doc`) that does not exist, one line each."""
    out = []
    for command in commands(text):
        for tokens in words(command):
            out += [f"`{command}`: {p}" for p in check_command(tokens)]
    return out + check_names(text, set(pending)) + check_links(text, doc, set(pending))


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def named_modules() -> list[str]:
    """The repo modules the docs run with `python -m`, worker side left out."""
    found = {tokens[2] for doc in doc_files() for c in commands(doc.read_text()) for tokens in words(c)
             if tokens[:2] in (["python", "-m"], ["python3", "-m"]) and len(tokens) > 2}
    return sorted(m for m in found if module_file(m) is not None and not worker_side(m))
