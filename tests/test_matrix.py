"""The matrix loader: valid files expand to cells with stable ids; bad files fail before
anything runs, naming the file, the key and the reason."""
import dataclasses
import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from bench.cells import matrix
from bench.cells import techniques as tech
from tests.helpers import MATRIX_DIR, REPO

ID = re.compile(r"[a-z0-9.-]+__[a-z0-9.-]+__[a-z0-9.-]+(\+[a-z0-9.-]+)*")
STUDY = {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"], "techniques": ["gc", "lora+gc"]}


def test_default_matrix_loads_with_well_formed_ids():
    cells = matrix.load()
    assert cells, "the default matrix has cells"
    for cid, spec in cells.items():
        assert ID.fullmatch(cid), cid
        assert spec["cell"] == cid
        assert spec["baseline_cell"] in cells, f"{cid} compares against a cell that is not in the matrix"


def test_ids_carry_axes_as_data(matrix_file):
    cells = matrix.load(matrix_file({"s": STUDY}))
    assert list(cells) == ["tiny-llama__cpu__baseline", "tiny-llama__cpu__gc", "tiny-llama__cpu__lora+gc"]
    spec = cells["tiny-llama__cpu__lora+gc"]
    assert (spec["model"], spec["gpu"], spec["techniques"], spec["mode"]) == ("tiny-llama", "cpu", ["lora", "gc"], "cpu")
    assert spec["knobs"]["adapter"] == "lora" and spec["knobs"]["gc"] is True
    assert spec["baseline_cell"] == "tiny-llama__cpu__baseline"


def test_sim_cells_share_one_simulation_across_gpus(matrix_file):
    study = {"mode": "sim", "models": ["qwen2.5-7b"], "gpus": ["h100-80gb", "rtx-4090"], "techniques": ["lora"]}
    cells = matrix.load(matrix_file({"s": study}))
    assert list(cells) == ["qwen2.5-7b__sim__baseline", "qwen2.5-7b__sim__lora"]
    assert set(cells["qwen2.5-7b__sim__lora"]["verdict_gpus"]) == {"h100-80gb", "rtx-4090"}


def test_exclude_drops_matching_cells(matrix_file):
    study = dict(STUDY, models=["tiny-llama", "tiny-qwen2"], exclude=[{"model": "tiny-qwen2", "techniques": "lora"}])
    cells = matrix.load(matrix_file({"s": study}))
    assert "tiny-qwen2__cpu__lora+gc" not in cells and "tiny-qwen2__cpu__gc" in cells
    assert "tiny-llama__cpu__lora+gc" in cells


@pytest.mark.parametrize("change, key, reason", [
    ({"techniques": ["gc", "lroa"]}, "studies.s.techniques[1]", "unknown technique 'lroa'"),
    ({"techniques": ["bf16+amp-bf16"]}, "studies.s.techniques[0]", "both set precision"),
    ({"techniques": ["fa2+eager"]}, "studies.s.techniques[0]", "both set attn"),
    ({"techniques": ["zero3+fsdp"]}, "studies.s.techniques[0]", "both set dist"),
    ({"techniques": ["qlora+fp32"]}, "studies.s.techniques[0]", "cannot be combined with fp32"),
    ({"techniques": ["gc+w2"]}, "studies.s.techniques[0]", "needs a sharding technique"),
    ({"techniques": ["LoRA"]}, "studies.s.techniques.0", "does not match"),
    ({"models": ["tiny-lama"]}, "studies.s.models[0]", "model tiny-lama: not a name in"),
    ({"gpus": ["h100"]}, "studies.s.gpus[0]", "unknown gpu 'h100'"),
    ({"gpus": ["h100-80gb"]}, "studies.s.gpus[0]", "cpu mode needs a cpu gpu profile"),
    ({"mode": "gpu"}, "studies.s.mode", "is not one of"),
    ({"technqiues": ["gc"]}, "studies.s", "technqiues"),
    ({"batch_size": 3, "techniques": ["ga2"]}, "studies.s.techniques", "does not split into 2"),
    ({"warmup_steps": 0}, "studies.s.warmup_steps", "minimum"),
])
def test_bad_matrix_names_file_key_and_reason(matrix_file, change, key, reason):
    path = matrix_file({"s": {**STUDY, **change}})
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: {key}"), msg
    assert reason in msg, msg


def test_unreadable_files_name_the_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(matrix.MatrixError, match="no such matrix file"):
        matrix.load(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("studies: [unclosed\n")
    with pytest.raises(matrix.MatrixError, match=f"{broken}: .*not valid YAML"):
        matrix.load(broken)


def test_same_cell_with_other_settings_in_two_studies_is_refused(matrix_file):
    path = matrix_file({"a": STUDY, "b": dict(STUDY, seq_len=64)})
    with pytest.raises(matrix.MatrixError, match="also in study a with other settings"):
        matrix.load(path)


def _collect(*args):
    out = subprocess.run([sys.executable, "-m", "pytest", "bench", "--collect-only", "-q", *args],
                         cwd=REPO, capture_output=True, text=True)
    return out.returncode, [ln.split("[", 1)[1].rstrip("]") for ln in out.stdout.splitlines() if "::test_cell[" in ln], out


def test_pytest_ids_are_the_cell_ids_and_k_selects_by_them(matrix_file):
    path = matrix_file({"s": dict(STUDY, models=["tiny-llama", "tiny-qwen2"], techniques=["gc", "zero3", "zero3+gc"])})
    code, ids, out = _collect("--matrix", str(path))
    assert code == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert ids == list(matrix.load(path))
    code, ids, out = _collect("--matrix", str(path), "-k", "zero3")
    assert code == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert sorted(ids) == sorted(c for c in matrix.load(path) if "zero3" in c) and len(ids) == 4
    code, ids, out = _collect("--matrix", str(path), "-k", "tiny-qwen2 and not gc")
    assert code == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert ids == ["tiny-qwen2__cpu__baseline", "tiny-qwen2__cpu__zero3"]


def test_k_accepts_dotted_model_names(matrix_file):
    study = {"mode": "sim", "models": ["qwen2.5-7b", "llama-3.1-8b"], "gpus": ["h100-80gb"], "techniques": ["lora"]}
    code, ids, out = _collect("--matrix", str(matrix_file({"s": study})), "-k", "qwen2.5-7b")
    assert code == 0, out.stderr
    assert ids == ["qwen2.5-7b__sim__baseline", "qwen2.5-7b__sim__lora"]


def test_bad_matrix_stops_pytest_collection_with_the_reason(matrix_file):
    path = matrix_file({"s": dict(STUDY, techniques=["lroa"])})
    code, ids, out = _collect("--matrix", str(path))
    assert code != 0 and ids == []
    assert f"{path}: studies.s.techniques[0]" in out.stdout + out.stderr


def test_a_cell_listed_twice_is_refused(matrix_file):
    # the loader checks its list of expanded cells: as dict keys, the two would be one row
    path = matrix_file({"s": dict(STUDY, techniques=["gc", "lora", "gc"])})
    assert [spec["cell"] for _, spec in matrix.expand(path)].count("tiny-llama__cpu__gc") == 2
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    assert str(err.value) == (f"{path}: studies.s.techniques[2]: cell tiny-llama__cpu__gc is listed twice "
                              "(also at studies.s.techniques[0])")


def test_one_cell_in_two_studies_with_the_same_settings_is_one_row(matrix_file):
    cells = matrix.load(matrix_file({"a": STUDY, "b": dict(STUDY, techniques=["gc", "bf16"])}))
    assert list(cells).count("tiny-llama__cpu__gc") == 1 and cells["tiny-llama__cpu__gc"]["study"] == "a"


@pytest.mark.parametrize("studies, key, spellings", [
    ({"s": dict(STUDY, techniques=["lora+gc", "gc+lora"])}, "studies.s.techniques[1]",
     ("gc+lora", "lora+gc (at studies.s.techniques[0])")),
    ({"a": STUDY, "b": dict(STUDY, techniques=["gc+lora"])}, "studies.b.techniques[0]",
     ("gc+lora", "lora+gc (at studies.a.techniques[1])")),
])
def test_one_set_of_techniques_spelled_two_ways_is_refused_naming_both(matrix_file, studies, key, spellings):
    path = matrix_file(studies)
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: {key}: ") and "same techniques in another order" in msg, msg
    assert all(s in msg for s in spellings), msg


def test_the_same_set_on_another_model_is_another_cell_and_ids_keep_their_spelling(matrix_file):
    cells = matrix.load(matrix_file({"a": STUDY, "b": dict(STUDY, models=["tiny-qwen2"], techniques=["gc+lora"])}))
    assert "tiny-llama__cpu__lora+gc" in cells and "tiny-qwen2__cpu__gc+lora" in cells


@pytest.mark.parametrize("combo, knob, minimum", [
    ("s1", "seq_len", 2), ("s0", "seq_len", 2), ("b0", "batch_size", 1), ("ga0", "accum", 1), ("w0", "world_size", 1),
])
def test_numbered_techniques_obey_the_schema_minimums(matrix_file, combo, knob, minimum):
    path = matrix_file({"s": dict(STUDY, techniques=[combo])})
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    n = combo.lstrip("sbgaw")
    reason = f"{combo} sets {knob} to {n}, below its minimum of {minimum}"
    assert str(err.value) == f"{path}: studies.s.techniques[0]: {combo}: {reason}"
    assert tech.MINIMUMS[knob] == minimum
    if knob in ("seq_len", "batch_size"):  # the schema's minimum is the same number, from the same place
        assert matrix.SCHEMA["$defs"]["shape"]["properties"][knob]["minimum"] == minimum
        with pytest.raises(matrix.MatrixError, match=f"studies.s.{knob}: {minimum - 1} is less than the minimum"):
            matrix.load(matrix_file({"s": dict(STUDY, **{knob: minimum - 1})}))


def test_numbered_techniques_at_their_minimum_load(matrix_file):
    cells = matrix.load(matrix_file({"s": dict(STUDY, techniques=["s2", "b1", "ga1"])}))
    assert cells["tiny-llama__cpu__s2"]["seq_len"] == 2 and cells["tiny-llama__cpu__b1"]["batch_size"] == 1


def _model(folder, name: str, **change):
    folder.mkdir(exist_ok=True)
    config = json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text())
    (folder / f"{name}.json").write_text(json.dumps({**config, **change}))
    return folder


def test_a_cell_id_too_long_for_a_file_name_is_refused_with_the_limit(matrix_file, tmp_path):
    assert matrix.ID_MAX_BYTES == 255 - len(".json.rank9999.pid")
    fits = "m" * (matrix.ID_MAX_BYTES - len("__cpu__baseline"))
    models = _model(_model(tmp_path / "models", fits), fits + "x")
    ok = matrix.load(matrix_file({"s": dict(STUDY, models=[fits], techniques=["baseline"])}, models_dir=str(models)))
    assert [len(cid) for cid in ok] == [matrix.ID_MAX_BYTES]
    path = matrix_file({"s": dict(STUDY, models=[fits + "x"], techniques=["baseline"])}, models_dir=str(models))
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: studies.s.techniques[0]: cell id {fits}x__cpu__baseline is "
                          f"{matrix.ID_MAX_BYTES + 1} bytes, over the limit of {matrix.ID_MAX_BYTES}: "
                          "a file name holds 255 bytes"), msg


