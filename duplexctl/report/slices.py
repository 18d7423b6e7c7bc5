"""Time slices and warm-up / ramp / steady windows of a load run (docs/metrics.md "Statistics").

A single whole-run p95 hides what matters under load: latency that climbs as sessions are
added, a server that degrades after ten minutes, a burst of rejections during the ramp. So
every record is also bucketed by time into fixed-length slices, each with its own mergeable
histograms and counts (turns, outcomes, admissions and rejections, errors, audio
received). Empty slices are kept: a stretch with no finished turns is itself a finding.

Independently of the slices, each record lands in one phase window: ``warmup`` (excluded from
the headline figures: connection pools, caches and the model's first batches are not the
steady state), ``ramp`` (load still changing), ``steady``. Phase boundaries need not align
with slice boundaries, so phases keep their own histograms.

Times are seconds on the run's clock; ``origin`` (the run start) is subtracted. Every worker
process must use the same origin for their slicers to merge.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from duplexctl.report.histogram import HistogramSet

PHASES: tuple[str, ...] = ("warmup", "ramp", "steady")
ADMITTED = "admitted"
REJECTED_CAPACITY = "rejected_capacity"
#: an open still waiting when the run stopped: no answer either way, so not an attempt
UNFINISHED = "unfinished"


@dataclass(frozen=True, slots=True)
class Windows:
    """Phase boundaries in seconds from the run start: ``[0, warmup_s)`` is warm-up,
    ``[warmup_s, ramp_end_s)`` the ramp, the rest steady. A ``ramp_end_s`` at or before
    ``warmup_s`` means no ramp window."""

    warmup_s: float = 0.0
    ramp_end_s: float = 0.0

    def __post_init__(self) -> None:
        if self.warmup_s < 0 or self.ramp_end_s < 0:
            raise ValueError("warm-up and ramp ends must be >= 0 s")

    def phase_of(self, t: float) -> str:
        if t < self.warmup_s:
            return "warmup"
        if t < self.ramp_end_s:
            return "ramp"
        return "steady"


def exclude_warmup(
    records: Iterable[Mapping[str, Any]], warmup_s: float, *, key: str = "t", origin: float = 0.0
) -> list[Mapping[str, Any]]:
    """The records at or after ``origin + warmup_s`` (by ``record[key]``), order kept.

    For recomputing figures from the raw JSONL the same way the live run excluded them.
    """
    start = origin + warmup_s
    return [r for r in records if r[key] >= start]


@dataclass
class Slice:
    """One time slice ``[start, end)`` (seconds from the run start)."""

    index: int
    start: float
    end: float
    histograms: HistogramSet = field(default_factory=HistogramSet)
    turns: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    admissions: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    audio_s: float = 0.0
    phase: str = ""

    @property
    def attempts(self) -> int:
        return sum(self.admissions.values())

    @property
    def rejections(self) -> int:
        """Attempts that did not become a session, whatever the cause (capacity included)."""
        return self.attempts - self.admissions[ADMITTED]

    @property
    def capacity_rejections(self) -> int:
        return self.admissions[REJECTED_CAPACITY]

    @property
    def rejection_rate(self) -> float | None:
        """Attempts not admitted / attempts (docs/metrics.md ``rejection_rate``: failed
        attempts count, so a server nobody reached never reads 0 %); None without attempts."""
        attempts = self.attempts
        return self.rejections / attempts if attempts else None

    @property
    def audio_throughput(self) -> float:
        """Assistant audio seconds received per wall second within the slice."""
        return self.audio_s / (self.end - self.start)

    def merge(self, other: Slice) -> Slice:
        if (other.index, other.start, other.end) != (self.index, self.start, self.end):
            raise ValueError(f"cannot merge slice {other.index} into slice {self.index}")
        self.histograms.merge(other.histograms)
        self.turns += other.turns
        self.outcomes.update(other.outcomes)
        self.admissions.update(other.admissions)
        self.errors += other.errors
        self.audio_s += other.audio_s
        return self

    def to_dict(self, *, encode_histograms: bool = False) -> dict[str, Any]:
        """Summary for report.json; with ``encode_histograms`` also the HDR blobs needed to
        merge this slice exactly with another run's."""
        out: dict[str, Any] = {
            "index": self.index,
            "start_s": self.start,
            "end_s": self.end,
            "phase": self.phase,
            "turns": self.turns,
            "outcomes": dict(self.outcomes),
            "attempts": self.attempts,
            "admissions": dict(self.admissions),
            "rejections": self.rejections,
            "capacity_rejections": self.capacity_rejections,
            "rejection_rate": self.rejection_rate,
            "errors": self.errors,
            "audio_s": self.audio_s,
            "audio_throughput": self.audio_throughput,
            "figures": self.histograms.to_dict(),
        }
        if encode_histograms:
            out["histograms"] = self.histograms.encode()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Slice:
        """Inverse of ``to_dict(encode_histograms=True)``."""
        return cls(
            index=int(data["index"]),
            start=float(data["start_s"]),
            end=float(data["end_s"]),
            histograms=HistogramSet.decode(data.get("histograms", {})),
            turns=int(data["turns"]),
            outcomes=Counter(data.get("outcomes", {})),
            admissions=Counter(data.get("admissions", {})),
            errors=int(data.get("errors", 0)),
            audio_s=float(data.get("audio_s", 0.0)),
            phase=str(data.get("phase", "")),
        )


