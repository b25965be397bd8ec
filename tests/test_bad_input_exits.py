"""Every failure is one line naming its cause, exit 2 for bad input, never a traceback that exits
1 (the guard's "does not fit"); ``fit --json`` prints one object whatever happens."""
import json

import pytest

from bench import cli, reproduce
from bench.fit import guard, stored
from bench.cells import matrix
from tests.helpers import write_matrix

STUDY = {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"], "techniques": ["lora"]}


def run_fit(capsys, *args):
    code = cli.main(["fit", *args, "--no-search", "--no-hints"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("model", ["org/..", "org/名前", "org/" + "m" * 300, "org/" + "m" * 5000, "org/a--b"],
                         ids=["dotdot", "non-ascii", "300", "5000", "dashdash"])
def test_a_hub_id_the_hub_refuses_is_bad_input_in_one_line(capsys, monkeypatch, model):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_fit(capsys, model, "--gpu", "t4")
    assert code == guard.BAD_INPUT
    assert "not a valid Hugging Face repository id" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and len(err) < 600


@pytest.mark.parametrize("args", [["nosuch-model", "--gpu", "t4"], ["tiny-llama", "--gpu", "gpu9000"],
                                  ["tiny-llama", "--gpu", "t4", "--seq", "abc"],
                                  ["tiny-llama", "--gpu", "t4", "--host-mem", "lots"],
                                  ["org/..", "--gpu", "t4"]])
def test_json_prints_one_error_object_on_bad_input(capsys, monkeypatch, args):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_fit(capsys, *args, "--json")
    assert code == guard.BAD_INPUT
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and doc["verdict"] == "bad-input"
    assert doc["error"]["kind"] == "bad-input" and doc["error"]["message"] in err


def test_a_failure_of_the_command_is_one_line_exit_3_and_a_json_object(capsys, monkeypatch):
    def broken(*_a, **_k):
        raise KeyError("boom")
    monkeypatch.setattr(cli.fitgpus, "resolve", broken)
    code, out, err = run_fit(capsys, "tiny-llama", "--gpu", "t4", "--techniques", "gc", "--json")
    assert code == guard.FAILED != guard.NO_FIT
    assert json.loads(out)["error"]["kind"] == "failed"
    assert "KeyError" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_non_utf8_fits_csv_is_no_answer_not_a_traceback(tmp_path):
    spec = {"cell": "tiny-llama__sim__gc", "batch_size": 1, "seq_len": 2048, "inputs_sha256": {"m": "0" * 64},
            "verdict_gpus": {"t4": {"kind": "cuda", "memory_bytes": 15 * 2**30}}}
    (tmp_path / "fits.csv").write_bytes(b"cell,gpu\n\xff\xfe,t4\n")
    stored.stored_fits(spec, tmp_path, "t4")   # read past, as an unreadable file is


def test_a_5000_deep_list_in_a_matrix_is_a_matrix_error(tmp_path):
    path = write_matrix(tmp_path, {"a": STUDY})
    path.write_text("x-deep: " + "[" * 5000 + "]" * 5000 + "\n" + path.read_text())
    with pytest.raises(matrix.MatrixError, match=r"matrix.yaml: x-deep\[0\].*nested deeper than 100 levels"):
        matrix.load(path)


def test_reproduce_refuses_a_missing_matrix_and_an_out_that_is_a_file(tmp_path, capsys):
    assert reproduce.main(["--matrix", str(tmp_path / "none.yaml"), "--only", "x"]) == 2
    assert "no such matrix file" in capsys.readouterr().err
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "sub"):
        assert reproduce.main(["--only", "x", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "not a folder" in err and len(err.strip().splitlines()) == 1
