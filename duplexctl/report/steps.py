"""How one step of a capacity search or of a level sweep is judged, from its report alone.

A step is a complete timed load run at one offered level. It passes when nothing was
refused (no capacity rejection, no failed attempt), every ``--slo`` held and the client's own
pacing was valid; it can be judged only once it has something to judge (:func:`unjudged`).
The rules live here, below ``load``, so that ``duplexctl report`` judges a saved sweep's
levels again from their tallies with the very rules the run used (docs/architecture.md:
imports run downward); ``load/search.py`` runs the steps and asks these functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from duplexctl.report.load_report import tally_of
from duplexctl.report.slo import Slo, SloResult, evaluate


def results_of(report: Mapping[str, Any], slos: Sequence[Slo]) -> list[SloResult]:
    """Every SLO judged on the step's figures after warm-up and its run-level figures."""
    return evaluate(slos, tally_of(report).headline(), report["scalars"])


def unjudged(report: Mapping[str, Any], results: Sequence[SloResult]) -> str | None:
    """Why a step cannot be judged yet, or None: it admitted sessions but completed no turn,
    or an SLO's figure has no sample (``no ttfa_p95 sample``)."""
    if not report["admission"]["by_kind"].get("admitted"):
        return None  # nothing was admitted: the rejections judge it, more time will not
    if not report["turns"]["count"]:
        return "no turn completed"
    empty = [r.expr for r in results if r.actual is None]
    return f"no sample for {', '.join(empty)}" if empty else None


def refused(report: Mapping[str, Any]) -> bool:
    """Whether the step already failed on admission: running it longer changes nothing."""
    adm = report["admission"]
    return bool(adm["by_kind"].get("rejected_capacity", 0) or adm["failed"])


def reasons(
    report: Mapping[str, Any],
    results: Sequence[SloResult],
    missing: str | None,
    runs: Sequence[Mapping[str, Any]],
) -> list[str]:
    """Why the step failed, one phrase each (none: it passed): too few turns to judge, the
    capacity rejections by code, the failed attempts by cause, each SLO that failed on a
    sample, invalid pacing."""
    out = []
    if missing is not None:
        spans = ", ".join(f"{r['duration_s']:g} s" for r in runs)
        out.append(f"too few turns to judge: {missing} (ran {spans})")
    rejected = report["admission"]["by_kind"].get("rejected_capacity", 0)
    if rejected:
        codes = ", ".join(
            f"{k.split(':', 1)[1]} {n}"
            for k, n in report["admission"]["by_code"].items()
            if k.startswith("rejected_capacity")
        )
        out.append(f"{rejected} capacity rejections ({codes})")
    failed = report["admission"]["failed"]
    if failed:
        causes = ", ".join(
            f"{c} {n}" for c, n in report["admission"]["causes"].items() if c != "rejected_capacity"
        )
        out.append(f"{failed} failed attempts ({causes})")
    out.extend(
        f"SLO failed: {r.describe()}"
        for r in results
        if not r.passed and (missing is None or r.actual is not None)
    )
    if report["validity"]["invalid_pacing"]:
        out.append("invalid_pacing (client could not keep real time)")
    return out


def criteria(slos: Sequence[str]) -> list[str]:
    """What every step is judged on, in words."""
    return [*list(slos), "no capacity rejections", "no failed attempts", "valid pacing"]