class TimeSlicer:
    """Buckets a run's records into slices of ``slice_s`` seconds and phase windows."""

    def __init__(
        self, slice_s: float = 10.0, *, origin: float = 0.0, windows: Windows | None = None
    ) -> None:
        if not (slice_s > 0 and math.isfinite(slice_s)):
            raise ValueError(f"slice length must be > 0 s, got {slice_s}")
        self.slice_s = float(slice_s)
        self.origin = float(origin)
        self.windows = windows or Windows()
        self._slices: dict[int, Slice] = {}
        self.phases: dict[str, HistogramSet] = {phase: HistogramSet() for phase in PHASES}

    # -- placing records -----------------------------------------------------------------

    def offset(self, t: float) -> float:
        rel = t - self.origin
        if not math.isfinite(rel) or rel < 0:
            raise ValueError(f"time {t} is before the run start {self.origin}")
        return rel

    def index_of(self, t: float) -> int:
        return math.floor(self.offset(t) / self.slice_s)

    def slice_at(self, t: float) -> Slice:
        return self._slice(self.index_of(t))

    def _slice(self, index: int) -> Slice:
        found = self._slices.get(index)
        if found is None:
            start, end = index * self.slice_s, (index + 1) * self.slice_s
            phases = {self.windows.phase_of(start), self.windows.phase_of(math.nextafter(end, 0))}
            phase = "+".join(p for p in PHASES if p in phases)
            found = self._slices[index] = Slice(index, start, end, phase=phase)
        return found

    def phase_of(self, t: float) -> str:
        return self.windows.phase_of(self.offset(t))

    def add_turn(
        self, t: float, figures: Mapping[str, float | None], outcome: str | None = None
    ) -> None:
        """One finished turn at time ``t`` (the runner uses the turn's ``t_eos``): its
        figures go into the slice's and the phase's histograms (None figures skipped)."""
        sl = self.slice_at(t)
        sl.turns += 1
        if outcome is not None:
            sl.outcomes[outcome] += 1
        sl.histograms.record_figures(figures)
        self.phases[self.phase_of(t)].record_figures(figures)

    def add_figure(self, t: float, name: str, value: float | None) -> None:
        """One non-turn sample (send_lag_ms, loop_lag_ms, connect_ms …) at ``t``."""
        if value is None:
            return
        self.slice_at(t).histograms.record(name, value)
        self.phases[self.phase_of(t)].record(name, value)

    def add_figures(self, ts: np.ndarray, name: str, values: np.ndarray) -> None:
        """Many samples of one figure at once: exactly what :meth:`add_figure` per
        ``(t, value)`` pair would record (same slice and phase arithmetic, same buckets),
        for figures too frequent to record one by one (send lag: every append)."""
        ts = np.asarray(ts, dtype=np.float64)
        values = np.asarray(values, dtype=np.float64)
        if ts.size == 0:
            return
        rel = ts - self.origin
        if not np.isfinite(rel).all() or (rel < 0).any():
            raise ValueError(f"a time in the batch is before the run start {self.origin}")
        index = np.floor(rel / self.slice_s).astype(np.int64)
        w = self.windows
        phase = np.where(rel < w.warmup_s, 0, np.where(rel < w.ramp_end_s, 1, 2))
        for i in np.unique(index).tolist():
            self._slice(i).histograms.histogram(name).record_array(values[index == i])
        for p in np.unique(phase).tolist():
            self.phases[PHASES[p]].histogram(name).record_array(values[phase == p])

    def add_admission(self, t: float, admission: str) -> None:
        """One session attempt's admission outcome (docs/metrics.md ``admission``) at ``t``."""
        self.slice_at(t).admissions[admission] += 1

    def add_error(self, t: float, count: int = 1) -> None:
        """Errors not already a turn outcome (transport errors, invariant violations)."""
        self.slice_at(t).errors += count

    def add_audio(self, t: float, seconds: float) -> None:
        self.slice_at(t).audio_s += seconds

    # -- reading -------------------------------------------------------------------------

    def slices(self) -> list[Slice]:
        """Every slice from the first to the last one touched, empty ones included."""
        if not self._slices:
            return []
        return [self._slice(i) for i in range(max(self._slices) + 1)]

    def steady(self) -> HistogramSet:
        """The headline figures: everything after warm-up and ramp."""
        return self.phases["steady"]

    def after_warmup(self) -> HistogramSet:
        """Ramp and steady merged: everything but warm-up."""
        return self.phases["ramp"].copy().merge(self.phases["steady"])

    # -- merging and encoding ------------------------------------------------------------

    def merge(self, other: TimeSlicer) -> TimeSlicer:
        """Add another worker's slicer (same slice length, origin and windows) exactly."""
        if (other.slice_s, other.origin, other.windows) != (
            self.slice_s,
            self.origin,
            self.windows,
        ):
            raise ValueError("cannot merge time slices with a different length, origin or windows")
        for index, sl in other._slices.items():
            self._slice(index).merge(sl)
        for phase, hists in other.phases.items():
            self.phases[phase].merge(hists)
        return self

    def encode(self) -> dict[str, Any]:
        return {
            "slice_s": self.slice_s,
            "origin": self.origin,
            "windows": {"warmup_s": self.windows.warmup_s, "ramp_end_s": self.windows.ramp_end_s},
            "slices": [sl.to_dict(encode_histograms=True) for sl in self.slices()],
            "phases": {phase: hists.encode() for phase, hists in self.phases.items()},
        }

    @classmethod
    def decode(cls, data: Mapping[str, Any]) -> TimeSlicer:
        windows = Windows(**data.get("windows", {}))
        slicer = cls(float(data["slice_s"]), origin=float(data.get("origin", 0.0)), windows=windows)
        for entry in data.get("slices", []):
            sl = Slice.from_dict(entry)
            slicer._slices[sl.index] = sl
        for phase, encoded in data.get("phases", {}).items():
            slicer.phases[phase] = HistogramSet.decode(encoded)
        return slicer