GOOD_GPU = "cpu-small:\n  kind: cpu\n  memory_bytes: 1073741824\n"


@pytest.mark.parametrize("text, key, reason", [
    ("cpu-small:\n  kind: cpu\n  memory_bytes: -5\n", "cpu-small.memory_bytes", "-5 is less than the minimum of 1"),
    ("cpu-small:\n  kind: cpu\n  memory_bytes: true\n", "cpu-small.memory_bytes", "True is not of type 'integer'"),
    ("cpu-small:\n  kind: cpu\n  memory_bytes: 5.0e+9\n", "cpu-small.memory_bytes", "is not of type 'integer'"),
    ("cpu-small:\n  kind: cpu\n  memory_bytes: 1e9\n", "cpu-small.memory_bytes", "'1e9' is not of type 'integer'"),
    ("cpu-small:\n  kind: gpu\n  memory_bytes: 1\n", "cpu-small.kind", "'gpu' is not one of"),
    ("cpu-small:\n  kind: cpu\n", "cpu-small", "'memory_bytes' is a required property"),
    (GOOD_GPU + "  bf16_tflop: 10\n", "cpu-small", "'bf16_tflop' was unexpected"),
    ("- kind: cpu\n  memory_bytes: 1\n", "<top>", "is not of type 'object'"),
    ("cpu-small: 12\n", "cpu-small", "12 is not of type 'object'"),
    ("Cpu_Small:\n  kind: cpu\n  memory_bytes: 1\n", "<top>", "'Cpu_Small' does not match"),
    ("cpu-small: {kind: cpu, memory_bytes: 1\n", "<top>", "not valid YAML"),
    ("cpu-small: !!python/object:os.system {}\n", "<top>", "could not determine a constructor for the tag"),
])
def test_the_gpus_file_is_validated_like_the_matrix_gpus(matrix_file, tmp_path, text, key, reason):
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(text)
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(matrix_file({"s": dict(STUDY, gpus=["cpu-small"])}, gpus_file=str(gpus)))
    msg = str(err.value)
    assert msg.startswith(f"{gpus}: {key}: ") and reason in msg, msg
    if key.startswith("cpu-small.") or "required" in reason:  # the matrix's own gpus: say the same
        inline = yaml.safe_load(text)
        gpus.write_text(GOOD_GPU)
        path = matrix_file({"s": dict(STUDY, gpus=["cpu-small"])}, gpus_file=str(gpus), gpus=inline)
        with pytest.raises(matrix.MatrixError, match=f"^{re.escape(str(path))}: gpus.{key}: .*{re.escape(reason)}"):
            matrix.load(path)


