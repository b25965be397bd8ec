"""One recipe, one spelling (the technique set canonicalized before any
lookup or cell id), and the GPUs a question asks for counted by a flag. Torch-free."""
from __future__ import annotations

import pytest

from bench import cli
from bench.fit import cells
from bench.cells import techniques


def test_a_combination_has_one_spelling():
    known = ["qlora+fsdp+gc+w2", "lora+gc+bf16"]
    for said in ("fsdp+qlora+gc+w2", "w2+gc+fsdp+qlora", "qlora+fsdp+gc+w2"):
        assert techniques.canonical(said, known) == "qlora+fsdp+gc+w2"
    assert techniques.canonical("bf16+gc+lora", known) == "lora+gc+bf16"
    # no known spelling: the adapter, the sharding engine, the catalogue's order, numbered families by value
    assert techniques.canonical("w2+fsdp+gc+lora") == techniques.canonical("lora+gc+w2+fsdp") == "lora+fsdp+gc+w2"
    assert techniques.canonical("bf16+gc+zero3+w8+lora") == "lora+zero3+bf16+gc+w8"
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


def _asked(monkeypatch, capsys, tmp_path, *argv) -> tuple[list[str], str]:
    seen = {}

    def answer(specs, gpu, results, **kw):
        seen.update(specs)
        return [{"technique": "+".join(s["techniques"]), "cell": c, "verdict": "oom", "record": None}
                for c, s in specs.items()]
    monkeypatch.setattr(cli, "answer", answer)
    cli.main(["fit", "llama-3.1-70b", *argv, "--no-hints", "--results", str(tmp_path)])
    return list(seen), capsys.readouterr().err


def test_the_command_says_which_spelling_it_answers_for(monkeypatch, capsys, tmp_path):
    seen, err = _asked(monkeypatch, capsys, tmp_path, "--gpu", "rtx-4090", "--techniques", "fsdp+qlora+gc+w2")
    assert seen == ["llama-3.1-70b__sim__qlora+fsdp+gc+w2"]
    assert "fsdp+qlora+gc+w2 is the recipe qlora+fsdp+gc+w2" in err


KNOWN = ["h100-80gb", "h200", "a100-80gb", "a100-40gb", "l40s", "rtx-a6000", "rtx-4090", "rtx-3090", "t4"]


@pytest.mark.parametrize("typed, gpu, n", [("4090", "rtx-4090", 1), ("RTX 4090", "rtx-4090", 1), ("h100", "h100-80gb", 1),
                                           ("NVIDIA H100", "h100-80gb", 1), ("RTX-4090", "rtx-4090", 1),
                                           ("2xrtx-4090", "rtx-4090", 2), ("4x A6000", "rtx-a6000", 4)])
def test_a_gpu_by_the_name_people_type(typed, gpu, n):
    from bench.fit import gpus
    assert gpus.resolve(typed, KNOWN) == (gpu, n)


def test_an_ambiguous_or_unknown_gpu_is_refused_with_the_choices(capsys, tmp_path):
    ask = ["fit", "llama-3.1-8b", "--techniques", "lora", "--no-search", "--results", str(tmp_path)]
    assert cli.main([*ask, "--gpu", "a100"]) == 2
    err = capsys.readouterr().err
    assert "ambiguous" in err and "a100-80gb" in err and "a100-40gb" in err
    assert cli.main([*ask, "--gpu", "2xrtx-4090", "--gpus", "4"]) == 2
    assert "pick one" in capsys.readouterr().err
    assert cli.main([*ask, "--gpu", "rtx-4090", "--gpus", "2"]) == 2  # lora shards nothing
    assert "shards nothing" in capsys.readouterr().err


def test_gpus_counted_by_a_flag(monkeypatch, capsys, tmp_path):
    """``--gpu 2xrtx-4090`` and ``--num-gpus 2`` were refused: the world size was a technique
    (``w2``) that ``--help`` never named. ``--gpus N`` (or NxGPU) gives it to the sharding recipes."""
    by_flag, _ = _asked(monkeypatch, capsys, tmp_path, "--gpu", "4090", "--gpus", "2", "--techniques", "fsdp+qlora+gc")
    by_name, _ = _asked(monkeypatch, capsys, tmp_path, "--gpu", "2xrtx-4090", "--techniques", "qlora+fsdp+gc")
    assert by_flag == by_name == ["llama-3.1-70b__sim__qlora+fsdp+gc+w2"]  # the reference's cell
    assert "--gpus" in cli.parser()._subparsers._group_actions[0].choices["fit"].format_help()


def test_a_sharding_technique_on_one_gpu_is_said(monkeypatch, capsys, tmp_path):
    """``qlora+fsdp`` on one GPU ran FSDP on one rank for 186 s without a word."""
    _, err = _asked(monkeypatch, capsys, tmp_path, "--gpu", "rtx-4090", "--techniques", "qlora+fsdp+gc")
    assert "qlora+fsdp+gc shards across GPUs but runs on 1 GPU here" in err
    _, err = _asked(monkeypatch, capsys, tmp_path, "--gpu", "rtx-4090", "--techniques", "qlora+gc")
    assert "shards across GPUs" not in err
