"""The corpus of published GPU memory measurements (matrix/published/corpus.yaml) and its
loader, bench/corpus/published.py: the corpus loads, is broad enough (at least 40 rows from at least 8
independent sources), every row says where and when it was read, and a corrupted copy is
refused with a message that names the row and the key.

    python -m pytest tests/test_published_corpus.py
"""
from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest
import yaml

from bench.corpus import published

GIB = 2**30


@pytest.fixture(scope="module")
def rows():
    return published.load()


def source_of(row: dict) -> str:
    """The independent source a row comes from: the GitHub repository (owner/repo, for both
    ``owner/repo:path`` and github.com URLs), else the web domain."""
    src = row.source
    if src.startswith(("http://", "https://")):
        url = urlparse(src)
        if url.netloc == "github.com":
            return "/".join(url.path.strip("/").split("/")[:2]).lower()
        return url.netloc.lower().removeprefix("www.")
    return src.split(":", 1)[0].lower()


def test_corpus_loads(rows):
    from bench.corpus.row import Row
    assert rows and all(isinstance(r, Row) for r in rows)


def test_at_least_40_rows_from_8_sources(rows):
    sources = {source_of(r) for r in rows}
    assert len(rows) >= 40, len(rows)
    assert len(sources) >= 8, sorted(sources)


def test_every_row_has_a_source_and_when_it_was_read(rows):
    for r in rows:
        assert r.source, r.id
        assert re.fullmatch(r"[0-9a-f]{40}|\d{4}-\d{2}-\d{2}", r.read_at), r.id


def test_value_gib_converts_the_unit_as_written(rows):
    for r in rows:
        assert r.value_gib == pytest.approx(published.gib(r.value, r.unit), rel=0.005), r.id
    by_id = {r.id: r for r in rows}
    assert by_id["tt-8b-lora-4090"].value_gib == pytest.approx(16.2)          # GiB as written
    assert by_id["peft-t0-3b-full"].value_gib == pytest.approx(47.14e9 / GIB, rel=1e-3)  # GB = 1e9 bytes


def test_unmatched_rows_say_why(rows):
    """A row without techniques cannot be simulated as written: it must carry the reason."""
    for r in rows:
        if r.techniques is None:
            assert r.unmatched, r.id


def test_rules_of_thumb_are_marked(rows):
    for r in rows:
        assert (r.source_kind == "rule-of-thumb") == (r.value_kind == "estimate"), r.id


# --- corrupted copies -------------------------------------------------------------------

