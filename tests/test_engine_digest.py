"""Everything that makes an answer is in the engine digest: a clone whose
search, interpolation or gate code differs gets another digest, so it never serves the other
code's stored answers as its own."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

from bench.cells import inputs

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
# modules the search and the answer import that make no answer: starting processes, atomic
# writes, progress lines; and the fit command's question and display (it reads answers, makes none)
NO_ANSWER = {"bench/runner/launch.py", "bench/runner/lifeline.py", "bench/runner/net.py", "bench/runner/ranks.py",
             "bench/runner/simengine.py", "bench/runner/resources.py", "bench/records/atomic.py",
             "bench/records/reuse.py", "bench/records/results.py"}
ANSWERING = ("bench.search.fits", "bench.search.sample_cache", "bench.search.simpool", "bench.search.fits_csv",
             "bench.search.shapes", "bench.estimate.interp", "bench.estimate.measures", "bench.records.checks")


def covered(root: Path = BENCH) -> set[str]:
    return ({f"bench/{p.relative_to(root).as_posix()}" for pattern in inputs.ENGINE_FILES for p in root.glob(pattern)}
            - {f"bench/{e}" for e in inputs.ENGINE_EXCLUDED})


def test_every_module_the_search_and_the_answer_import_is_in_the_digest():
    code = f"import sys, {', '.join(ANSWERING)}; print(__import__('json').dumps(sorted(sys.modules)))"
    mods = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                                     check=True).stdout)
    files = set()
    for m in mods:
        if m.startswith("bench.") and not m.startswith("bench.fit."):
            path = ROOT / Path(*m.split("."))
            files.add(f"{path.relative_to(ROOT).as_posix()}.py" if path.with_suffix(".py").is_file() else None)
    files = {f for f in files if f}
    assert files - covered() - NO_ANSWER == set()
    assert {"bench/search/fits.py", "bench/estimate/interp.py", "bench/records/agreement.py"} <= covered()


def test_each_covered_file_changes_the_digest(tmp_path):
    copy = tmp_path / "bench"
    shutil.copytree(BENCH, copy, ignore=shutil.ignore_patterns("__pycache__"))
    base = inputs.engine_digest(copy)
    assert base == inputs.engine_digest()
    for rel in sorted(covered(copy)):
        path = tmp_path / rel
        text = path.read_text()
        path.write_text(text + "\n# another clone's code\n")
        assert inputs.engine_digest(copy) != base, rel
        path.write_text(text)
    assert inputs.engine_digest(copy) == base


def test_figures_held_against_the_records_are_not_in_the_digest(tmp_path):
    """bench/estimate/speedcv.py stores errors computed from the reference records: were it in the
    digest, each rebuild of the records would stale the figures and each refresh of the figures the
    records."""
    copy = tmp_path / "bench"
    shutil.copytree(BENCH, copy, ignore=shutil.ignore_patterns("__pycache__"))
    base = inputs.engine_digest(copy)
    path = copy / "estimate" / "speedcv.py"
    path.write_text(path.read_text() + "\n# refreshed figures\n")
    assert inputs.engine_digest(copy) == base and "bench/estimate/speedcv.py" not in covered(copy)