def test_a_good_gpus_file_loads(matrix_file, tmp_path):
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(GOOD_GPU)
    cells = matrix.load(matrix_file({"s": dict(STUDY, gpus=["cpu-small"])}, gpus_file=str(gpus)))
    assert cells["tiny-llama__cpu-small__gc"]["gpu_memory_bytes"] == 1 << 30


@pytest.mark.parametrize("text, reason", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "a model config must be a JSON object, not list"),
    ('{"hidden_size": 8}', "model_type missing"),
])
def test_a_bad_model_config_names_the_file(matrix_file, tmp_path, text, reason):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "bad.json").write_text(text)
    path = matrix_file({"s": dict(STUDY, models=["bad"])}, models_dir=str(tmp_path / "models"))
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    assert str(err.value).startswith(f"{path}: studies.s.models[0]: model {tmp_path / 'models' / 'bad.json'}: "
                                     f"{reason}"), str(err.value)


def test_inputs_digest_changes_for_exactly_the_cells_whose_inputs_changed(matrix_file, tmp_path, monkeypatch):
    models = _model(_model(tmp_path / "models", "a"), "b")
    shutil.copytree(MATRIX_DIR / "deepspeed", tmp_path / "ds")
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(GOOD_GPU + "cpu-big:\n  kind: cpu\n  memory_bytes: 2147483648\n"
                    "h100-80gb:\n  kind: cuda\n  memory_bytes: 85045477376\n")
    top = {"models_dir": str(models), "deepspeed_dir": str(tmp_path / "ds"), "gpus_file": str(gpus),
           "technique_options": {"lora": {"r": 8}}}
    studies = {"c": dict(STUDY, models=["a", "b"], gpus=["cpu-small", "cpu-big"], techniques=["gc", "zero3", "lora"]),
               "s": {"mode": "sim", "models": ["a"], "gpus": ["h100-80gb"], "techniques": ["gc"]}}
    path = matrix_file(studies, **top)
    before = matrix.load(path)

    def changed():
        now = matrix.load(path)
        assert list(now) == list(before)
        return {cid for cid in now if now[cid] != before[cid]}

    config = json.loads((models / "a.json").read_text())
    (models / "a.json").write_text(json.dumps(config, indent=4, sort_keys=True))  # the same content
    assert changed() == set()
    (models / "a.json").write_text(json.dumps({**config, "num_hidden_layers": 8}))
    assert changed() == {c for c in before if c.startswith("a__")}
    before = matrix.load(path)

    stage = json.loads((tmp_path / "ds" / "zero3.json").read_text())
    stage["zero_optimization"]["stage3_max_live_parameters"] = 1000
    (tmp_path / "ds" / "zero3.json").write_text(json.dumps(stage))
    assert changed() == {"a__cpu-small__zero3", "a__cpu-big__zero3", "b__cpu-small__zero3", "b__cpu-big__zero3"}
    before = matrix.load(path)

    gpus.write_text(gpus.read_text().replace("85045477376", "85045477377"))  # only sim cells use the h100 profile
    assert changed() == {"a__sim__baseline", "a__sim__gc"}
    before = matrix.load(path)

    monkeypatch.setitem(tech.CATALOG, "gc", dataclasses.replace(tech.CATALOG["gc"], overhead="~33% slower"))
    assert changed() == {"a__cpu-small__gc", "a__cpu-big__gc", "b__cpu-small__gc", "b__cpu-big__gc", "a__sim__gc"}
    before = matrix.load(path)

    matrix_file(studies, **{**top, "technique_options": {"lora": {"r": 16}}})
    assert changed() == {f"{m}__{g}__lora" for m in "ab" for g in ("cpu-small", "cpu-big")}


def test_a_lora_cell_holds_the_one_copy_of_the_default_options(matrix_file):
    # catalogue.LORA_DEFAULTS is filled into every LoRA cell's spec; a matrix's technique_options override keys
    import inspect
    from bench.cells import catalogue
    from bench.worker import models
    plain = matrix.load(matrix_file({"c": dict(STUDY, techniques=["lora"])}))
    assert plain["tiny-llama__cpu__lora"]["options"]["lora"] == catalogue.LORA_DEFAULTS
    ranked = matrix.load(matrix_file({"c": dict(STUDY, techniques=["lora"])}, technique_options={"lora": {"r": 16}}))
    assert ranked["tiny-llama__cpu__lora"]["options"]["lora"] == {**catalogue.LORA_DEFAULTS, "r": 16}
    # the worker and the corpus read it, never a literal of their own
    assert "LORA_DEFAULTS" in inspect.getsource(models.add_lora) and "q_proj" not in inspect.getsource(models.add_lora)
    assert "lora" not in yaml.safe_load(matrix.DEFAULT_MATRIX.read_text()).get("technique_options", {})