def corrupted(tmp_path, change) -> str:
    doc = yaml.safe_load(published.DEFAULT.read_text())
    change(doc["rows"])
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def refused(path, *fragments):
    with pytest.raises(published.PublishedError) as exc:
        published.load(path)
    message = str(exc.value)
    assert message.startswith(f"{path}: "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_missing_key_is_refused(tmp_path):
    def drop(rows):
        del rows[3]["measure"]
    rid = yaml.safe_load(published.DEFAULT.read_text())["rows"][3]["id"]
    refused(corrupted(tmp_path, drop), f"rows[{rid}].measure", "required")


@pytest.mark.parametrize("row, key, value, where, says", [
    (0, "gpu_profile", "rtx-9090", "rows[tt-8b-full-4090].gpu_profile", "rtx-9090"),
    (0, "gpu_profile", "cpu", "rows[tt-8b-full-4090].gpu_profile", "'cpu'"),
    (2, "unit", "gigs", "rows[tt-8b-lora-4090].unit", "gigs"),
    (2, "unit", "GB", "rows[tt-8b-lora-4090].value_gib", "0.5%"),   # 16.2 GB is 15.09 GiB, not the 16.2 recorded
    (2, "model_config", "llama-9-8b", "rows[tt-8b-lora-4090].model_config", "llama-9-8b"),
    (2, "techniques", "lora+warp-drive", "rows[tt-8b-lora-4090].techniques", "warp-drive"),
])
def test_a_bad_field_is_refused_naming_its_row_and_key(tmp_path, row, key, value, where, says):
    def bad(rows):
        rows[row][key] = value
    refused(corrupted(tmp_path, bad), where, says)


def test_duplicate_id_is_refused(tmp_path):
    def dup(rows):
        rows[5]["id"] = rows[2]["id"]
    refused(corrupted(tmp_path, dup), "rows[tt-8b-lora-4090].id", "duplicate id")


def test_duplicate_yaml_key_is_refused(tmp_path):
    text = published.DEFAULT.read_text()
    first = text.index("  value: 18.9\n")
    path = tmp_path / "corpus.yaml"
    path.write_text(text[:first] + "  value: 18.9\n  value: 9.9\n" + text[first + len("  value: 18.9\n"):])
    refused(path, "duplicate key 'value'")


# --- roles: development and held-out ---------------------------------------------------------

def test_every_row_has_a_role_and_todays_rows_are_development(rows):
    assert {r.role for r in rows} <= set(published.ROLES)
    # the model was developed against the whole corpus as it stood: no held-out row
    # may claim otherwise without a first score stored with it
    for r in rows:
        assert r.role == "development" or r.first_score is not None, r.id


def test_a_row_without_a_role_is_refused(tmp_path):
    def drop(rows):
        del rows[2]["role"]
    refused(corrupted(tmp_path, drop), "rows[tt-8b-lora-4090].role", "required")


def test_a_development_row_cannot_carry_a_first_score(tmp_path):
    def bad(rows):
        rows[2]["first_score"] = {"error_pct": 1.0, "verdict": "fits", "engine_digest": "0123456789abcdef",
                                  "date": "2026-12-01"}
    refused(corrupted(tmp_path, bad), "rows[tt-8b-lora-4090].first_score", "held-out")


def own_run_row(**over) -> dict:
    """A held-out row of our own GPU measurement, as another session adds them."""
    row = {"id": "own-h200-qwen7b-lora", "role": "held-out", "source": "ft-membench cuda run: results/h200/cells",
           "read_at": "2026-12-01", "source_kind": "own-run", "model": "Qwen2.5-7B", "model_config": "qwen2.5-7b",
           "recipe": "LoRA, bf16, gc", "techniques": "lora+gc+bf16", "batch_size": 1, "seq_len": 2048,
           "gpu": "H200", "gpu_profile": None, "n_gpus": 1, "measure": "allocated", "value_kind": "peak",
           "value": 20.0, "unit": "GiB", "value_gib": 20.0, "tokens_per_s": None, "outcome": "fits",
           "unmatched": None, "notes": None,
           "first_score": {"error_pct": -2.5, "predicted_gib": 19.5, "verdict": "fits",
                           "engine_digest": "0123456789abcdef", "date": "2026-12-01"}}
    row.update(over)
    return row


def typed_row(**over):
    """``own_run_row(**over)`` through the corpus's types (bench/corpus/row.py): a whole, valid ``Row`` for a
    test that builds its own rows (a development row carries no first score)."""
    from bench.corpus.row import Row
    row = own_run_row(**over)
    if row["role"] != "held-out":
        row.pop("first_score")
    return Row.model_validate(row)


def test_a_held_out_own_run_row_with_its_first_score_loads(tmp_path):
    path = corrupted(tmp_path, lambda rows: rows.append(own_run_row()))
    got = {r.id: r for r in published.load(path)}["own-h200-qwen7b-lora"]
    assert got.first_score.engine_digest == "0123456789abcdef"


def test_a_first_score_without_its_engine_digest_is_refused(tmp_path):
    row = own_run_row()
    del row["first_score"]["engine_digest"]
    refused(corrupted(tmp_path, lambda rows: rows.append(row)), "first_score", "engine_digest")


# --- one copy of each published row: the studies name corpus rows ------------------

def test_studies_read_their_published_figures_from_the_corpus(rows):
    from bench.cells import matrix
    by_id = {r.id: r for r in rows}
    cells = [s for s in matrix.load().values() if s.get("published")]
    assert len(cells) == 13        # torchtune's 3B table (10) and its 8B rows on the RTX 4090 (3)
    for s in cells:
        pub, row = s["published"], by_id[s["published"]["row"]]
        assert pub["peak_gib"] == row.value_gib and pub["measure"] == row.measure, s["cell"]
        assert pub.get("tokens_per_s") == row.tokens_per_s and sorted(row.techniques.split("+")) == sorted(s["techniques"])
    text = (published.ROOT / "matrix" / "default.yaml").read_text()
    assert "peak_gib" not in text and "tokens_per_s:" not in text      # no figure restated


@pytest.mark.parametrize("ref, says", [("tt-9b-nothing", "no row 'tt-9b-nothing'"),
                                       ("tt-8b-lora-4090", "maps to techniques lora+")])
def test_a_study_naming_a_missing_or_other_row_is_refused(tmp_path, ref, says):
    from bench.cells import matrix
    from bench.cells.matrixfile import MatrixError
    from tests.helpers import write_matrix
    study = {"mode": "sim", "models": ["llama-3.1-8b"], "gpus": ["rtx-4090"], "techniques": ["qlora+gc"],
             "exclude": [{"techniques": "baseline"}], "published": {"qlora+gc": ref}}
    with pytest.raises(MatrixError) as exc:
        matrix.load(write_matrix(tmp_path, {"s": study}))
    assert "studies.s.published.qlora+gc" in str(exc.value) and says in str(exc.value)
