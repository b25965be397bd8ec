"""The report's section "How close is each tool to published GPU measurements".

It reads the records of the published studies (``published-*``, matrix/published.yaml) in the
table it is given, scores every tool on every corpus row with bench/corpus/scoreboard.py (the row's own
measure), and draws: the summary per tool and measure (rows covered, median |error|, worst error,
fits and oom agreement), development and held-out rows in two tables, a plot of predicted against published GiB, and every corpus row with its
source link, whether or not it was simulated. A table without published records has no section.
"""
from __future__ import annotations

import re

import pandas as pd

from bench.corpus import answer_error, board, coverage, peer_fitcheck, peer_llm_analysis, peer_rules, published
from bench.corpus import scoreboard as sb
from report.fmt import jcol, missing

STUDY_PREFIX = "published-"
SHORT = {sb.OURS: "ft-membench", "DeepSpeed ZeRO-2 estimator": "DS ZeRO-2",
         "DeepSpeed ZeRO-3 estimator": "DS ZeRO-3", "accelerate estimate-memory (fp32)": "accelerate fp32",
         "accelerate estimate-memory (fp16)": "accelerate fp16", "fitcheck-llm": "fitcheck",
         peer_rules.LLAMA_FACTORY: "LLaMA-Factory table", peer_rules.UNSLOTH: "Unsloth table"}


def records_from_table(df: pd.DataFrame) -> dict[str, dict]:
    """{cell: the record fields the scoreboard reads} for the published studies' rows of ``df``."""
    out = {}
    if "study" not in df.columns:
        return out
    for _, r in df[df["study"].fillna("").str.startswith(STUDY_PREFIX)].iterrows():
        rec = {"cell": r["cell"], "status": r["status"], "reason": r.get("reason", ""),
               "peak_bytes": None if missing(r.get("peak_bytes")) else int(r["peak_bytes"]),
               # an extra column of the table (kept as text by read_table), as report/consistency.py reads it
               "modelled_reserved_peak_bytes": _int(r.get("modelled_reserved_peak_bytes")),
               "verdicts": jcol(r, "verdicts") or {}, "details": jcol(r, "details") or {},
               "allocator_model": jcol(r, "allocator_model") or {}}
        out[r["cell"]] = rec
    return out


def _int(v):
    try:
        return None if missing(v) else int(float(v))
    except (TypeError, ValueError):
        return None


def _pct(e) -> str:
    return "—" if e is None else f"{e:+.1%}"


def _gib(b) -> str:
    return "—" if b is None else f"{b / 2**30:.2f}"


def plot_long(scored: list[dict]) -> pd.DataFrame:
    rows = [{"tool": tool, "measure": s["measure"], "published_gib": s["published_gib"],
             "predicted_gib": t.get("predicted_bytes") / 2**30}
            for s in scored for tool, t in s["tools"].items() if t["covered"]]
    return pd.DataFrame(rows, columns=["tool", "measure", "published_gib", "predicted_gib"])


def figure(long: pd.DataFrame):
    import seaborn as sns
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    from report import plots
    with plots.drawing():
        fig = Figure(figsize=(7.5, 5.2), layout="constrained")
        ax = fig.subplots()
        lo = min(long["published_gib"].min(), long["predicted_gib"].min()) * 0.8
        hi = max(long["published_gib"].max(), long["predicted_gib"].max()) * 1.25
        ax.plot([lo, hi], [lo, hi], color="#57606a", lw=1, ls="--", label="predicted = published")
        sns.scatterplot(data=long, x="published_gib", y="predicted_gib", hue="tool", style="measure", s=55,
                        ax=ax, palette="colorblind", hue_order=[t for t in sb.tool_names() if t in set(long["tool"])])
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi),
               xlabel="published GiB (the source's measure)", ylabel="predicted GiB (matching figure)",
               title="Predicted against published peak memory")
        ticks = [t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if lo <= t <= hi]
        for axis in (ax.xaxis, ax.yaxis):   # plain numbers: the report draws text with parse_math off
            axis.set_major_locator(FixedLocator(ticks))
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(NullFormatter())
        ax.set_aspect("equal")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        return plots.data_uri(plots.png(fig))


