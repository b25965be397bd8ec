"""The loss is part of the record: a step whose loss is not finite is an error record
that says so, in every mode; sim, whose fake tensors carry no values, says what stands in."""
import json

import pytest

from bench.records import checks
from bench.runner import launch
from bench.cells import inputs, matrix
from tests.helpers import MATRIX_DIR
from tests.test_record import CPU_STUDY, SIM_STUDY, ok_record, specs  # noqa: F401  (fixture)

TINY_DIMS = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
             "vocab_size": 256, "num_hidden_layers": 2}


def test_contract_refuses_an_ok_record_whose_loss_is_not_finite(specs):
    for spec in specs.values():
        rec = ok_record(spec)
        assert checks.problems(rec) == []
        for bad in (float("nan"), float("inf")):
            rec["details"]["final_loss"] = bad
            assert any("not a finite number" in p for p in checks.problems(rec))
        rec = ok_record(spec)
        rec["details"]["losses"] = [1.0, float("nan")]
        assert any("details.losses" in p for p in checks.problems(rec))


def test_loss_is_required_from_record_version_2_only(specs):
    cpu, sim = specs["tiny-llama__cpu__gc"], specs["tiny-llama__sim__zero3+w4"]
    for spec in (cpu, sim):
        rec = ok_record(spec)
        del rec["details"]["final_loss"]
        assert any("final_loss missing" in p for p in checks.problems(rec))
        old = dict(rec)
        del old["record_version"]          # a record made before the loss was part of it
        assert checks.problems(old) == []
    rec = ok_record(cpu)
    rec["details"]["final_loss"] = None    # cpu and cuda measure it
    assert any("the loss was measured" in p for p in checks.problems(rec))
    rec = ok_record(sim)
    del rec["details"]["loss_check"]       # sim must say what stands in
    assert any("loss_check" in p for p in checks.problems(rec))


@pytest.mark.slow
@pytest.mark.parametrize("bad", [{"rope_theta": 0}, {"rms_norm_eps": -10.0}])
def test_a_config_that_trains_a_nan_loss_is_an_error_record(tmp_path, matrix_file, bad):
    """The matrix refuses such configs (tests/test_degenerate_configs.py); this is the worker's own
    guard, for what no check foresees: the spec is pointed at the config after the matrix loaded."""
    models = tmp_path / "models"
    models.mkdir()
    cfg = json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text()) | TINY_DIMS
    (models / "nanny.json").write_text(json.dumps(cfg))
    path = matrix_file({"s": {"mode": "cpu", "models": ["nanny"], "gpus": ["cpu"], "techniques": ["baseline"]}},
                       models_dir=str(models))
    spec = matrix.load(path)["nanny__cpu__baseline"]
    (models / "nan.json").write_text(json.dumps(cfg | bad))
    spec = dict(spec, model_config=str(models / "nan.json"),
                inputs_sha256=dict(spec["inputs_sha256"], model_config=inputs.digest(cfg | bad)))
    rec = launch.run_cell(spec, tmp_path / "w.log")
    assert rec["status"] == "error", rec["reason"]
    assert "NonFiniteLoss" in rec["reason"] and "not finite" in rec["reason"]
    assert checks.problems(rec) == []


@pytest.mark.slow
def test_cpu_record_carries_its_losses_and_sim_says_what_stands_in(tmp_path, matrix_file):
    cells = matrix.load(matrix_file({"c": {"mode": "cpu", "models": ["tiny-llama"], "gpus": ["cpu"],
                                           "techniques": ["baseline"]},
                                     "s": {"mode": "sim", "models": ["tiny-llama"], "gpus": ["l40s"],
                                           "techniques": ["baseline"]}}))
    cpu = launch.run_cell(cells["tiny-llama__cpu__baseline"], tmp_path / "c.log")
    assert cpu["status"] == "ok" and checks.problems(cpu) == [], cpu["reason"]
    assert len(cpu["details"]["losses"]) == cpu["steps"] + cpu["warmup_steps"]
    assert cpu["details"]["final_loss"] == cpu["details"]["losses"][-1] > 0
    sim = launch.run_cell(cells["tiny-llama__sim__baseline"], tmp_path / "s.log")
    assert sim["status"] == "ok" and checks.problems(sim) == [], sim["reason"]
    assert sim["details"]["final_loss"] is None and "fake tensors" in sim["details"]["loss_check"]
