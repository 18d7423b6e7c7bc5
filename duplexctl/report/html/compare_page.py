"""The comparison page of ``duplexctl report A B --compare --html FILE``: the verdict, then
each figure's percentiles in both runs with n, the change and its bootstrap interval."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from duplexctl.report.compare import RATE
from duplexctl.report.html import charts, page


def verdict_of(doc: Mapping[str, Any]) -> tuple[str, str]:
    rows = doc["rows"]
    if any(r["worse"] for r in rows):
        return "REGRESSION", "fail"
    if any(r["flagged"] for r in rows):
        return "IMPROVED", "pass"
    return "NO SIGNIFICANT CHANGE", "pass"


def comparison_chart(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Both runs' percentiles with the baseline's and the candidate's values as dots and the
    difference's interval drawn around the candidate."""
    rows = []
    for r in doc["rows"]:
        if r["stat"] == RATE:  # a proportion has no place on the ms axis: the table has it
            continue
        key = f"{r['figure']} {r['stat']}" + (" ⚑" if r["flagged"] else "")
        rows.append(
            {
                "key": key,
                "run": "A baseline",
                "value": r["baseline"],
                "ci_low": r["baseline"],
                "ci_high": r["baseline"],
                "n": r["n_baseline"],
            }
        )
        lo = r["baseline"] + r["ci_low"] if r["ci_low"] is not None else r["candidate"]
        hi = r["baseline"] + r["ci_high"] if r["ci_high"] is not None else r["candidate"]
        rows.append(
            {
                "key": key,
                "run": "B candidate",
                "value": r["candidate"],
                "ci_low": lo,
                "ci_high": hi,
                "n": r["n_candidate"],
            }
        )
    return charts.comparison_dots(rows)


def build(doc: Mapping[str, Any], *, threshold_pct: float | None = None) -> str:
    verdict = verdict_of(doc)
    return page.render_verdict(
        "compare.html.j2",
        command="compare",
        charts={"compare": comparison_chart(doc)} if doc["rows"] else {},
        verdict=verdict,
        doc=doc,
        threshold_pct=threshold_pct,
    )
