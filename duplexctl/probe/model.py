"""Verdicts and evidence of ``duplexctl probe``.

A probe's answer must be actionable by the person who owns the server: not just "fail", but
which events arrived (or did not) and when. So every probe records a trace — each frame sent
and received on each of its connections, and notes saying what it was doing — with times
relative to the probe's start, and a failure carries that trace as its evidence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One line of evidence: ``t_ms`` since the probe started, on connection ``conn``.

    ``dir`` is ``out`` (client → server), ``in`` (server → client), ``net`` (socket-level:
    connect, close codes, aborts) or ``note`` (what the probe was doing or concluded).
    """

    t_ms: float
    conn: str
    dir: str
    type: str
    detail: str = ""
    seq: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ProbeFailed(Exception):
    """Raised by a probe: the server broke the property the probe checks."""

    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary


class ProbeSkipped(Exception):
    """Raised by a probe: it does not apply (a capability, a setting or the time budget)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class ProbeResult:
    """The verdict of one probe, how long it took, and on failure its evidence."""

    name: str
    verdict: Verdict
    duration_ms: float
    summary: str  # one line: what was found (pass), what broke (fail), why not run (skipped)
    catches: str = ""  # the bug class this probe is for (first docstring line)
    findings: list[str] = field(default_factory=list)  # measured facts worth printing
    evidence: list[TraceEntry] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict.value,
            "duration_ms": round(self.duration_ms, 1),
            "summary": self.summary,
            "catches": self.catches,
            "findings": list(self.findings),
            "evidence": [e.to_dict() for e in self.evidence],
        }


@dataclass(slots=True)
class ProbeReport:
    """Every probe's result for one server."""

    url: str
    embedded: bool
    results: list[ProbeResult]
    duration_ms: float
    budget_s: float
    settings: dict[str, Any] = field(default_factory=dict)  # the session settings, with origins
    server_metrics: dict[str, Any] | None = None  # scraped /metrics (docs/metrics.md)

    @property
    def failed(self) -> list[ProbeResult]:
        return [r for r in self.results if r.verdict is Verdict.FAIL]

    @property
    def ok(self) -> bool:
        return not self.failed

    def counts(self) -> dict[str, int]:
        return {v.value: sum(r.verdict is v for r in self.results) for v in Verdict}

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "embedded": self.embedded,
            "ok": self.ok,
            "counts": self.counts(),
            "duration_ms": round(self.duration_ms, 1),
            "budget_s": self.budget_s,
            "settings": self.settings,
            "results": [r.to_dict() for r in self.results],
            **({"server_metrics": self.server_metrics} if self.server_metrics else {}),
        }
