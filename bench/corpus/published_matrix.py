"""The sim matrix of the published corpus: one cell per corpus row whose settings can be matched.

    python -m bench.corpus.published_matrix --out matrix/published.yaml     # (re)write the committed file
    python -m bench.corpus.published_matrix --check matrix/published.yaml   # exit 1 if it is stale

Torch-free. Reads matrix/published/corpus.yaml (bench/corpus/published.py) and writes a matrix YAML
(bench/cells/matrix.py loads it like any other) whose studies are named ``published-...``, so that

    pytest bench -k published          # bench/test_published.py: one test per corpus row
    pytest bench --matrix matrix/published.yaml -k published   # the same cells as plain matrix cells
    snakemake --cores 1 published      # results/published/: cells, table, scoreboard, report

A row is simulated when it names a model config, our techniques, a GPU profile, a batch size and
a sequence length, and its techniques' world size is its number of GPUs. Every other row stays
in the plan with the reason it is not simulated (``plan``); the committed file lists them in its
header. A row whose own ``unmatched`` note is set but whose settings are all stated is simulated,
and the note stays beside its result (the scoreboard shows it).

Rows are grouped into studies by what a study fixes: model, GPU profile (the verdict's GPU), batch
size, sequence length and LoRA options. Each study is sim mode, 1 step after 1 warm-up, without
the baseline cell (a full fp32 fine-tune is no corpus row). LoRA options are not corpus fields:
``LORA_OPTIONS`` holds them per row, from the config the source's row ran (each entry says where
it was read). A cell id names model and techniques, not options; where two rows would make the
same cell id with different settings (peft's LoRA rank 32 and rank 64 rows), the later row's cell
spells its batch and sequence as techniques too (``+b4+s768``: the same shape, another id), and a third
its batch alone (``+b4``: peft's rank-10 MLP row beside those two).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from bench.corpus import published
from bench.cells import catalogue, workloads
from bench.cells import techniques as tech
from bench.corpus.row import Row

ROOT = published.ROOT
DEFAULT_OUT = ROOT / "matrix" / "published.yaml"



def _matrix_lora(name: str) -> dict:
    """A matrix file's top-level LoRA options over the defaults, as its cells hold them: one copy of them."""
    doc = yaml.safe_load((ROOT / "matrix" / name).read_text())
    return {**catalogue.LORA_DEFAULTS, **doc.get("technique_options", {}).get("lora", {})}


def _study_lora(study: str) -> dict:
    """A default-matrix study's LoRA options, read from matrix/default.yaml: one copy of them."""
    import yaml
    doc = yaml.safe_load((ROOT / "matrix" / "default.yaml").read_text())
    return dict(doc["studies"][study]["technique_options"]["lora"])


