"""How close is each tool to published GPU measurements: corpus rows + sim records -> scores. Torch-free.

    rows = published.load(); records = load_records(paths)
    scored = score(rows, records)        # one entry per corpus row, every tool's answer or why none
    table = summary(scored)              # per role, tool and measure: covered, median |error|, worst, fits/oom
    python -m bench.corpus.scoreboard results/published/cells/*.json --out results/published/scoreboard.json
    python -m bench.corpus.scoreboard ... --record-first-scores   # held-out rows: store their first score

Roles: every corpus row is ``development`` (seen while the model was built) or ``held-out`` (added
after, never used to change it); the figures of each are computed and printed apart
(bench/corpus/board.py), and each held-out row shows its first score (stored in the corpus,
bench/corpus/first_score.py) beside today's.

The tools: ``ft-membench`` (the sim record of the row's cell, bench/corpus/published_matrix.py) and each
peer estimator the record carries in ``details.peers`` (DeepSpeed's ZeRO-2 and ZeRO-3 estimators,
accelerate's estimate-memory rows: model states only, which is what this board shows), and
fitcheck-llm and llm-analysis where they are installed (optional; bench/corpus/peer_fitcheck.py and
bench/corpus/peer_llm_analysis.py run them here, on the row's settings, through their own APIs); a peer
that is not installed covers no row and says so on each. The published rules of thumb (bench/corpus/peer_rules.py: LLaMA-Factory's hardware table,
Unsloth's requirements table) are peers too: looked up as published from the row's model size and
method, on every single-GPU row with a model config and techniques, record or not.

The measure rule (bench/corpus/measure_rule.py): the row's ``measure`` decides which simulated figure it
is compared with (``simulated_figure``):

- allocated, active: the allocated peak (``peak_bytes``) without bitsandbytes' paged optimizer
  state (``details.paged_state_bytes``, else ``allocator_model.unified_peak_bytes``): that lives in
  CUDA unified memory, outside torch's allocator, which is what these measures count; plus cuBLAS's
  workspaces on the row's GPU (``details.blas_workspaces``: torch allocates them, no trace holds them);
- reserved: the modelled reserved peak (``modelled_reserved_peak_bytes``, the allocator replay) plus
  cuBLAS's workspaces on the row's GPU;
- nvidia-smi: the modelled reserved peak + the verdicts' reserve (CUDA context and kernels,
  bench/estimate/verdicts.RESERVE_BYTES) + cuBLAS's workspaces + the paged state resident on the row's
  GPU (``details.paging``) + a rank's NCCL buffers;
- not-stated: compared as allocated (the rule above), and the row says so.

Each measure is a peak over the run, the model's load included: a sharded record's figure is the larger
of the step's and what one GPU holds while the model loads as its engine places it
(``details.load_phase``, bench/estimate/loadplan.py; plus the reserve for nvidia-smi). That differs from
the step's only where the load holds more, as QLoRA under ZeRO-3 does: each rank loads the whole 4-bit
model before DeepSpeed partitions it.

A peer gives one figure whatever the measure; it is compared as it is, and only on the rows it is
built to answer: DeepSpeed's and accelerate's estimators count a full fine-tune's model states,
so a LoRA or QLoRA row, or one under another ZeRO stage, is not covered (bench/corpus/peer_scope.py). Signed error = predicted /
published - 1. Only rows whose value is a measured peak (``value_kind: peak``) get an error: a
``capacity`` row (the card it fit in) and an ``estimate`` (a rule of thumb) get none. A row whose
source says fits or oom is compared with the tool's verdict on the row's GPU: ours is the record's
verdict (``tight`` runs, so it counts as fits); a peer's is its figure against the same capacity
(GPU memory minus the reserve). A row a tool cannot answer is "not covered", with the reason, and
never counts as a zero.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from bench.corpus import board, coverage, peer_fitcheck, peer_llm_analysis, peer_rules, peer_scope, published
from bench.estimate import verdicts
from bench.corpus import published_matrix as pm
from bench.corpus.measure_rule import COMPARED_AS, simulated_figure, step_figure  # noqa: F401  (the board's names)
from bench.corpus.row import Row

OURS = "ft-membench"
# peers' ``source`` in details.peers -> the tool's name on the board
PEER_NAMES = {
    "deepspeed estimate_zero2_model_states_mem_needs_all_cold": "DeepSpeed ZeRO-2 estimator",
    "deepspeed estimate_zero3_model_states_mem_needs_all_cold": "DeepSpeed ZeRO-3 estimator",
    "accelerate estimate-memory (float32 row)": "accelerate estimate-memory (fp32)",
    "accelerate estimate-memory (float16 row)": "accelerate estimate-memory (fp16)",
}
MEASURES = ("allocated", "active", "reserved", "nvidia-smi", "not-stated")
GIB = 2**30


def tool_names() -> list[str]:
    return [OURS, *PEER_NAMES.values(), peer_fitcheck.NAME, peer_llm_analysis.NAME, *peer_rules.TOOLS]


def our_verdict(rec: dict, gpu: str) -> str | None:
    v = (rec.get("verdicts") or {}).get(gpu)
    return {"fits": "fits", "tight": "fits", "oom": "oom"}.get(v)


def source_url(row: Row) -> str | None:
    """A link to the row's source: its URL, or the GitHub file at the commit it was read at; None for
    our own runs (source ``ft-membench cuda run: <folder of this repository>``: no public address)."""
    src = row.source
    if row.source_kind == "own-run":
        return None
    if src.startswith(("http://", "https://")):
        return src
    repo, _, path = src.partition(":")
    ref = row.read_at if re.fullmatch(r"[0-9a-f]{40}", str(row.read_at)) else "HEAD"
    if not path or "{" in path:
        return f"https://github.com/{repo}/tree/{ref}"
    return f"https://github.com/{repo}/blob/{ref}/{path}"


def load_records(paths) -> dict[str, dict]:
    """{cell: record} from pytest-benchmark JSON files (``benchmarks[0].extra_info``) or bare
    record JSON; a file that cannot be read is skipped (its rows are then not covered)."""
    out = {}
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text())
            rec = doc["benchmarks"][0]["extra_info"] if "benchmarks" in doc else doc
            out[rec["cell"]] = rec
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue
    return out


def _not(why: str) -> dict:
    return {"covered": False, "predicted_bytes": None, "signed_error": None, "verdict": None,
            "agrees": None, "why_not": why}


def _answer(row: Row, nbytes: int | None, how: str, verdict: str | None, why_no_verdict: str | None) -> dict:
    out = {"covered": False, "predicted_bytes": nbytes, "compared_as": how, "signed_error": None,
           "verdict": verdict, "agrees": None, "why_not": None}
    if row.value_kind != "peak":
        out["why_not"] = ("the source gives the card it fit in (or ran out of), not a peak" if row.value_kind == "capacity"
                          else "the source's figure is a rule of thumb, not a measurement")
    elif nbytes is None:
        out["why_not"] = how
    else:
        out["covered"] = True
        out["signed_error"] = nbytes / (row.value_gib * GIB) - 1
    if row.outcome in ("fits", "oom"):
        if verdict is None:
            out["why_not_verdict"] = why_no_verdict
        else:
            out["agrees"] = verdict == row.outcome
    return out


def score(rows: list[Row], records: dict[str, dict], gpus: dict | None = None) -> list[dict]:
    """One entry per corpus row: the row's facts, and each tool's answer or why it has none."""
    gpus = gpus if gpus is not None else _gpus()
    plan = {e["row"]: e for e in pm.plan(rows)}
    out = []
    for row in rows:
        e = plan[row.id]
        entry = {"row": row.id, "role": row.role, "source": row.source, "url": source_url(row), "model": row.model,
                 "recipe": row.recipe, "gpu": row.gpu, "gpu_profile": row.gpu_profile,
                 "n_gpus": row.n_gpus, "measure": row.measure, "value_kind": row.value_kind,
                 "published_gib": row.value_gib, "outcome": row.outcome, "unmatched": row.unmatched,
                 "cell": e["cell"], "simulated": e["reason"] is None, "reason": e["reason"], "tools": {}}
        if row.first_score is not None:
            entry["first_score"] = row.first_score.model_dump(exclude_unset=True)
        rec = records.get(e["cell"]) if e["cell"] else None
        if rec is not None:
            entry["engine_digest"] = (rec.get("versions") or {}).get("ft_membench_engine")
        entry["gap"] = row.gap
        if e["reason"]:
            missing = f"not simulated ({coverage.GAP_WORDS.get(row.gap, 'no gap said')}): {e['reason']}"
        elif rec is None:
            missing = f"no record of cell {e['cell']} (not run yet)"
        elif rec.get("status") not in ("ok", "oom"):
            missing = f"the cell's record is {rec.get('status')}: {rec.get('reason', '')}"
        else:
            missing = None
        entry["tools"][peer_fitcheck.NAME] = _peer(peer_fitcheck, row, e, gpus)
        entry["tools"][peer_llm_analysis.NAME] = _peer(peer_llm_analysis, row, e, gpus)
        for name in peer_rules.TOOLS:
            entry["tools"][name] = _rule(name, row, gpus)
        if missing:
            for name in (OURS, *PEER_NAMES.values()):
                entry["tools"][name] = _not(missing)
            out.append(entry)
            continue
        gpu = row.gpu_profile
        nbytes, how = simulated_figure(rec, row.measure, gpu)
        entry["tools"][OURS] = _answer(row, nbytes, how, our_verdict(rec, gpu),
                                       f"the record has no verdict for {gpu}")
        cap = verdicts.capacity(gpus[gpu]) if gpu in gpus else None
        peers = {p.get("source"): p for p in (rec.get("details") or {}).get("peers") or [] if isinstance(p, dict)}
        for source, name in PEER_NAMES.items():
            peer = peers.get(source)
            outside = peer_scope.why_not(name, row)
            if outside:
                entry["tools"][name] = _not(outside)
                continue
            if peer is None or peer.get("bytes") is None:
                entry["tools"][name] = _not("the record carries no figure of this peer")
                continue
            pb = int(peer["bytes"])
            verdict = None if cap is None else ("fits" if pb <= cap else "oom")
            entry["tools"][name] = _answer(row, pb, f"the peer's figure ({peer.get('what', '')}), as it is",
                                           verdict, f"no capacity for {gpu}")
        out.append(entry)
    return out


def _peer(peer, row: Row, e: dict, gpus: dict) -> dict:
    """An installed peer's answer for the row, run here on the row's settings through its own API (it needs no
    record): fitcheck-llm (its verdict its own ``fits``, on its usable share of the card) or llm-analysis (its
    figure against the profile's capacity, as for any peer)."""
    why = peer.unavailable() or (f"not simulated: {e['reason']}" if e["reason"] else None)
    if why is None and row.gpu_profile not in gpus:
        why = f"no GPU profile {row.gpu_profile}"
    if why:
        return _not(why)
    try:
        got = peer.estimate(row, e["options"], gpus[row.gpu_profile]["memory_bytes"])
    except peer.Unanswerable as exc:
        return _not(str(exc))
    how = f"{peer.NAME}'s {'total' if peer is peer_fitcheck else 'figure'}, as it is" + (
        f" (it cannot express: {', '.join(got['unexpressed'])})" if got["unexpressed"] else "")
    fits = got["fits"] if peer is peer_fitcheck else got["bytes"] <= verdicts.capacity(gpus[row.gpu_profile])
    return _answer(row, got["bytes"], how, "fits" if fits else "oom", None)


def _rule(name: str, row: Row, gpus: dict) -> dict:
    """A published rule of thumb's figure for the row (no record needed: the table reads the model's
    size and the method); its verdict is that figure against the row's GPU capacity, as for any peer."""
    try:
        got = peer_rules.estimate(name, row)
    except peer_rules.Unanswerable as exc:
        return _not(str(exc))
    gpu = row.gpu_profile
    cap = verdicts.capacity(gpus[gpu]) if gpu in gpus else None
    verdict = None if cap is None else ("fits" if got["bytes"] <= cap else "oom")
    return _answer(row, got["bytes"], f"the table's figure ({got['what']}), as it is", verdict,
                   f"no GPU profile for {row.gpu or 'the row'}")


def summary(scored: list[dict]) -> list[dict]:
    """Per role (development, held-out), tool and measure: rows, rows covered, median |error|, worst
    error, and fits/oom agreement per outcome with every fits or oom row counted (bench/corpus/board.py)."""
    return board.summary(scored, tool_names(), MEASURES)


def several_gpus(scored: list[dict]) -> list[dict]:
    """``summary`` of the rows run on several GPUs alone, for ft-membench: a rank's figure is another
    model than one GPU's (per rank, NCCL, the engine's own buffers), and the rows of one GPU, many more,
    would hide its error in the median."""
    return board.summary([s for s in scored if (s.get("n_gpus") or 1) > 1], [OURS], MEASURES)


# A peer's own benchmark in the corpus: the rows its authors measured to validate it (by source prefix)
OWN_BENCHMARKS = {peer_fitcheck.NAME: "Anassbzdd/fitcheck:"}


def own_benchmarks(scored: list[dict]) -> list[dict]:
    """Per peer with its own benchmark in the corpus: ``board.summary`` of ft-membench and the peer on
    the rows of that benchmark both answer, so the two errors are read over the same rows; each line
    also says how many of the benchmark's rows there are (``benchmark_rows``)."""
    out = []
    for peer, prefix in OWN_BENCHMARKS.items():
        rows = [s for s in scored if (s.get("source") or "").startswith(prefix)]
        both = [s for s in rows if s["tools"][OURS]["covered"] and s["tools"].get(peer, {}).get("covered")]
        for t in board.summary(both, [OURS, peer], MEASURES):
            if t["rows"]:
                out.append({**t, "benchmark": peer, "benchmark_rows": len(rows)})
    return out


def _gpus() -> dict:
    import yaml
    from bench.cells.matrixfile import SAFE_LOADER
    return yaml.load(published.GPUS_FILE.read_text(), Loader=SAFE_LOADER) or {}


def markdown(table: list[dict]) -> str:
    """The two headline tables as Markdown: development rows, then held-out rows."""
    return board.markdown(table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.corpus.scoreboard", description=__doc__.splitlines()[0])
    ap.add_argument("records", nargs="*", help="cell JSON files of matrix/published.yaml's cells")
    ap.add_argument("--corpus", default=str(published.DEFAULT))
    ap.add_argument("--out", required=True,
                    help="JSON to write: {'rows': [...], 'summary': [...], 'first_scores': [...]}")
    ap.add_argument("--record-first-scores", action="store_true",
                    help="write the first score of each held-out row that has none into the corpus file")
    args = ap.parse_args(argv)
    rows = published.load(args.corpus)
    scored = score(rows, load_records(args.records))
    if args.record_first_scores:
        from bench.corpus import first_score
        written = first_score.record(args.corpus, scored, OURS)
        print(f"first score recorded for {len(written)} held-out row(s): {', '.join(written) or '-'}", file=sys.stderr)
        scored = score(published.load(args.corpus), load_records(args.records))
    table = summary(scored)
    multi = several_gpus(scored)
    own = own_benchmarks(scored)
    firsts = board.first_scores(scored, OURS)
    from bench.records import atomic
    cov = coverage.coverage(rows)
    atomic.write_text(args.out, json.dumps({"rows": scored, "summary": table, "several_gpus": multi,
                                            "own_benchmarks": own, "first_scores": firsts, "coverage": cov},
                                           indent=1) + "\n")
    print("### the corpus: simulated, and why not")
    print(coverage.markdown(cov))
    print()
    print(markdown(table))
    print()
    print("### the rows on several GPUs alone (ft-membench)")
    print(board.markdown(multi) if multi else "none")
    print()
    print("### each peer on its own benchmark, beside ft-membench on the same rows")
    print(board.markdown(own) if own else "none")
    print()
    print(board.first_scores_markdown(firsts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
