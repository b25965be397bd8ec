"""Any model: a name in matrix/models, a config.json path or folder, or a Hugging Face id in
the local cache (offline), resolved by bench/cells/modelref.py for the matrix and the command line;
transformers decides whether it reads the config; remote code only where the user opts in."""
import json
import re
import shutil

import pytest

from bench.cells import matrix, modelref
from tests.helpers import MATRIX_DIR, TINY_SHAPE

TINY = json.loads((MATRIX_DIR / "models" / "tiny-llama.json").read_text())
CELL_ID = re.compile(r"^[a-z0-9.+_-]+$")


def _config(folder, change=None, name="config.json"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps({**TINY, **(change or {})}))
    return folder / name


def _hf_cache(root, repo_id, config, files=None, commit="0123456789abcdef0123456789abcdef01234567"):
    """A Hugging Face hub cache as huggingface_hub lays it out: blobs, refs/main, snapshots/<commit>."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for name, text in {"config.json": json.dumps(config), **(files or {})}.items():
        blob = repo / "blobs" / f"blob-{name}"
        blob.write_text(text)
        (snap / name).symlink_to(blob)
    return snap


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def test_a_name_in_the_models_folder(tmp_path):
    name, config, source = modelref.resolve("tiny-llama")
    assert name == "tiny-llama" and config == TINY and source.endswith("matrix/models/tiny-llama.json")
    model = modelref.resolve("qwen3-30b-a3b")
    assert model.causal_lm == "Qwen3MoeForCausalLM" and model.skip_reason == ""
    assert model.spec_fields() == {"model": "qwen3-30b-a3b", "model_config": str(MATRIX_DIR / "models" / "qwen3-30b-a3b.json")}


def test_a_config_path_or_its_folder(tmp_path, monkeypatch):
    file = _config(tmp_path / "My_Model v2")
    by_file = modelref.resolve(file)
    by_dir = modelref.resolve(file.parent)
    assert by_file.name == by_dir.name == "my-model-v2" and by_file.config == TINY
    assert by_file.path == by_dir.path == file.resolve() and by_file.causal_lm == "LlamaForCausalLM"
    _config(tmp_path / "cfgs", name="Tiny.Llama.json")
    monkeypatch.chdir(tmp_path)
    assert modelref.resolve("cfgs/Tiny.Llama.json").name == "tiny.llama"  # relative to the working directory


def test_a_hugging_face_id_in_the_local_cache_resolves_offline(hf_cache):
    snap = _hf_cache(hf_cache, "SomeOrg/Tiny-Llama-HF", TINY)
    name, config, source = model = modelref.resolve("SomeOrg/Tiny-Llama-HF")
    assert name == "tiny-llama-hf" and config == TINY and "SomeOrg/Tiny-Llama-HF@0123456789ab" in source
    assert model.path == snap / "config.json"
    assert modelref.resolve(f"SomeOrg/Tiny-Llama-HF@{'0123456789abcdef' * 2 + '01234567'}").path == model.path
    assert modelref.resolve(snap).name == "tiny-llama-hf"  # a snapshot folder is named for its repository


@pytest.mark.parametrize("arg, says", [
    ("tiny-lama", "model tiny-lama: not a name in .* \\(known: .*tiny-llama.*\\), not a file or folder, and not in "
                  "the local Hugging Face cache"),
    ("Org/Missing", "model Org/Missing: .*not in the local Hugging Face cache .*nothing is downloaded"),
    ("./nowhere/config.json", "model ./nowhere/config.json: no such file or folder"),
    ("what is this?", "model 'what is this\\?': not a name in"),
])
def test_an_unknown_model_is_one_line_naming_it(hf_cache, arg, says):
    with pytest.raises(modelref.ModelError) as err:
        modelref.resolve(arg)
    assert "\n" not in str(err.value) and re.match(says, str(err.value)), str(err.value)


@pytest.mark.parametrize("text, says", [
    ("{not json", "not valid JSON"),
    ("[1]", "a model config must be a JSON object, not list"),
    ('{"hidden_size": 8}', "model_type missing"),
    ('{"model_type": "no-such-arch", "hidden_size": 8}',
     "transformers .* does not know model_type 'no-such-arch' and the config names no code for it"),
    ('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 5}',
     "transformers .* cannot read it: .*The hidden size \\(64\\) is not a multiple"),
])
def test_a_config_transformers_cannot_read_is_one_line_naming_the_file(tmp_path, text, says):
    file = tmp_path / "bad" / "config.json"
    file.parent.mkdir()
    file.write_text(text)
    with pytest.raises(modelref.ModelError) as err:
        modelref.resolve(file)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"model {file}: ") and re.search(says, msg), msg


def test_a_config_with_no_causal_lm_class_resolves_with_a_skip_reason(tmp_path):
    t5 = tmp_path / "t5" / "config.json"
    t5.parent.mkdir()
    t5.write_text(json.dumps({"model_type": "t5", "d_model": 64, "num_layers": 2, "num_heads": 2, "vocab_size": 128}))
    model = modelref.resolve(t5)
    assert model.causal_lm is None and "has no causal-LM class (AutoModelForCausalLM) for model_type 't5'" in \
        model.skip_reason


REMOTE_CONFIG = {**TINY, "model_type": "tiny_remote", "auto_map": {
    "AutoConfig": "configuration_tiny.TinyRemoteConfig", "AutoModelForCausalLM": "modeling_tiny.TinyRemoteForCausalLM"}}
REMOTE_CODE = {
    "configuration_tiny.py": "from transformers import LlamaConfig\n\n\nclass TinyRemoteConfig(LlamaConfig):\n"
                             "    model_type = 'tiny_remote'\n",
    "modeling_tiny.py": "from transformers import LlamaForCausalLM\n\nfrom .configuration_tiny import TinyRemoteConfig\n\n\n"
                        "class TinyRemoteForCausalLM(LlamaForCausalLM):\n    config_class = TinyRemoteConfig\n",
}


def test_remote_code_is_refused_unless_the_user_opts_in(hf_cache, tmp_path, matrix_file):
    _hf_cache(hf_cache, "someone/tiny-remote", REMOTE_CONFIG, REMOTE_CODE)
    with pytest.raises(modelref.ModelError, match="its config names its own code .*runs only with trust_remote_code"):
        modelref.resolve("someone/tiny-remote")
    model = modelref.resolve("someone/tiny-remote", trust_remote_code=True)
    assert model.causal_lm == "modeling_tiny.TinyRemoteForCausalLM"
    assert model.spec_fields()["trust_remote_code"] is True
    study = {"s": {"mode": "cpu", "models": ["someone/tiny-remote"], "gpus": ["cpu"], "techniques": ["gc"]}}
    with pytest.raises(matrix.MatrixError, match=r"studies.s.models\[0\]: model someone/tiny-remote@.*trust_remote_code"):
        matrix.load(matrix_file(study))
    cells = matrix.load(matrix_file(study, model_options={"someone/tiny-remote": {"trust_remote_code": True}}))
    assert cells["tiny-remote__cpu__gc"]["trust_remote_code"] is True
    with pytest.raises(matrix.MatrixError, match="model_options.other: names no model of any study"):
        matrix.load(matrix_file(study, model_options={"other": {"trust_remote_code": True}}))


@pytest.mark.slow
def test_a_trusted_remote_code_model_runs_on_the_cpu(hf_cache, tmp_path, matrix_file):
    from bench.records import checks
    from bench.runner import launch
    _hf_cache(hf_cache, "someone/tiny-remote", REMOTE_CONFIG, REMOTE_CODE)
    study = {"s": {"mode": "cpu", "models": ["someone/tiny-remote"], "gpus": ["cpu"], "techniques": ["lora"]}}
    cells = matrix.load(matrix_file(study, model_options={"tiny-remote": {"trust_remote_code": True}}))
    rec = launch.run_cell(cells["tiny-remote__cpu__lora"], tmp_path / "remote.log")
    assert rec["status"] == "ok", rec["reason"] + rec["log_tail"]
    assert checks.problems(rec) == [] and rec["params_trainable"] > 0


def test_a_matrix_takes_a_config_path_and_its_digest_follows_the_file(matrix_file, tmp_path):
    file = _config(tmp_path / "models-elsewhere" / "Tiny Custom")
    study = {"s": {"mode": "cpu", "models": ["tiny-llama", str(file.parent)], "gpus": ["cpu"], "techniques": ["gc"]}}
    path = matrix_file(study)
    cells = matrix.load(path)
    assert list(cells) == ["tiny-llama__cpu__baseline", "tiny-llama__cpu__gc",
                           "tiny-custom__cpu__baseline", "tiny-custom__cpu__gc"]
    assert all(CELL_ID.match(cid) for cid in cells)
    spec = cells["tiny-custom__cpu__gc"]
    assert spec["model"] == "tiny-custom" and spec["model_config"] == str(file.resolve())
    assert "trust_remote_code" not in spec
    assert spec["inputs_sha256"]["model_config"] == cells["tiny-llama__cpu__gc"]["inputs_sha256"]["model_config"]
    file.write_text(json.dumps({**TINY, "num_hidden_layers": 3}))
    after = matrix.load(path)
    assert after["tiny-custom__cpu__gc"]["inputs_sha256"]["model_config"] != spec["inputs_sha256"]["model_config"]
    assert after["tiny-llama__cpu__gc"] == cells["tiny-llama__cpu__gc"]
    # relative to the matrix's folder; an exclude rule may name it as written or by its cell name
    rel = {"s": {**study["s"], "models": ["Tiny Custom"], "exclude": [{"model": "tiny-custom", "techniques": "gc"}]}}
    shutil.copytree(file.parent, tmp_path / "Tiny Custom")
    assert list(matrix.load(matrix_file(rel))) == ["tiny-custom__cpu__baseline"]


def test_two_models_that_make_one_cell_name_are_refused(matrix_file, tmp_path):
    a = _config(tmp_path / "a" / "tiny-llama")
    _config(tmp_path / "a" / "tiny-llama", {"num_hidden_layers": 3})
    study = {"s": {"mode": "cpu", "models": ["tiny-llama", str(a.parent)], "gpus": ["cpu"], "techniques": ["gc"]}}
    with pytest.raises(matrix.MatrixError, match=r"studies.s.models\[1\]: models 'tiny-llama' and .* both make the cell "
                                                 r"name 'tiny-llama'"):
        matrix.load(matrix_file(study))


def test_a_matrix_with_a_config_transformers_cannot_read_stops_at_load(matrix_file, tmp_path):
    bad = _config(tmp_path / "odd", {"model_type": "not-an-arch"})
    path = matrix_file({"s": {"mode": "sim", "models": ["qwen2.5-7b", str(bad)], "gpus": ["h100-80gb"],
                              "techniques": ["lora"]}})
    with pytest.raises(matrix.MatrixError) as err:
        matrix.load(path)
    assert str(err.value).startswith(f"{path}: studies.s.models[1]: model {bad.resolve()}: transformers "), str(err.value)
    assert "'not-an-arch'" in str(err.value)


def test_a_model_without_a_causal_lm_class_gives_skipped_cells(matrix_file, tmp_path):
    from bench.runner import launch
    t5 = tmp_path / "t5-small" / "config.json"
    t5.parent.mkdir()
    t5.write_text(json.dumps({"model_type": "t5", "d_model": 64, "num_layers": 2, "num_heads": 2, "vocab_size": 128}))
    cells = matrix.load(matrix_file({"s": {"mode": "sim", "models": [str(t5.parent)], "gpus": ["h100-80gb"],
                                           "techniques": ["lora"], **TINY_SHAPE}}))
    rec = launch.run_cell(cells["t5-small__sim__lora"], tmp_path / "t5.log")
    assert rec["status"] == "skipped" and "no causal-LM class" in rec["reason"]


@pytest.mark.slow
def test_an_architecture_fake_tensors_cannot_run_is_a_skipped_sim_record(matrix_file, tmp_path):
    """Mixtral with transformers' eager experts loop (``experts_implementation: eager``): the
    loop over ``nonzero()`` has a data-dependent shape, which FakeTensorMode refuses; with its
    default grouped_mm experts it runs in bf16, and fp32 weights meet grouped_mm's bf16-only
    fake kernel."""
    from bench.runner import launch
    mixtral = json.loads((MATRIX_DIR / "models" / "mixtral-8x7b.json").read_text())
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256, max_position_embeddings=512)
    _config(tmp_path / "mix-eager", {**mixtral, **small, "experts_implementation": "eager"})
    _config(tmp_path / "mix-grouped", {**mixtral, **small})
    models = [str(tmp_path / "mix-eager"), str(tmp_path / "mix-grouped")]
    cells = matrix.load(matrix_file({"s": {"mode": "sim", "models": models, "gpus": ["h100-80gb"],
                                           "techniques": ["lora+bf16"], **TINY_SHAPE}}))
    eager = launch.run_cell(cells["mix-eager__sim__lora+bf16"], tmp_path / "eager.log")
    assert eager["status"] == "skipped", eager["reason"] + eager["log_tail"]
    assert eager["reason"].startswith("sim cannot run this architecture under fake tensors") and "nonzero" in eager["reason"]
    grouped = launch.run_cell(cells["mix-grouped__sim__lora+bf16"], tmp_path / "grouped.log")
    assert grouped["status"] == "ok", grouped["reason"] + grouped["log_tail"]
    assert grouped["details"]["moe"]["experts_implementation"] == "grouped_mm"
    fp32 = launch.run_cell(cells["mix-grouped__sim__baseline"], tmp_path / "fp32.log")  # fp32 weights
    assert fp32["status"] == "skipped", fp32["reason"] + fp32["log_tail"]
    assert "fake (meta) kernel for grouped_mm" in fp32["reason"] and "Expected inputs of BF16 type" in fp32["reason"]


@pytest.mark.slow
def test_a_mixture_of_experts_model_runs_in_sim(matrix_file, tmp_path):
    """Qwen3-30B-A3B at batch 1 x 2048: bf16 LoRA and QLoRA with checkpointing. Its 128
    experts per layer are fused 3D tensors, run by torch's grouped_mm; bitsandbytes quantizes
    nn.Linear only, so QLoRA leaves them in bf16 and saves only the attention weights."""
    from tests.helpers import ok, run_cells
    study = {"mode": "sim", "models": ["qwen3-30b-a3b"], "gpus": ["h100-80gb", "l40s"], "batch_size": 1,
             "seq_len": 2048, "techniques": ["lora+gc+bf16", "qlora+gc"], "exclude": [{"techniques": "baseline"}]}
    cells = matrix.load(matrix_file({"s": study}))
    recs = run_cells(list(cells.values()), tmp_path)
    lora, qlora = ok(recs, "lora+gc+bf16"), ok(recs, "qlora+gc")
    experts = 48 * 128 * 3 * 2048 * 768
    for rec in (lora, qlora):
        moe = rec["details"]["moe"]
        assert moe["experts_implementation"] == "grouped_mm" and moe["expert_params"] == experts
        assert moe["expert_dtypes"] == ["bfloat16"] and moe["experts_quantized"] is False
        assert rec["params_total"] > 30e9 and rec["verdicts"] == {"h100-80gb": "fits", "l40s": "oom"}
        assert rec["breakdown_bytes"]["parameters"] >= 2 * experts  # the experts alone, in bf16
    assert "quantizes nn.Linear modules only" in qlora["details"]["moe"]["note"]
    assert qlora["details"]["dtypes"]["quantized_weights"] == ["nf4 in uint8"]  # the attention projections
    assert 0 < lora["peak_bytes"] - qlora["peak_bytes"] < 0.05 * lora["peak_bytes"]  # QLoRA saves little here
