"""RunTally's session intervals: the one part of a tally that grows with the sessions of a run
(the exact observed_capacity sweep over every worker's sessions needs each one), kept at
16 bytes a session (issue 16, item 5)."""

from __future__ import annotations

import tracemalloc

from duplexctl.report.concurrency import observed_capacity
from duplexctl.report.tally import RunTally


def test_intervals_cost_16_bytes_a_session_and_sweep_exactly() -> None:
    n = 100_000
    expected = [(i * 0.5, None if i % 1000 == 999 else i * 0.5 + 1.75) for i in range(n)]
    tally = RunTally(origin=0.0)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for created, closed in expected:
            tally.intervals.append((created, closed))
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per_session = (after - before) / n
    assert per_session < 20, (
        f"{per_session:.1f} bytes a session"
    )  # a list of tuples: 64, and 48 for new floats
    assert list(tally.intervals) == expected  # never-closed sessions stay None
    assert tally.observed_capacity() == observed_capacity(expected)

    copy = RunTally(origin=0.0).merge_encoded(tally.encode())
    assert list(copy.intervals) == expected
