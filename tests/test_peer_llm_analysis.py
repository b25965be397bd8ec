"""llm-analysis as a scoreboard peer (bench/corpus/peer_llm_analysis.py): our techniques in its terms, what
it refuses with its own reason, and the reference scoreboard's figures reproduced through its API."""
import json
from pathlib import Path

import pytest

from bench.cells import techniques as tech
from bench.corpus import peer_llm_analysis as la
from bench.corpus import published
from bench.corpus import published_matrix as pm
from bench.corpus import scoreboard as sb

ROOT = Path(__file__).resolve().parents[1]
BY_ID = {r.id: r for r in published.load()}
ROW = "h200-llama-3.2-1b-bf16-alloc"   # a full bf16 fine-tune of Llama-3.2-1B (FFN 4 x hidden: it answers)


@pytest.mark.parametrize("names, master, state, zero", [
    (["bf16"], 2, 4, "NONE"),                      # pure bf16: its master copy in bf16, bf16 moments
    (["amp-bf16", "gc"], 4, 8, "NONE"),            # autocast: fp32 master and moments
    (["adamw8bit", "gc", "bf16"], 2, 2, "NONE"),
    (["zero2", "bf16", "w2"], 2, 4, "STAGE_2"),
    (["fsdp", "bf16", "w2"], 2, 4, "STAGE_3"),     # FULL_SHARD shards as ZeRO-3
])
def test_our_knobs_in_its_terms(names, master, state, zero):
    args, unexpressed = la.training_args(tech.knobs(names), 2, 1024)
    assert (args["master_weights_dtype_bytes"], args["other_op_bytes"], args["ds_zero"]) == (master, state, zero)
    assert args["activation_recomputation"] == ("FULL" if "gc" in names else "NONE")
    assert any("logits" in u for u in unexpressed)
    assert ("FSDP as ZeRO-3" in unexpressed) == ("fsdp" in names)


@pytest.mark.parametrize("names, why", [
    (["lora", "gc", "bf16"], "full training only"), (["qlora", "gc"], "full training only"),
    (["baseline"], "32-bit weights"), (["zero3-offload", "bf16", "w2"], "offload"),
    (["adafactor", "bf16"], "no optimizer-state bytes"),
])
def test_what_it_cannot_model_is_unanswerable_with_its_reason(names, why):
    with pytest.raises(la.Unanswerable, match=why):
        la.training_args(tech.knobs(names), 1, 512)


def test_not_installed_covers_no_row_and_says_how(monkeypatch):
    monkeypatch.setattr(la, "unavailable", lambda: f"not run: not installed (`{la.INSTALL}`)")
    e = pm.plan([BY_ID[ROW]])[0]
    got = sb._peer(la, BY_ID[ROW], e, sb._gpus())
    assert not got["covered"] and "--no-deps llm-analysis" in got["why_not"]


def test_a_model_its_config_refuses_is_not_covered_with_its_message():
    pytest.importorskip("llm_analysis", reason=f"llm-analysis is an optional peer: {la.INSTALL}")
    row = next(r for r in BY_ID.values() if r.model_config_name == "llama-3.1-8b" and r.techniques
               and "lora" not in r.techniques and r.techniques.split("+")[0] in ("bf16", "gc", "amp-bf16"))
    with pytest.raises(la.Unanswerable, match="ffn_embed_dim .* must be divisible by hidden_dim"):
        la.estimate(row, None, 80 * 2**30)


def test_the_reference_scoreboard_figures_are_its_api_s():
    pytest.importorskip("llm_analysis", reason=f"llm-analysis is an optional peer: {la.INSTALL}")
    board = json.loads((ROOT / "results" / "reference" / "published" / "scoreboard.json").read_text())
    covered = {r["row"]: r["tools"][la.NAME] for r in board["rows"] if r["tools"][la.NAME]["covered"]}
    assert ROW in covered and len(covered) >= 5
    for rid, stored in covered.items():
        row = BY_ID[rid]
        got = la.estimate(row, pm.plan([row])[0]["options"], sb._gpus()[row.gpu_profile]["memory_bytes"])
        assert got["bytes"] == stored["predicted_bytes"], rid
    # weights + gradients + its bf16 master copy + bf16 moments: 10 bytes a parameter before activations
    params = 1_235_814_400   # Llama-3.2-1B, tied embeddings
    assert covered[ROW]["predicted_bytes"] > 10 * params
