"""A row of the published corpus (matrix/published/corpus.yaml) as a type, and the corpus's JSON schema made from it.

    python -m bench.corpus.row --write-schema   # matrix/published/corpus.schema.json, from the types below
    python -m bench.corpus.row --check-schema   # exit 1 where the file is not what the types make

The types are the one statement of what a row holds: ``bench.corpus.published.load`` validates the YAML
through them and hands out ``Row`` objects (attribute access, frozen), and the schema file that editors
and other tools read is generated from them, so the two cannot drift (tests/test_corpus_row.py). pydantic
(already installed with DeepSpeed, which builds its own config on it) rather than msgspec: its models
carry the field descriptions, patterns and bounds into the generated JSON schema, and its error
locations name the field, which ``published.load`` turns into ``file: rows[<id>].<field>: reason``.

Cross-field rules (model_config and gpu_profile exist, techniques parse, ids are unique, value_gib agrees
with value and unit, gap agrees with its lists, only a held-out row carries a first score) need the
matrix's files: ``published.load`` checks them after the types.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "matrix" / "published" / "corpus.schema.json"

Text = Annotated[str, StringConstraints(min_length=1)]
Count = Annotated[int, Field(ge=1)]
Positive = Annotated[float, Field(gt=0)]
Role = Literal["development", "held-out"]
SourceKind = Literal["readme", "docs", "paper", "blog", "issue", "results-file", "rule-of-thumb", "own-run"]
Measure = Literal["allocated", "active", "reserved", "nvidia-smi", "not-stated"]
ValueKind = Literal["peak", "capacity", "estimate"]
Unit = Literal["GiB", "GB", "MiB", "MB", "bytes"]
Outcome = Literal["fits", "oom", "not-stated"]
Gap = Literal["source", "ours", "both"]
# what a run does that ft-membench does not simulate yet, in the words of the config readers that refuse it: a
# preference or RL stage (bench/cells/trainconfig/stage.py) or a parallelism (bench/cells/trainconfig/parallel.py)
Beyond = Literal["dpo", "kto", "orpo", "grpo", "ppo", "rm", "tensor", "context", "sequence", "pipeline"]

SOURCE = r"^(https?://\S+|[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*:\S+|ft-membench cuda run(: \S+)?)$"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class FirstScore(_Frozen):
    """A held-out row's first score by ft-membench, stored when the row entered (python -m
    bench.corpus.scoreboard --record-first-scores); never rewritten."""
    error_pct: Optional[float] = Field(description="signed error in percent, predicted / published - 1 (null: the row "
                                                   "is no measured peak or was not covered)")
    predicted_gib: Optional[Annotated[float, Field(ge=0)]] = None
    verdict: Optional[Literal["fits", "oom"]] = Field(description="ft-membench's verdict on the row's GPU")
    engine_digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{8,64}$")] = Field(
        description="bench.cells.inputs.engine_digest() of the code that scored it")
    date: Annotated[str, StringConstraints(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]


class Row(_Frozen):
    """One published measurement: who ran what, on which GPU, and what memory it reported."""
    id: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9.-]*$", max_length=64)] = Field(
        description="short slug, unique in the corpus")
    role: Role = Field(description="development: seen while the model was built or calibrated; held-out: added after, "
                                   "never used to change the model (its first score is stored in first_score)")
    source: Annotated[str, StringConstraints(pattern=SOURCE)] = Field(
        description="a URL, owner/repo:path, or 'ft-membench cuda run' (optionally ': <results path>') for our own "
                    "GPU measurement")
    read_at: Annotated[str, StringConstraints(pattern=r"^([0-9a-f]{40}|[0-9]{4}-[0-9]{2}-[0-9]{2})$")] = Field(
        description="the commit the file was read at (40 hex digits), or the date a page was read (YYYY-MM-DD)")
    source_kind: SourceKind
    model: Text = Field(description="the model as the source names it")
    model_config_name: Optional[Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*$")]] = Field(
        alias="model_config", description="a file name (without .json) in matrix/models, or null")
    recipe: Text = Field(description="the recipe as the source states it")
    techniques: Optional[Annotated[str, StringConstraints(pattern=r"^[a-z0-9.-]+(\+[a-z0-9.-]+)*$")]] = Field(
        description="our technique names joined by '+', or null where the recipe cannot be matched")
    batch_size: Optional[Count]
    seq_len: Optional[Count]
    gpu: Optional[Text] = Field(description="the GPU as stated")
    gpu_profile: Optional[str] = Field(description="a key of matrix/gpus.yaml, or null")
    n_gpus: Optional[Count]
    measure: Measure
    value_kind: ValueKind = Field(description="peak: a measured peak per GPU; capacity: the memory of the card the "
                                              "recipe fit in (or ran out of); estimate: a rule of thumb")
    value: Positive
    unit: Unit = Field(description="as the source writes it")
    value_gib: Positive = Field(description="value converted to GiB (2**30 bytes)")
    tokens_per_s: Optional[Positive]
    outcome: Outcome
    unmatched: Optional[Text] = Field(description="null, or why the settings cannot be matched")
    gap: Optional[Gap] = Field(None, description="only on a row not simulated: why not. source = the source does not "
                                                 "state what a simulation needs; ours = it does, and ft-membench lacks "
                                                 "a model config, GPU profile or technique; both")
    lacks_source: list[Text] = Field(default_factory=list, description="what the source does not state that a simulation needs "
                                                           "(model, gpu, batch size, sequence length, a setting)")
    lacks_ours: list[Text] = Field(default_factory=list, description="what ft-membench lacks although the source states it "
                                                         "('model config: ...', 'GPU profile: ...', 'technique: ...')")
    notes: Optional[Text]
    beyond: list[Beyond] = Field(default_factory=list, description=(
        "what the run does that ft-membench does not simulate yet: a preference or RL stage (dpo, kto, orpo, grpo, ppo, "
        "rm) or a parallelism (tensor, context, sequence, pipeline); `ft-membench fit` shows such rows beside its "
        "refusal of a config of that kind"))
    first_score: Optional[FirstScore] = None

    # ``model_config`` is pydantic's own name on a model class: the row's field of that name is
    # ``model_config_name`` here, read and written as ``model_config`` (its alias)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)

    def as_dict(self) -> dict:
        """The row as the YAML writes it (``model_config`` by its own name; unset optional keys left out)."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class Corpus(_Frozen):
    """matrix/published/corpus.yaml. Every row has a role (development or held-out); only a held-out row carries
    first_score. Cross-field rules (model_config and gpu_profile exist, techniques parse, ids unique, value_gib
    agrees with value and unit, gap agrees with lacks_source and lacks_ours) are checked by
    bench/corpus/published.py."""
    rows: Annotated[list[Row], Field(min_length=1)]


def schema() -> dict:
    """The corpus's JSON schema, made from the types (draft 2020-12)."""
    doc = Corpus.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **doc,
            "title": "ft-membench corpus of published GPU memory measurements for fine-tuning"}


def schema_text() -> str:
    return json.dumps(schema(), indent=2) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--write-schema", action="store_true", help=f"write {SCHEMA_PATH.name} from the types")
    what.add_argument("--check-schema", action="store_true", help="exit 1 where the file differs from the types")
    args = ap.parse_args(argv)
    if args.write_schema:
        SCHEMA_PATH.write_text(schema_text())
        print(f"{SCHEMA_PATH}: written from bench/corpus/row.py")
        return 0
    if SCHEMA_PATH.read_text() != schema_text():
        print(f"{SCHEMA_PATH}: not what bench/corpus/row.py makes (python -m bench.corpus.row --write-schema)",
              file=sys.stderr)
        return 1
    print(f"{SCHEMA_PATH}: as the types make it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
