"""No stale module path anywhere in the tree: every markdown file, YAML file, Python comment and
docstring, the Snakefile and pyproject (tests/tree_paths.py), not only README and docs/."""
from __future__ import annotations

from tests import tree_paths


# Stale names in engine files (bench/cells/inputs.py ENGINE_FILES) wait for the next engine change: the engine
# digest covers their comments. Each must still be stale.
ENGINE_PENDING: set = set()


def test_every_path_and_module_named_in_the_tree_exists():
    stale = {(f, name) for f in tree_paths.tree_files()
             for name in tree_paths.problems((tree_paths.ROOT / f).read_text(errors="replace"), f)}
    assert ENGINE_PENDING <= stale, f"fixed: take them out of ENGINE_PENDING: {sorted(ENGINE_PENDING - stale)}"
    assert not stale - ENGINE_PENDING, "names that do not exist:\n" + "\n".join(
        f"{f}: {name}" for f, name in sorted(stale - ENGINE_PENDING))


def test_the_checker_finds_what_the_tree_once_said():
    # the stale names the tree held before this check: old module paths of files that moved
    for stale in ("see bench/worker.py", "bench/published.py", "bench/sharding.py", "bench.spec.matrix",
                  "(bench/measures.need_bytes)", "bench/cells/nothing.py"):
        assert tree_paths.problems(stale), stale
    for fine in ("bench/worker/train.py", "bench/records/checks.gate", "bench.records.checks.gate",
                 "huggingface/peft:docs/source/accelerate/fsdp.md", "matrix/models/<name>.json",
                 "bench/worker/sim/*.py", "matrix/tokenizers/MODEL", "tests/test_report_*"):
        assert not tree_paths.problems(fine), fine