def section(df: pd.DataFrame):
    records = records_from_table(df)
    if not records:
        return None
    rows = published.load()
    scored = sb.score(rows, records)
    table = sb.summary(scored)
    long = plot_long(scored)
    peer_tools = [t for t in sb.tool_names() if t != sb.OURS]
    shown = []
    for s in scored:
        ours = s["tools"][sb.OURS]
        peers = [f"{SHORT.get(t, t)} {_pct(s['tools'][t]['signed_error'])}" for t in peer_tools
                 if s["tools"][t]["covered"]]
        verdict = "—" if ours.get("verdict") is None else ours["verdict"]
        shown.append({
            "row": s["row"], "role": s["role"], "url": s["url"], "model": s["model"] or "—", "recipe": s["recipe"],
            "gpu": gpu_label(s), "measure": s["measure"], "kind": s["value_kind"],
            "published": f"{s['published_gib']:.2f}", "ours": _gib(ours.get("predicted_bytes")) if ours["covered"] else "—",
            "error": _pct(ours["signed_error"]), "peers": ", ".join(peers) or "—",
            "outcome": s["outcome"], "verdict": verdict,
            "agrees": "—" if ours.get("agrees") is None else ("yes" if ours["agrees"] else "no"),
            "why": "" if ours["covered"] else (ours["why_not"] or ""),
            "unmatched": (s["unmatched"] or "") if s["simulated"] else "", "simulated": s["simulated"],
        })
    def line(t):
        return {"tool": t["tool"], "measure": t["measure"], "covered": f"{t['covered']}/{t['rows']}",
                "median": "—" if t["median_abs_error"] is None else f"{t['median_abs_error']:.1%}",
                "worst": _pct(t["worst_error"]), "fits": board.agreement(t, "fits").replace("-", "—"),
                "oom": board.agreement(t, "oom").replace("-", "—")}
    summary = {role: [line(t) for t in table if t["role"] == role] for role in board.ROLES}
    # a line with no figure covered still shows its fits/oom answers (the oom rows on several GPUs)
    multi = [dict(line(t), role=t["role"]) for t in sb.several_gpus(scored)
             if t["covered"] or t["fits_answered"] or t["oom_answered"]]
    own = [dict(line(t), role=t["role"], benchmark=t["benchmark"], benchmark_rows=t["benchmark_rows"])
           for t in sb.own_benchmarks(scored)]
    kinds = [dict(k, median=f"{k['median_abs']:.1%}", under=_pct(k["worst_under"]) if k["worst_under_row"] else "none",
                  over=_pct(k["worst_over"]) if k["worst_over_row"] else "none") for k in answer_error.by_kind(scored)]
    return {
        "kind": "scoreboard", "title": "How close is each tool to published GPU measurements",
        "note": ("Every row of the published corpus (matrix/published/corpus.yaml), against ft-membench's "
                 "simulation of the same settings (matrix/published.yaml) and the peer estimators it runs. "
                 "The row's measure picks our figure: allocated or active = the allocated peak without "
                 "bitsandbytes' paged optimizer state (outside torch's allocator); reserved = the modelled "
                 "reserved peak; nvidia-smi = modelled reserved + the CUDA context and BLAS reserve; not stated "
                 "= compared as allocated. DeepSpeed's and accelerate's estimators count model states only; fitcheck-llm runs on the row's settings; "
                 "llm-analysis too, through its own API (full training only; its model config refuses an FFN width "
                 "that is not a whole multiple of the hidden size, as Llama 2 and 3.1, Mistral and Qwen2.5 have); "
                 "LLaMA-Factory's hardware table and Unsloth's requirements table are published rules of thumb, looked up "
                 "by the model's size (its config's parameter count) and the method, nothing else. All peers are compared "
                 "as they are. "
                 "Development rows (seen while the model was built or calibrated) and held-out rows (added after, "
                 "never used to change it) are scored apart: only the held-out figures are out of sample. "
                 "DeepSpeed's and accelerate's estimators are scored only on their own benchmark (full fine-tunes "
                 "with 32-bit Adam; DeepSpeed's under its ZeRO stage): a LoRA or QLoRA row is not covered. "
                 "Signed error = predicted / published − 1, for rows whose value is a measured peak; fits/oom: "
                 "our verdict on the row's GPU (tight counts as fits), a peer's figure against the same capacity. "
                 "A row a tool cannot answer is not covered (—), never a zero. A disagreeing row stays as "
                 "published; the sim is never tuned to a row."),
        "summary": summary, "roles": {r: sum(1 for s in scored if s["role"] == r) for r in board.ROLES},
        "several_gpus": multi, "own_benchmarks": own, "kinds": kinds, "kinds_min": answer_error.MIN_ROWS,
        "first_scores": board.first_scores(scored, sb.OURS), "rows": shown, "image": figure(long) if len(long) else None,
        "simulated": sum(1 for s in scored if s["simulated"]), "total": len(scored),
        "coverage": coverage.coverage(rows),
        "optional": [f"{peer.NAME}: {peer.unavailable()}" for peer in (peer_fitcheck, peer_llm_analysis)
                     if peer.unavailable()],
    }


def gpu_label(s: dict) -> str:
    """The row's GPUs: the source's own words where they state a count ("2 x RTX 3090", "1 x H100 ...
    (rank 0 of 2, run alone)"), else the count of GPUs before them."""
    gpu = s["gpu"] or "?"
    return gpu if re.match(r"\d+\s*[x×]\s", gpu) else f"{s['n_gpus'] or '?'}× {gpu}"
