"""One source's pushed figures at one instant: :class:`ExportState`, cumulative since its start.

A load worker's figures come from its :class:`~duplexctl.report.tally.RunTally` — the very
counts and histograms its report is built from — so the last push of a run equals its report:
the counters are the tally's counts, a histogram's count is the report's ``n`` (its phases
other than ``warmup`` are the report's headline). Everything here is cumulative (counters
never go down, histograms only gain samples), so a push that was dropped loses nothing but
a point in time: the next one carries it, and states of several workers add up exactly.

States travel from the workers to the one process that pushes (a queue message, a Ray poll)
and are never changed once made: histogram copies share their arrays
(:meth:`~duplexctl.report.histogram.LatencyHistogram.copy`), so taking one is cheap on the
worker's event loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duplexctl.export import names
from duplexctl.report.histogram import LatencyHistogram
from duplexctl.report.tally import RunTally

#: a label set beyond the run's own, sorted: (("outcome", "admitted"),)
Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class ExportState:
    """Cumulative figures: ``counters`` and ``gauges`` by (family name, labels), histograms
    by (figure name, labels)."""

    counters: dict[tuple[str, Labels], float] = field(default_factory=dict)
    gauges: dict[tuple[str, Labels], float] = field(default_factory=dict)
    histograms: dict[tuple[str, Labels], LatencyHistogram] = field(default_factory=dict)

    def count(self, family: names.Family, value: float, **labels: str) -> None:
        key = (family.name, _labels(labels))
        self.counters[key] = self.counters.get(key, 0.0) + float(value)

    def gauge(self, family: names.Family, value: float, **labels: str) -> None:
        self.gauges[(family.name, _labels(labels))] = float(value)

    def histogram(self, figure: str, hist: LatencyHistogram, **labels: str) -> None:
        self.histograms[(figure, _labels(labels))] = hist.copy()

    def counter_value(self, family: names.Family, **labels: str) -> float:
        """A counter's value (0 when absent: nothing counted yet)."""
        return self.counters.get((family.name, _labels(labels)), 0.0)


def _labels(labels: Mapping[str, str]) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in labels.items()))


def total(states: Iterable[ExportState]) -> ExportState:
    """Several sources' states added up (counters, gauges and histograms bucket for bucket)."""
    out = ExportState()
    for state in states:
        for key, value in state.counters.items():
            out.counters[key] = out.counters.get(key, 0.0) + value
        for key, value in state.gauges.items():
            out.gauges[key] = out.gauges.get(key, 0.0) + value
        for key, hist in state.histograms.items():
            mine = out.histograms.get(key)
            out.histograms[key] = hist.copy() if mine is None else mine.merge(hist)
    return out


def of_tally(tally: RunTally, *, active: int = 0, admitted_now: int = 0) -> ExportState:
    """A load worker's state: its tally's counts and its phases' histograms (docs/metrics.md
    "Remote write"); ``active`` and ``admitted_now`` are its live sessions."""
    s = ExportState()
    s.gauge(names.SESSIONS_ACTIVE, active)
    s.gauge(names.SESSIONS_ADMITTED, admitted_now)
    for outcome, n in tally.admissions.items():
        s.count(names.ATTEMPTS, n, outcome=outcome)
    for outcome, n in tally.outcomes.items():
        s.count(names.TURNS, n, outcome=outcome)
    for code, n in tally.errors.items():
        s.count(names.ERRORS, n, code=code)
    for invariant, n in tally.violations.items():
        s.count(names.VIOLATIONS, n, invariant=invariant)
    counts = tally.counts
    for family, key in (
        (names.DROPS, "drops"),
        (names.UNPLANNED_DROPS, "unplanned_drops"),
        (names.RESUMES, "resumes"),
        (names.RESUME_FAILURES, "resume_failures"),
        (names.UNDERRUNS, "underruns"),
        (names.INTERRUPTIONS, "interruptions"),
        (names.INTERRUPTIONS_CANCELLED, "interruptions_cancelled"),
    ):
        s.count(family, counts[key])
    slicer = tally.slicer  # a Recorder folds its pending send lags first
    s.count(names.AUDIO_RECEIVED, sum(sl.audio_s for sl in slicer.slices()))
    for phase, hists in slicer.phases.items():
        for figure, hist in hists.items():
            if names.histogram_of(figure) is not None and hist.count:
                s.histogram(figure, hist, phase=phase)
    return s


def of_replay(report: Mapping[str, Any], send_lags_ms: np.ndarray, *, active: bool) -> ExportState:
    """A replay run's state from its report as built so far (``ReplayReport.build``): its
    one session, the turns and their figures, errors, drops and resumes, the send lag of
    every append (``send_lags_ms``)."""
    s = ExportState()
    s.gauge(names.SESSIONS_ACTIVE, int(active))
    session = report.get("session") or {}
    s.gauge(names.SESSIONS_ADMITTED, int(active and session.get("id") is not None))
    admission = report.get("admission") or ("admitted" if session.get("id") else None)
    if admission is not None and not active:
        s.count(names.ATTEMPTS, 1, outcome=str(admission))
    hists: dict[str, LatencyHistogram] = {}
    turns = report.get("turns", [])
    for turn in turns:
        s.count(names.TURNS, 1, outcome=str(turn.get("outcome")))
        for name, figure in (turn.get("figures") or {}).items():
            value = figure.get("value") if isinstance(figure, Mapping) else None
            if name == "underruns" and isinstance(value, int | float):
                s.count(names.UNDERRUNS, value)
            if names.histogram_of(name) is None or isinstance(value, bool):
                continue
            if isinstance(value, int | float):
                hists.setdefault(name, LatencyHistogram(_scale(name))).record(float(value))
    for error in report.get("errors", []):
        s.count(names.ERRORS, 1, code=str(error.get("code", "error")))
    for invariant, n in (report.get("violation_counts") or {}).items():
        s.count(names.VIOLATIONS, n, invariant=str(invariant))
    conn = report.get("connection") or {}
    s.count(names.DROPS, conn.get("drops", 0))
    s.count(names.UNPLANNED_DROPS, conn.get("drops", 0) - conn.get("scripted_drops", 0))
    s.count(names.RESUMES, conn.get("resumes", 0))
    s.count(names.RESUME_FAILURES, conn.get("resume_failures", 0))
    for name, hist in hists.items():
        s.histogram(name, hist)
    if len(send_lags_ms):
        lag = LatencyHistogram(_scale("send_lag_ms"))
        lag.record_array(send_lags_ms)
        s.histogram("send_lag_ms", lag)
    return s


def _scale(figure: str) -> int:
    from duplexctl.report.histogram import scale_for

    return scale_for(figure)
