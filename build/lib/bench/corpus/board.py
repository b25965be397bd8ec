"""The scoreboard's figures, per role: development rows and held-out rows apart. Torch-free.

    table = summary(scored, tools, measures)   # one entry per role, tool and measure
    print(markdown(table))                    # two tables: development, then held-out
    print(first_scores_markdown(scored))      # held-out rows: the first score beside today's

``scored`` is bench/corpus/scoreboard.score's list. A development row was seen while the model was
built or calibrated, so its error is in-sample; a held-out row was added after and never changed
the model, so its error is out of sample: the figures of the two are never pooled.

fits/oom agreement counts the outcome rows of each kind apart, with every such row of the role
in the denominator: ``fits_agree`` of ``fits_answered`` (rows the tool gave a verdict on) of
``fits_rows`` (rows whose source says fits), and the same for oom. An oom row agrees only where
the tool says oom; an oom row the tool does not answer shows as answered 0 of its count, never
as agreement.
"""
from __future__ import annotations

import statistics

ROLES = ("development", "held-out")
OUTCOMES = ("fits", "oom")


def summary(scored: list[dict], tools: list[str], measures: tuple) -> list[dict]:
    """Per role, tool and measure: rows of that role and measure, rows covered (a signed error),
    median |error|, worst error (signed, largest in size), and fits/oom agreement per outcome.
    A role with no row of a measure has no entry for it; a tool with no covered row still has one."""
    out = []
    for role in ROLES:
        for tool in tools:
            for measure in measures:
                mine = [s for s in scored if s.get("role", "development") == role and s["measure"] == measure]
                if not mine:
                    continue
                answers = [s["tools"].get(tool, {}) for s in mine]
                errs = [a["signed_error"] for a in answers if a.get("covered")]
                entry = {"role": role, "tool": tool, "measure": measure, "rows": len(mine), "covered": len(errs),
                         "median_abs_error": statistics.median(abs(e) for e in errs) if errs else None,
                         "worst_error": max(errs, key=abs) if errs else None}
                said = [a["agrees"] for a in answers if a.get("agrees") is not None]
                entry.update(outcome_rows=len(said), outcome_agree=sum(said))
                for outcome in OUTCOMES:
                    of = [a for s, a in zip(mine, answers) if s["outcome"] == outcome]
                    told = [a["agrees"] for a in of if a.get("agrees") is not None]
                    entry.update({f"{outcome}_rows": len(of), f"{outcome}_answered": len(told),
                                  f"{outcome}_agree": sum(told)})
                out.append(entry)
    return out


def fmt_error(e) -> str:
    return "-" if e is None else f"{e:+.1%}"


def agreement(t: dict, outcome: str) -> str:
    """'agree/answered of rows', '-' where the role has no row of that outcome."""
    n = t.get(f"{outcome}_rows", 0)
    return f"{t[f'{outcome}_agree']}/{t[f'{outcome}_answered']} of {n}" if n else "-"


def markdown(table: list[dict]) -> str:
    """The two headline tables as Markdown, development then held-out; a role without rows says so."""
    parts = []
    for role in ROLES:
        mine = [t for t in table if t.get("role", "development") == role]
        n = max((t["rows"] for t in mine), default=0)
        head = (f"{role} rows (seen while the model was built or calibrated: in-sample)" if role == "development"
                else f"{role} rows (added after, never used to change the model: out of sample)")
        parts.append(f"### {head}")
        if not n:
            parts.append(f"No {role} row in the corpus yet.")
            continue
        lines = ["| tool | measure | rows covered | median abs. error | worst error | fits agree | oom agree |",
                 "|---|---|---|---|---|---|---|"]
        for t in mine:
            med = "-" if t["median_abs_error"] is None else f"{t['median_abs_error']:.1%}"
            lines.append(f"| {t['tool']} | {t['measure']} | {t['covered']}/{t['rows']} | {med} | "
                         f"{fmt_error(t['worst_error'])} | {agreement(t, 'fits')} | {agreement(t, 'oom')} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def first_scores(scored: list[dict], ours: str) -> list[dict]:
    """Each held-out row: its first score (stored in the corpus when it entered) beside today's."""
    out = []
    for s in scored:
        if s.get("role") != "held-out":
            continue
        first = s.get("first_score") or {}
        now = s["tools"].get(ours, {})
        err = now.get("signed_error")
        out.append({"row": s["row"], "first_error_pct": first.get("error_pct"), "first_verdict": first.get("verdict"),
                    "first_engine_digest": first.get("engine_digest"), "first_date": first.get("date"),
                    "error_pct": None if err is None else round(100 * err, 2), "verdict": now.get("verdict"),
                    "outcome": s["outcome"], "why_not": now.get("why_not")})
    return out


def _pct(v) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def first_scores_markdown(rows: list[dict]) -> str:
    if not rows:
        return "No held-out row yet: no first score to show."
    lines = ["| held-out row | outcome | first error | first verdict | first scored (engine, date) | today's error | "
             "today's verdict |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        when = (f"{r['first_engine_digest']}, {r['first_date']}" if r["first_date"]
                else "not recorded yet (--record-first-scores)")
        lines.append(f"| {r['row']} | {r['outcome']} | {_pct(r['first_error_pct'])} | {r['first_verdict'] or '-'} | "
                     f"{when} | {_pct(r['error_pct'])} | {r['verdict'] or '-'} |")
    return "\n".join(lines)
