"""What a load run counted, in a form that merges exactly: :class:`RunTally`.

A load run's figures are HDR histograms per time slice and phase window
(:class:`~duplexctl.report.slices.TimeSlicer`), counts (admission outcomes by kind, code and
cause, turn outcomes, errors, violations, behaviours, resumes) and the session intervals the
exact ``observed_capacity`` sweep needs. Worker processes each keep one and the parent adds
them (:meth:`RunTally.merge_encoded`); ``report.json`` carries the encoded tally so that
``duplexctl report`` rebuilds or merges saved runs from the very same numbers.

The live side — the :class:`~duplexctl.load.recorder.Recorder` that sessions report to, with
its JSONL files and dashboard window — is a subclass in ``load``. This class imports nothing
of load's runtime (sockets, the scenario runner), so re-rendering a saved run does not load
them (docs/architecture.md: imports run downward).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from duplexctl.report.concurrency import Interval, observed_capacity
from duplexctl.report.histogram import HistogramSet
from duplexctl.report.slices import TimeSlicer, Windows


class SessionIntervals:
    """Every admitted session's ``[t_created, t_closed)`` (``t_closed`` None: never closed).

    The exact ``observed_capacity`` sweep over the sessions of every worker needs each
    interval, so this is the one part of a tally that grows with the sessions of a run. As
    a list of float tuples it took ~120 bytes a session; two float arrays take 16 (a day at
    ten new sessions a second: 14 MB). A session never closed is stored as NaN.
    """

    __slots__ = ("_closed", "_created")

    def __init__(self) -> None:
        self._created = array("d")
        self._closed = array("d")

    def append(self, interval: Interval) -> None:
        created, closed = interval
        self._created.append(created)
        self._closed.append(math.nan if closed is None else closed)

    def extend(self, intervals: Iterable[Interval]) -> None:
        for interval in intervals:
            self.append(interval)

    def __iter__(self) -> Iterator[Interval]:
        for created, closed in zip(self._created, self._closed, strict=True):
            yield created, None if math.isnan(closed) else closed

    def __len__(self) -> int:
        return len(self._created)


class RunTally:
    """The mergeable content of one load run (see the module docstring)."""

    def __init__(
        self,
        *,
        origin: float,
        slice_s: float = 10.0,
        windows: Windows | None = None,
        worker: int = 0,
    ) -> None:
        self.origin = origin
        self.worker = worker
        self._slicer = TimeSlicer(slice_s, origin=origin, windows=windows)
        self.admissions: Counter[str] = Counter()
        self.codes: Counter[str] = Counter()  # "<admission>:<code>"
        #: attempts not admitted, by cause (duplexctl.client.causes), and one message for each
        self.causes: Counter[str] = Counter()
        self.cause_examples: dict[str, str] = {}
        #: opens still waiting when the run stopped, by cause: no answer yet, so not attempts
        self.unfinished: Counter[str] = Counter()
        self.unfinished_examples: dict[str, str] = {}
        self.advertised_limits: Counter[int] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.violations: Counter[str] = Counter()
        self.behaviours: Counter[str] = Counter()
        self.resume_outcomes: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.intervals = SessionIntervals()
        self.capabilities: dict[str, Any] = {}

    @property
    def slicer(self) -> TimeSlicer:
        return self._slicer

    def headline(self) -> HistogramSet:
        """Everything after warm-up (ramp and steady)."""
        return self.slicer.after_warmup()

    def observed_capacity(self) -> int:
        return observed_capacity(self.intervals)

    # -- merging ---------------------------------------------------------------------------

    def encode(self, *, slices_since: int = 0) -> dict[str, Any]:
        """Everything needed to merge this tally exactly into another (JSON-safe);
        ``slices_since``: the time slices from that index on only (a partial checkpoint)."""
        return {
            "worker": self.worker,
            "origin": self.origin,
            "capabilities": self.capabilities,
            "slicer": self.slicer.encode(since=slices_since),
            "admissions": dict(self.admissions),
            "codes": dict(self.codes),
            "causes": dict(self.causes),
            "cause_examples": dict(self.cause_examples),
            "unfinished": dict(self.unfinished),
            "unfinished_examples": dict(self.unfinished_examples),
            "advertised_limits": {str(k): v for k, v in self.advertised_limits.items()},
            "outcomes": dict(self.outcomes),
            "errors": dict(self.errors),
            "violations": dict(self.violations),
            "behaviours": dict(self.behaviours),
            "resume_outcomes": dict(self.resume_outcomes),
            "counts": dict(self.counts),
            # relative to the origin: another host's monotonic clock has another zero
            "intervals": [
                [a - self.origin, None if b is None else b - self.origin] for a, b in self.intervals
            ],
        }

    def merge_encoded(self, data: Mapping[str, Any]) -> RunTally:
        """Add another tally's :meth:`encode` output (a worker's, or a saved run's)."""
        if not self.capabilities:
            self.capabilities = dict(data.get("capabilities") or {})
        other = TimeSlicer.decode(data["slicer"])
        other.origin = self.slicer.origin  # slices count from each run's own start
        self.slicer.merge(other)
        self.admissions.update(data["admissions"])
        self.codes.update(data["codes"])
        self.causes.update(data.get("causes", {}))  # absent from reports before causes
        _keep_first(self.cause_examples, data.get("cause_examples", {}))
        self.unfinished.update(data.get("unfinished", {}))  # absent from earlier reports
        _keep_first(self.unfinished_examples, data.get("unfinished_examples", {}))
        self.advertised_limits.update({int(k): v for k, v in data["advertised_limits"].items()})
        self.outcomes.update(data["outcomes"])
        self.errors.update(data["errors"])
        self.violations.update(data["violations"])
        self.behaviours.update(data["behaviours"])
        self.resume_outcomes.update(data["resume_outcomes"])
        self.counts.update(data["counts"])
        o = self.origin
        self.intervals.extend((a + o, None if b is None else b + o) for a, b in data["intervals"])
        return self

    @classmethod
    def decode(cls, data: Mapping[str, Any]) -> RunTally:
        """The tally an :meth:`encode` output describes."""
        slicer = TimeSlicer.decode(data["slicer"])
        tally = cls(
            origin=float(data["origin"]), slice_s=slicer.requested_s, windows=slicer.windows
        )
        return tally.merge_encoded(data)


def _keep_first(examples: dict[str, str], more: Mapping[str, str]) -> None:
    """One message per cause: the first seen stays (a worker's or run's, in merge order)."""
    for cause, example in more.items():
        examples.setdefault(cause, example)
