"""README.md and docs/*.md cannot rot silently: every command, flag, file, technique, study,
matrix key and link they name exists (tests/docs_check.py), and the short commands run."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests import docs_check

# Docs the README links that other branches write; they do not exist on this
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


# --- figures the docs quote, checked against the tool ----------------------

CELL_COUNT = re.compile(r"(\d+) cells(?: of `matrix/default\.yaml`)?:? \(?(\d+) cpu, (\d+) sim")
SIM_CELLS = re.compile(r"the (\d+) sim cells alone")
REFUSED = re.compile(r"`([a-z0-9][a-z0-9.+-]*\+[a-z0-9.+-]+)` is refused")


def figure_problems(text: str) -> list[str]:
    """Cell counts of the default matrix ("163 cells (68 cpu, 95 sim)", "the 95 sim cells alone") and
    combinations said to be refused ("`qlora+fsdp` is refused"), against matrix.load() and the rules."""
    from bench.cells import matrix
    from bench.cells.techniques import knobs
    cells = matrix.load()
    counts = {m: sum(1 for c in cells.values() if c["mode"] == m) for m in ("cpu", "sim")}
    out = [f"'{m.group(0)}': the default matrix has {len(cells)} cells ({counts['cpu']} cpu, {counts['sim']} sim)"
           for m in CELL_COUNT.finditer(text)
           if (int(m.group(1)), int(m.group(2)), int(m.group(3))) != (len(cells), counts["cpu"], counts["sim"])]
    out += [f"'{m.group(0)}': the default matrix has {counts['sim']} sim cells" for m in SIM_CELLS.finditer(text)
            if int(m.group(1)) != counts["sim"]]
    for m in REFUSED.finditer(text):
        try:
            knobs(m.group(1).split("+"))
            out.append(f"'{m.group(0)}': the rules accept {m.group(1)} (bench/cells/techniques.py)")
        except (ValueError, KeyError):
            pass
    return out


@pytest.mark.parametrize("doc", docs_check.doc_files(), ids=lambda p: p.name)
def test_the_figures_a_doc_quotes_are_the_tools(doc):
    problems = figure_problems(doc.read_text())
    assert not problems, f"{doc.relative_to(docs_check.ROOT)} quotes figures the tool contradicts:\n" + "\n".join(problems)


def test_the_figure_checks_catch_what_the_docs_once_said():
    """What the newcomer found: 155 cells (66 cpu, 89 sim) beside the tool's count, and qlora+fsdp
    called refused while the tool runs it."""
    from bench.cells import matrix
    cells = matrix.load()
    sims = sum(1 for c in cells.values() if c["mode"] == "sim")
    said = ("runs every cell of `matrix/default.yaml` (155 cells: 66 cpu, 89 sim; ...). "
            "`qlora+fsdp` is refused with the reason. `qlora+fsdp+adamw8bit` is refused.")
    problems = figure_problems(said)
    assert len(problems) == 2 and f"{len(cells)} cells ({len(cells) - sims} cpu, {sims} sim)" in problems[0] and "accept qlora+fsdp" in problems[1]
    assert figure_problems(docs_check.ROOT.joinpath("README.md").read_text()) == []
    assert CELL_COUNT.search(docs_check.ROOT.joinpath("README.md").read_text())  # the README's count is checked