# LoRA options of the matched rows, by row id prefix (the longest matching prefix wins).
LORA_OPTIONS: dict[str, dict] = {
    # torchtune recipes/configs/llama3_2/3B_{lora,qlora}_single_device.yaml: rank 64, alpha 128, q/v/output
    # projections and the MLP, adapters trained in bf16: study sim-torchtune-3b's options
    "tt-3b-": _study_lora("sim-torchtune-3b"),
    # torchtune recipes/configs/llama3_1/8B_{lora,qlora}_single_device.yaml: rank 8, alpha 16, the same targets:
    # study sim-torchtune-8b-4090's options
    "tt-8b-": _study_lora("sim-torchtune-8b-4090"),
    # peft method_comparison/MetaMathQA experiment configs: rank as the row says, q_proj and v_proj,
    # peft's default fp32 adapters (the row's recipe text)
    "peft-mmqa-lora-r32": {"r": 32, "target_modules": ["q_proj", "v_proj"], "adapter_dtype": "fp32"},
    "peft-mmqa-lora-r64": {"r": 64, "target_modules": ["q_proj", "v_proj"], "adapter_dtype": "fp32"},
    "peft-mmqa-dora-r32": {"r": 32, "target_modules": ["q_proj", "v_proj"], "adapter_dtype": "fp32"},
    # held out: rsLoRA changes only the adapter's scaling, so its row shares the rank-64 cell
    "peftmc-lora-r64-rslora": {"r": 64, "target_modules": ["q_proj", "v_proj"], "adapter_dtype": "fp32"},
    # held out: its experiment (lora/llama-3.2-3B-rank10-target-mlp, the row's recipe): rank 10, alpha 20 on the MLP
    # projections only; peft's default dropout 0.0 and fp32 adapters
    "peftmc-lora-r10-mlp": {"r": 10, "alpha": 20, "target_modules": ["up_proj", "gate_proj", "down_proj"],
                            "adapter_dtype": "fp32"},
    # our own H200 runs: matrix/cuda-h200.yaml's technique_options
    "h200-": _matrix_lora("cuda-h200.yaml"),
    # our own H200 FSDP1 rank runs: matrix/cuda-h200-fsdp1.yaml's technique_options (fms-acceleration's)
    "own-h200-fsdp1-": _matrix_lora("cuda-h200-fsdp1.yaml"),
    # ft-membench measure's rows: the fit command's LoRA settings (bench/cells/catalogue.py LORA_DEFAULTS)
    "own-": dict(catalogue.LORA_DEFAULTS),
    # peft docs/source/accelerate/{deepspeed,fsdp}.md launch commands (read at 09802c1b): --lora_r 8 --lora_alpha 16
    # --lora_dropout 0.1 --lora_target_modules "all-linear" (the rows' lora-all)
    "peft-ds-z3-lora-llama2-70b": {"r": 8, "alpha": 16, "dropout": 0.1},
    "peft-fsdp-lora-llama2-70b": {"r": 8, "alpha": 16, "dropout": 0.1},
    "peft-ds-z3-qlora-llama2-70b": {"r": 8, "alpha": 16, "dropout": 0.1},
    # held out: fitcheck-llm's scripts/measure.py (Anassbzdd/fitcheck at a5f51384): LoraConfig(r, lora_alpha=2r,
    # lora_dropout=0.0, bias="none") on q,k,v,o ("standard" preset); peft's default fp32 adapters. Its README
    # tables ran r=32; its final holdout file (final-t4-20260921.json) r=16
    "fc-": {"r": 32, "alpha": 64, "dropout": 0.0, "adapter_dtype": "fp32",
            "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    "fc-final-": {"r": 16, "alpha": 32, "dropout": 0.0, "adapter_dtype": "fp32",
                  "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    # held out: Lightning-AI/litgpt finetune/lora.py at 8641822 (the resource table's commit): lora_r 8, lora_alpha 16,
    # lora_dropout 0.05, lora_query and lora_value only; --precision bf16-true, so the adapters are bf16
    # (Llama 2 and phi-1.5: q_proj and v_proj; GPT-NeoX and Falcon fuse them: peft adapts the fused query_key_value)
    "litgpt-llama2-": {"r": 8, "alpha": 16, "dropout": 0.05, "adapter_dtype": "bf16", "target_modules": ["q_proj", "v_proj"]},
    "litgpt-phi15-": {"r": 8, "alpha": 16, "dropout": 0.05, "adapter_dtype": "bf16", "target_modules": ["q_proj", "v_proj"]},
    "litgpt-stablelm3b-": {"r": 8, "alpha": 16, "dropout": 0.05, "adapter_dtype": "bf16",
                           "target_modules": ["query_key_value"]},
    "litgpt-falcon40b-": {"r": 8, "alpha": 16, "dropout": 0.05, "adapter_dtype": "bf16",
                          "target_modules": ["query_key_value"]},
    # held out: fms-acceleration scripts/benchmarks/scenarios.yaml at 24bdadb (standard-peft, baseline-peft-bnb): r 16,
    # lora_alpha 16, lora_dropout 0.1 on q/k/v/o; peft 0.13's default fp32 adapters
    "fmsref-": {"r": 16, "alpha": 16, "dropout": 0.1, "adapter_dtype": "fp32",
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    # held out: AnswerDotAI/fsdp_qlora train.py's defaults (lora_rank 64, lora_alpha 16, lora_dropout 0.1,
    # lora_target_modules 'all' = k, q, v, up, down, gate projections); pure bf16, so adapters in bf16
    "aai-": {"r": 64, "alpha": 16, "dropout": 0.1, "adapter_dtype": "bf16",
             "target_modules": ["k_proj", "q_proj", "v_proj", "up_proj", "down_proj", "gate_proj"]},
}

STEPS, WARMUP_STEPS, TIMEOUT_S = 1, 1, 600


def lora_options(row_id: str) -> dict:
    best = max((p for p in LORA_OPTIONS if row_id.startswith(p)), key=len, default=None)
    return dict(LORA_OPTIONS[best]) if best else {}


def not_simulated(row: Row) -> str | None:
    """Why ``row`` cannot be simulated as written, or None when it can."""
    missing = [label for key, label in (("model_config_name", "no model config in matrix/models"),
                                        ("techniques", "the recipe does not map to our techniques"),
                                        ("gpu_profile", "no GPU profile for the GPU"),
                                        ("batch_size", "batch size not stated"),
                                        ("seq_len", "sequence length not stated")) if getattr(row, key) is None]
    if missing:
        why = "; ".join(missing)
        return f"{why} (the row: {row.unmatched})" if row.unmatched else why
    names = row.techniques.split("+")
    knobs = tech.knobs(names)
    if knobs["world_size"] != row.n_gpus:
        return f"the techniques run {knobs['world_size']} process(es), the source {row.n_gpus} GPU(s)"
    if knobs["adapter"] and not lora_options(row.id):
        return "its LoRA rank and target modules are not known (no entry in bench/corpus/published_matrix.LORA_OPTIONS)"
    config = json.loads((published.MODELS_DIR / f"{row.model_config_name}.json").read_text())
    if why := workloads.config_problem(config, row.seq_len):   # what the matrix loader refuses, in its words
        return f"the matrix refuses the cell: {why}"
    return None


def _slug(text) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "-" for c in str(text).lower())


def plan(rows: list[Row]) -> list[dict]:
    """One entry per corpus row, in corpus order: {"row", "study", "cell", "techniques", "options",
    "reason"}; study, cell and techniques are None (and reason says why) for a row not simulated."""
    out, cells = [], {}  # cells: {cell id: settings key}
    for row in rows:
        entry = {"row": row.id, "study": None, "cell": None, "techniques": None, "options": None,
                 "reason": not_simulated(row)}
        out.append(entry)
        if entry["reason"]:
            continue
        opts = lora_options(row.id) if tech.knobs(row.techniques.split("+"))["adapter"] else {}
        settings = (row.model_config_name, row.gpu_profile, row.batch_size, row.seq_len,
                    tuple(sorted((k, str(v)) for k, v in opts.items())))
        # the cell id names model and techniques; a row whose settings differ from an earlier row's under the
        # same id spells its shape too, its batch and length, then its batch alone (the same shape either way)
        for combo in (row.techniques, f"{row.techniques}+b{row.batch_size}+s{row.seq_len}",
                      f"{row.techniques}+b{row.batch_size}"):
            cid = f"{row.model_config_name}__sim__{combo}"
            if cells.setdefault(cid, settings) == settings:
                break
        else:
            entry["reason"] = f"its cell {cid} is already another row's with other settings"
            continue
        study = f"published-{_slug(row.model_config_name)}-{_slug(row.gpu_profile)}-b{row.batch_size}-s{row.seq_len}"
        if opts:
            study += f"-r{opts.get('r', 8)}"
        entry.update(study=study, cell=cid, techniques=combo, options=opts or None)
    return out


def generate(rows: list[Row]) -> dict:
    """The matrix document (a dict bench.cells.matrix validates) for ``rows``."""
    by_id = {r.id: r for r in rows}
    studies: dict[str, dict] = {}
    for e in plan(rows):
        if e["reason"]:
            continue
        row = by_id[e["row"]]
        body = studies.setdefault(e["study"], {
            "description": "",
            "mode": "sim",
            "models": [row.model_config_name],
            "gpus": [row.gpu_profile],
            "batch_size": row.batch_size,
            "seq_len": row.seq_len,
            "steps": STEPS,
            "warmup_steps": WARMUP_STEPS,
            "timeout_s": TIMEOUT_S,
            **({"technique_options": {"lora": e["options"]}} if e["options"] else {}),
            "techniques": [],
            "exclude": [{"techniques": "baseline"}],
            "_rows": [],
        })
        if e["techniques"] not in body["techniques"]:
            body["techniques"].append(e["techniques"])
        body["_rows"].append(e["row"])
    for body in studies.values():
        body["description"] = ("Generated from matrix/published/corpus.yaml by bench/corpus/published_matrix.py; "
                               f"corpus rows: {', '.join(body.pop('_rows'))}.")
    return {"studies": studies}


def render(rows: list[Row]) -> str:
    """The text of matrix/published.yaml: a header naming the rows not simulated, then the matrix."""
    head = ["# GENERATED by `python -m bench.corpus.published_matrix --out matrix/published.yaml`: do not edit.",
            "# The sim cells of the published corpus (matrix/published/corpus.yaml), one per matched row.",
            "# tests/test_scoreboard.py checks that this file equals a fresh generation.",
            "#",
            "# Corpus rows not simulated, and why ([source]: the source does not state what ran; [ours]:",
            "# ft-membench lacks a model, GPU or technique; [both]; bench/corpus/coverage.py counts them):"]
    gaps = {r.id: r.gap for r in rows}
    for e in plan(rows):
        if e["reason"]:
            head.append(f"#   {e['row']} [{gaps[e['row']]}]: {' '.join(e['reason'].split())}")
    body = yaml.safe_dump(generate(rows), sort_keys=False, width=110, allow_unicode=True)
    return "\n".join(head) + "\n\n" + body


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.corpus.published_matrix", description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(published.DEFAULT))
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--out", help="write the matrix YAML here")
    group.add_argument("--check", help="exit 1 if this file differs from a fresh generation")
    args = ap.parse_args(argv)
    text = render(published.load(args.corpus))
    if args.check:
        if Path(args.check).read_text() != text:
            print(f"{args.check} is stale: run python -m bench.corpus.published_matrix --out {args.check}", file=sys.stderr)
            return 1
        return 0
    from bench.records import atomic
    atomic.write_text(args.out, text)
    print(f"{args.out}: {sum(1 for e in plan(published.load(args.corpus)) if not e['reason'])} rows simulated",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
