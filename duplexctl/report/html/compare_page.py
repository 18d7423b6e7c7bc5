"""The comparison page of ``duplexctl report A B --compare --html FILE``: the verdict with the
worst regression first, then by question (capacity, admission, reliability, latency,
behaviour) each figure in both runs with n, the change and its interval.

The verdict and its words come from :func:`duplexctl.report.compare.verdict`, the one place
they are decided, so the page, the printed lines and ``--json`` say the same thing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from duplexctl.report.compare import RATE, SECTIONS, describe
from duplexctl.report.html import charts, page

#: the verdict word's css class
CLASSES = {
    "REGRESSION": "fail",
    "IMPROVED": "pass",
    "INCONCLUSIVE": "warn",
    "NO SIGNIFICANT CHANGE": "pass",
}
#: each question's heading on the page
HEADINGS = {
    "capacity": "Capacity: how many sessions the server held",
    "admission": "Admission: attempts not admitted",
    "reliability": "Reliability: turns and sessions that went wrong",
    "latency": "Latency",
    "behaviour": "Conversation behaviour",
}


def verdict_of(doc: Mapping[str, Any]) -> tuple[str, str]:
    word = doc["verdict"]["word"]
    return word, CLASSES[word]


def comparison_chart(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """Both runs' percentiles with the baseline's and the candidate's values as dots and the
    difference's interval drawn around the candidate (times only: a proportion or a level
    has no place on the ms axis, the tables have them)."""
    rows = []
    for r in doc["rows"]:
        if r["stat"] == RATE or r["section"] == "capacity":
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
    return charts.comparison_dots(rows) if rows else None


def sections(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows by question, each row with its words (``text``) for the table."""
    out = []
    for name in SECTIONS:
        rows = [{**r, "text": describe(r)} for r in doc["rows"] if r["section"] == name]
        if rows:
            out.append({"name": name, "heading": HEADINGS[name], "rows": rows})
    return out


def build(doc: Mapping[str, Any], *, threshold_pct: float | None = None) -> str:
    verdict = verdict_of(doc)
    chart = comparison_chart(doc)
    return page.render_verdict(
        "compare.html.j2",
        command="compare",
        charts={"compare": chart} if chart else {},
        verdict=verdict,
        doc=doc,
        sections=sections(doc),
        threshold_pct=threshold_pct,
    )
