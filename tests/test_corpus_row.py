"""The corpus row as a type (bench/corpus/row.py): the schema file is what the types make, other tools can
validate the corpus with it, and a row is read by attribute, frozen, with no silent default for a typo."""
from __future__ import annotations

import jsonschema
import pydantic
import pytest
import yaml

from bench.corpus import published, row


@pytest.fixture(scope="module")
def doc():
    return yaml.safe_load(published.DEFAULT.read_text())


def test_the_schema_file_is_the_one_the_types_make(capsys):
    assert row.main(["--check-schema"]) == 0, "python -m bench.corpus.row --write-schema"
    assert row.SCHEMA_PATH.read_text() == row.schema_text()


def test_the_generated_schema_validates_the_corpus_as_the_types_do(doc):
    """An editor or another tool reading only corpus.schema.json accepts what load() accepts, and refuses a
    unit that is not one, as load() does."""
    validator = jsonschema.Draft202012Validator(row.schema())
    assert not list(validator.iter_errors(doc))
    bad = {"rows": [dict(doc["rows"][0], unit="gigs")]}
    assert list(validator.iter_errors(bad))
    with pytest.raises(pydantic.ValidationError):
        row.Corpus.model_validate(bad)


def test_a_row_is_read_by_attribute_frozen_and_a_typo_fails_loudly():
    first = published.load()[0]
    assert isinstance(first, row.Row) and first.model_config_name and first.as_dict()["model_config"] == first.model_config_name
    with pytest.raises(AttributeError):
        first.gpu_profle          # noqa: B018  a typo is an error, never a None
    with pytest.raises(pydantic.ValidationError):
        first.value_gib = 1.0     # the published figure cannot be changed in flight


def test_every_field_the_schema_requires_is_required_by_the_type(doc):
    required = set(row.schema()["$defs"]["Row"]["required"])
    assert {"id", "role", "source", "measure", "value", "unit", "value_gib", "outcome", "model_config"} <= required
    assert not {"gap", "lacks_source", "lacks_ours", "first_score"} & required   # optional, as the corpus writes them
    for key in required:
        broken = dict(doc["rows"][0])
        del broken[key]
        with pytest.raises(pydantic.ValidationError):
            row.Row.model_validate(broken)


def test_a_string_where_a_number_stands_is_refused_not_coerced(tmp_path, doc):
    """Strict types: "16.2" in a value field is a corrupted figure, refused naming the row and key."""
    doc = dict(doc, rows=[dict(doc["rows"][2], value="16.2")])
    path = tmp_path / "corpus.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(published.PublishedError, match=r"rows\[tt-8b-lora-4090\]\.value: .*'16.2'"):
        published.load(path)
