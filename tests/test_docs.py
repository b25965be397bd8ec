"""README.md and docs/*.md cannot rot silently: every command, flag, file, technique, study,
matrix key and link they name exists (tests/docs_check.py), and the short commands run."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests import docs_check

# Docs the README links that other branches of issue 29 write; they do not exist on this
# branch yet. Remove each name when its file lands (test_pending_docs_are_missing says when).
PENDING_DOCS = {
}


@pytest.mark.parametrize("doc", docs_check.doc_files(), ids=lambda p: p.name)
def test_every_name_in_the_doc_exists(doc):
    problems = docs_check.problems(doc.read_text(), doc, PENDING_DOCS)
    assert not problems, f"{doc.relative_to(docs_check.ROOT)} names what does not exist:\n" + "\n".join(problems)


def test_pending_docs_are_missing():
    landed = sorted(d for d in PENDING_DOCS if (docs_check.ROOT / d).exists())
    assert not landed, f"these docs exist now: take them out of PENDING_DOCS: {landed}"


def test_the_docs_show_commands():
    """The checker finds what it checks: a broken extractor would pass every doc silently."""
    text = "\n".join(d.read_text() for d in docs_check.doc_files())
    programs = {tokens[0] for c in docs_check.commands(text) for tokens in docs_check.words(c)}
    assert {"ft-membench", "snakemake", "pytest", "python", "pip"} <= programs
    assert len(docs_check.named_modules()) >= 5


FIT = "ft-membench fit qwen2.5-7b --gpu rtx-4090   #"
MUTATIONS = {   # name: (doc, a line of it, the same line broken, what the checker must say)
    "a renamed flag": ("README.md", FIT, FIT.replace("--gpu", "--card"), "no flag --card"),
    "an unknown subcommand": ("README.md", FIT, FIT.replace(" fit ", " fits "), "no subcommand"),
    "an unknown GPU": ("README.md", FIT, FIT.replace("rtx-4090", "rtx-9090"), "no GPU profile"),
    "an unknown model": ("README.md", FIT, FIT.replace("qwen2.5", "qwen9"), "no model"),
    "a module's renamed flag": ("docs/reproduce.md", "report.versus OLD NEW --out DIR [--only",
                                "report.versus OLD NEW --out DIR [--just", "has no flag --just"),
    "a moved module": ("docs/reproduce.md", "python -m bench.reproduce ", "python -m bench.reproducer ", "no module"),
    "a snakemake target": ("README.md", "snakemake --cores 1 all ", "snakemake --cores 1 alll ", "no rule"),
    "a snakemake flag": ("README.md", "snakemake --cores 1 all ", "snakemake --kores 1 all ", "no flag --kores"),
    "a pytest path": ("README.md", "pytest -q -n 2 --dist loadscope ", "pytest tests/test_nothing.py -q ",
                      "does not exist"),
    "a pytest -k word": ("docs/fits.md", "pytest bench -k fits ", "pytest bench -k fitz ", "matches no study"),
    "a technique": ("README.md", "`lora+gc+bf16` is the same", "`lora+gc+bf17` is the same", "technique 'bf17'"),
    "a cell id": ("README.md", "`tiny-llama__cpu__lora+gc`", "`tiny-llama__cpu__lora+gx`", "technique 'gx'"),
    "a file path": ("README.md", "`matrix/default.yaml`", "`matrix/defaults.yaml`", "no file matrix/defaults.yaml"),
    "a link": ("README.md", "(docs/records.md)", "(docs/record.md)", "no such file"),
    "a study": ("docs/speed-and-allocator.md", "`sim-8b-reserved` study", "`sim-8b-reserve` study", "no study"),
    "a dotted name": ("docs/reproduce.md", "`bench.runner.launch.run_cell`", "`bench.launch.run_cell`", "no module"),
    "a matrix key": ("docs/extending.md", "`model_options: {", "`model_option: {", "matrix key 'model_option'"),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_a_broken_doc_line_is_caught(name):
    doc, old, new, expected = MUTATIONS[name]
    path = docs_check.ROOT / doc
    text = path.read_text()
    assert old in text, f"{doc} no longer holds {old!r}: pick another line to break"
    assert not any(expected in p for p in docs_check.problems(text, path, PENDING_DOCS))
    problems = docs_check.problems(text.replace(old, new, 1), path, PENDING_DOCS)
    assert any(expected in p for p in problems), problems


def run(*argv):
    return subprocess.run([sys.executable, *argv], cwd=docs_check.ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(docs_check.ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("argv", [["--help"], ["fit", "--help"]], ids=" ".join)
def test_ft_membench_help_runs(argv):
    out = run("-m", docs_check.cli_module(), *argv)
    assert out.returncode == 0 and "usage: ft-membench" in out.stdout, out.stderr


@pytest.mark.parametrize("module", docs_check.named_modules())
def test_each_module_the_docs_run_answers_help(module):
    out = run("-m", module, "--help")
    assert out.returncode == 0 and "usage:" in out.stdout, out.stderr
