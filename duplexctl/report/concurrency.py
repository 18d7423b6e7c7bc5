"""The exact concurrency sweep over session intervals (docs/metrics.md ``observed_capacity``).

``observed_capacity`` is the peak number of sessions that were admitted and not yet closed at
the same instant. Sessions are half-open intervals ``[t_created, t_closed)``: a session
closing at ``t`` and another admitted at ``t`` never coexist, because that is exactly how a
server with one free slot hands it over. A sampled count would miss short peaks and
double-count hand-overs; the sweep is exact.

It lives with the report code (not with ``load``) because a saved run is re-judged and
merged from its intervals by ``duplexctl report``, which must not import the load runtime.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

Interval = tuple[float, float | None]


def _events(intervals: Iterable[Interval]) -> list[tuple[float, int]]:
    """(time, ±1) sorted with closes before opens at equal times (half-open intervals)."""
    events: list[tuple[float, int]] = []
    for created, closed in intervals:
        end = math.inf if closed is None else closed
        if math.isnan(created) or math.isnan(end):
            raise ValueError("session interval contains NaN")
        if end < created:
            raise ValueError(f"session closed ({end}) before it was created ({created})")
        if end == created:
            continue  # [t, t) is empty: the session never held a slot at any instant
        events.append((created, +1))
        events.append((end, -1))
    events.sort()  # (t, -1) sorts before (t, +1): a slot is released before it is re-used
    return events


def concurrency_steps(intervals: Iterable[Interval]) -> list[tuple[float, int]]:
    """The step function of concurrent admitted sessions: ``(t, level from t on)``.

    One entry per distinct event time, in time order; a session never closed
    (``t_closed`` None) stays counted to the end. Used for plots and per-slice peaks.
    """
    steps: list[tuple[float, int]] = []
    level = 0
    for t, delta in _events(intervals):
        level += delta
        if steps and steps[-1][0] == t:
            steps[-1] = (t, level)
        else:
            steps.append((t, level))
    return steps


def observed_capacity(intervals: Iterable[Interval]) -> int:
    """Peak simultaneous admitted sessions over half-open ``[t_created, t_closed)``."""
    peak = level = 0
    for _t, delta in _events(intervals):
        level += delta
        peak = max(peak, level)
    return peak
