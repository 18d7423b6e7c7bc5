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

A run of any length keeps at most :data:`MAX_SLICES` slices. Each slice costs memory (a
histogram per metric: ~30 kB, most of it the send lag's), so a slicer that kept every
10-second slice grew by ~1 MB a minute for as long as the run lasted (issue 16, item 5).
When a record falls beyond the last slice the cap allows, adjacent slices are merged
pairwise and the slice length doubles: exact (histograms and counts add, and a record's
slice at twice the length is its slice index halved), so the slices are exactly those a run
with the doubled ``--slice`` would have recorded. Slicers at different lengths merge by
the same rule, so workers and ``duplexctl report A B`` merges stay exact. A report says
which length it used and why it is not ``--slice`` (:meth:`TimeSlicer.describe`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from duplexctl.report.histogram import HistogramSet

PHASES: tuple[str, ...] = ("warmup", "ramp", "steady")
#: The most slices a slicer holds: a day at 10 s would be 8,640; 128 keep a 30-minute run
#: at 20 s and a day at ~21 minutes, in a few MB.
MAX_SLICES: Final = 128
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

    def label(self, start: float, end: float) -> str:
        """The phases ``[start, end)`` overlaps, joined by ``+`` (``ramp+steady``)."""
        spans = {
            "warmup": (0.0, self.warmup_s),
            "ramp": (self.warmup_s, self.ramp_end_s),
            "steady": (max(self.warmup_s, self.ramp_end_s), math.inf),
        }
        return "+".join(
            p
            for p in PHASES
            if spans[p][0] < spans[p][1] and start < spans[p][1] and end > spans[p][0]
        )


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
        """Add a slice covering this one or a part of it (a finer slicer's), exactly."""
        if not self.start <= other.start < other.end <= self.end:
            raise ValueError(
                f"cannot merge slice [{other.start}, {other.end}) s into [{self.start}, "
                f"{self.end}) s"
            )
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
    """Buckets a run's records into slices and phase windows (see the module docstring).

    ``requested_s`` is the slice length asked for (``--slice``); ``slice_s`` the one in use,
    ``requested_s`` doubled ``doublings`` times to keep at most ``max_slices`` slices.
    """

    def __init__(
        self,
        slice_s: float = 10.0,
        *,
        origin: float = 0.0,
        windows: Windows | None = None,
        max_slices: int = MAX_SLICES,
    ) -> None:
        if not (slice_s > 0 and math.isfinite(slice_s)):
            raise ValueError(f"slice length must be > 0 s, got {slice_s}")
        if max_slices < 2:
            raise ValueError(f"a slicer must keep at least 2 slices, got {max_slices}")
        self.requested_s = float(slice_s)
        self.slice_s = self.requested_s
        self.doublings = 0
        self.max_slices = max_slices
        self.origin = float(origin)
        self.windows = windows or Windows()
        self._slices: dict[int, Slice] = {}
        self._newest = -1
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
        index = self.index_of(t)
        found = self._slices.get(index)  # the common case: a slice already open
        if found is not None:
            return found
        return self._slice(index >> self._fit(index))

    def _fit(self, index: int) -> int:
        """Double the slice length until slice ``index`` (at the current length) is within
        the cap; returns how many times it doubled: the index at the new length is
        ``index >> doublings`` (floor(t / 2L) = floor(floor(t / L) / 2), and t / 2L is
        exactly half of t / L in floating point, so this is the slice a slicer of length
        2L would pick)."""
        doubled = 0
        while index >> doubled >= self.max_slices:
            self._double()
            doubled += 1
        return doubled

    def _double(self) -> None:
        """Merge adjacent slices pairwise: the slice length doubles (exact)."""
        old = self._slices
        self.slice_s *= 2
        self.doublings += 1
        self._slices = {}
        self._newest = -1
        for index in sorted(old):
            self._slice(index // 2).merge(old[index])

    def _slice(self, index: int) -> Slice:
        found = self._slices.get(index)
        if found is None:
            start, end = index * self.slice_s, (index + 1) * self.slice_s
            found = Slice(index, start, end, phase=self.windows.label(start, end))
            self._slices[index] = found
            if index > self._newest:
                self._close_before(index - 1)
                self._newest = index
        return found

    def _close_before(self, index: int) -> None:
        """Compact the histograms of every slice before ``index``: records still arrive in
        the newest two (a turn is recorded at its end of speech, once its figures are
        final), rarely in older ones, and a closed slice is kept at 12 bytes a bucket."""
        for sl in self._slices.values():
            if sl.index < index:
                sl.histograms.compact()

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
        index >>= self._fit(int(index.max()))
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

    def describe(self) -> dict[str, Any]:
        """The slice length used, for the report, and why it is not ``--slice`` if not."""
        note = ""
        if self.doublings:
            times = "once" if self.doublings == 1 else f"{self.doublings} times"
            note = (
                f"--slice {self.requested_s:g} s doubled {times} to {self.slice_s:g} s, "
                f"adjacent slices merged exactly: a run keeps at most {self.max_slices} "
                "slices (and merged runs take the longer length)"
            )
        return {
            "slice_s": self.slice_s,
            "requested_slice_s": self.requested_s,
            "doublings": self.doublings,
            "max_slices": self.max_slices,
            "note": note,
        }

    # -- merging and encoding ------------------------------------------------------------

    def merge(self, other: TimeSlicer) -> TimeSlicer:
        """Add another worker's (or run's) slicer exactly: same origin and windows, a slice
        length equal to this one's or a power of two apart. The finer of the two is taken
        to the coarser length first (pairs merged, exact)."""
        if (other.origin, other.windows) != (self.origin, self.windows):
            raise ValueError("cannot merge time slices with a different origin or windows")
        shift = _doublings_between(self.slice_s, other.slice_s)
        if shift is None:
            raise ValueError(
                f"cannot merge time slices with a different length: {other.slice_s:g} s and "
                f"{self.slice_s:g} s are not a power of two apart"
            )
        for _ in range(shift):  # the other is coarser: this one doubles to its length
            self._double()
        finer = max(-shift, 0)  # the other is finer: its slice i lies in this one's i >> finer
        if other._slices:
            finer += self._fit(max(other._slices) >> finer)
        for index in sorted(other._slices):
            self._slice(index >> finer).merge(other._slices[index])
        for phase, hists in other.phases.items():
            self.phases[phase].merge(hists)
        return self

    def encode(self, *, since: int = 0) -> dict[str, Any]:
        """Everything :meth:`decode` needs; ``since``: only the slices from that index on
        (a ``--ray`` worker's checkpoints re-send just the slices that can still change)."""
        return {
            "slice_s": self.slice_s,
            "requested_slice_s": self.requested_s,
            "origin": self.origin,
            "windows": {"warmup_s": self.windows.warmup_s, "ramp_end_s": self.windows.ramp_end_s},
            "slices": [sl.to_dict(encode_histograms=True) for sl in self.slices()[since:]],
            "phases": {phase: hists.encode() for phase, hists in self.phases.items()},
        }

    @classmethod
    def decode(cls, data: Mapping[str, Any]) -> TimeSlicer:
        """Inverse of :meth:`encode`, also of reports written before slices were capped
        (no ``requested_slice_s``: the length used is the one asked for). The slices are
        kept as written, however many."""
        windows = Windows(**data.get("windows", {}))
        slice_s = float(data["slice_s"])
        requested = float(data.get("requested_slice_s", slice_s))
        slicer = cls(requested, origin=float(data.get("origin", 0.0)), windows=windows)
        shift = _doublings_between(requested, slice_s)
        if shift is None or shift < 0:
            raise ValueError(f"slice length {slice_s:g} s is not --slice {requested:g} s doubled")
        for _ in range(shift):
            slicer._double()
        for entry in data.get("slices", []):
            sl = Slice.from_dict(entry)
            slicer._slices[sl.index] = sl
        slicer._newest = max(slicer._slices, default=-1)
        for phase, encoded in data.get("phases", {}).items():
            slicer.phases[phase] = HistogramSet.decode(encoded)
        return slicer


def _doublings_between(length: float, other: float) -> int | None:
    """k with ``other == length * 2**k`` exactly (k may be negative), None if there is none."""
    ratio = other / length
    mantissa, exponent = math.frexp(ratio)
    k = exponent - 1
    if mantissa != 0.5 or math.ldexp(length, k) != other:
        return None
    return k


def run_span_s(report: Mapping[str, Any]) -> float:
    """Seconds from the run's start to its end (the longest run of a merged report): the
    time axis ends here, not at the end of the last, partly filled slice."""
    runs = report.get("runs") or []
    walls = [float(r.get("wall_s") or 0.0) for r in runs] or [float(report.get("wall_s") or 0)]
    span = max(walls)
    if span <= 0:  # an old report without wall_s: the slices are all there is
        span = max((float(s["end_s"]) for s in report.get("slices", [])), default=1.0)
    return span
