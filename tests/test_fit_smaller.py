"""Smaller fit defects: a Hub revision is said where it is not read and kept
in the command that would fetch it; paging and ``--allow-tight`` warnings are
on stderr, as docs/fit.md says."""
import json

import pytest

from bench import cli
from bench.fit import question as fitinput
from bench.cells import modelref


def test_a_revision_answered_by_the_matrix_model_is_said_to_be_ignored():
    q = fitinput.question("Qwen/Qwen2.5-7B@deadbeef", None, None, ["gc"], None, None)
    assert q.model == "qwen2.5-7b"
    assert any("@deadbeef is not read" in n for n in q.notes), q.notes


def test_an_uncached_revision_keeps_its_revision_in_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(modelref.ModelError, match=r"(hf|huggingface-cli) download acme/tiny config.json --revision v9"):
        modelref.resolve("acme/tiny@v9", check=False)


@pytest.mark.parametrize("verdict, paging, allow, says", [("tight", None, True, "tight"),
                                                         ("fits", {"paged_out_bytes": 5}, False, "with paging")])
def test_warnings_are_on_stderr(capsys, monkeypatch, verdict, paging, allow, says):
    profile = {"kind": "cuda", "memory_bytes": 16 * 2**30, "label": "T4"}
    rec = {"status": "ok", "details": {"paging": {"t4": paging}} if paging else {}}
    monkeypatch.setattr(cli.fitcells, "specs", lambda *a, **k: {"c": {"verdict_gpus": {"t4": profile}}})
    monkeypatch.setattr(cli, "answer", lambda *a, **k: [{"technique": "gc", "cell": "c", "verdict": verdict,
                                                        "record": rec}])
    args = ["fit", "tiny-llama", "--gpu", "t4", "--techniques", "gc", "--no-search", "--no-hints", "--json"]
    code = cli.main(args + (["--allow-tight"] if allow else []))
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["warnings"]
    assert "ft-membench: warning: gc: " in err and says in err
