"""Issue 37 items 5 and 6: one recipe, one spelling (the technique set canonicalized before any
lookup or cell id), and the GPUs a question asks for counted by a flag. Torch-free."""
from __future__ import annotations

import pytest

from bench import cli
from bench.fit import cells
from bench.spec import techniques


def test_a_combination_has_one_spelling():
    known = ["qlora+fsdp+gc+w2", "lora+gc+bf16"]
    for said in ("fsdp+qlora+gc+w2", "w2+gc+fsdp+qlora", "qlora+fsdp+gc+w2"):
        assert techniques.canonical(said, known) == "qlora+fsdp+gc+w2"
    assert techniques.canonical("bf16+gc+lora", known) == "lora+gc+bf16"
    # no known spelling: the catalogue's order, numbered families after it, by value
    assert techniques.canonical("w2+fsdp+gc+lora") == techniques.canonical("lora+gc+w2+fsdp") == "gc+lora+fsdp+w2"
    assert techniques.canonical("s512+b2+lora") == "lora+b2+s512"
    assert techniques.knobs("fsdp+qlora+gc+w2".split("+")) == techniques.knobs("qlora+fsdp+gc+w2".split("+"))


def test_the_fit_question_is_the_matrix_cell_whatever_the_order():
    """``fsdp+qlora+gc+w2`` was simulated for 96 s and searched where ``qlora+fsdp+gc+w2`` answered
    from the reference's records: now both are the matrix's cell, records and all."""
    asked = cells.specs("llama-3.1-70b", "rtx-4090", ["fsdp+qlora+gc+w2"], None, None)
    stored = cells.specs("llama-3.1-70b", "rtx-4090", ["qlora+fsdp+gc+w2"], None, None)
    assert list(asked) == list(stored) == ["llama-3.1-70b__sim__qlora+fsdp+gc+w2"]
    assert asked == stored
    both = cells.specs("llama-3.1-70b", "rtx-4090", ["fsdp+qlora+gc+w2", "qlora+fsdp+gc+w2"], None, None)
    assert list(both) == list(stored)  # one cell, asked once


def test_the_command_says_which_spelling_it_answers_for(monkeypatch, capsys, tmp_path):
    seen = {}

    def answer(specs, gpu, results, **kw):
        seen.update(specs)
        return [{"technique": "+".join(s["techniques"]), "cell": c, "verdict": "oom", "record": None}
                for c, s in specs.items()]
    monkeypatch.setattr(cli, "answer", answer)
    cli.main(["fit", "llama-3.1-70b", "--gpu", "rtx-4090", "--techniques", "fsdp+qlora+gc+w2", "--no-hints",
              "--results", str(tmp_path)])
    assert list(seen) == ["llama-3.1-70b__sim__qlora+fsdp+gc+w2"]
    assert "fsdp+qlora+gc+w2 is the recipe qlora+fsdp+gc+w2" in capsys.readouterr().err
