"""The load dashboard's plain line and rich table show the same rolling figures."""

from __future__ import annotations

import io
import re
from typing import Any

from rich.console import Console

from duplexctl.load import dashboard as dashboard_module
from duplexctl.load.dashboard import Dashboard, combine

SNAP = {
    "active": 2,
    "admitted_now": 2,
    "attempts": 3,
    "admitted": 2,
    "rejected": 1,
    "failed": 0,
    "turns": 4,
    "errors": {"resource_exhausted": 1},
    "ttfa_window": [300.0, 310.0, 320.0],
    "send_lag_window": [1.0, 2.0],
}


def test_plain_line_and_rich_table_agree() -> None:
    dash = Dashboard("plain", title="load", stream=io.StringIO())
    line = dash.line(SNAP)
    assert "attempts 3 admitted 2 rejected 1" in line
    assert "ttfa p50 310 p95 319 p99 320 ms" in line
    assert "send lag p99 1.99 ms" in line
    assert "resource_exhausted 1" in line
    console = Console(width=120, file=io.StringIO())
    console.print(dash._render(SNAP))
    table = console.file.getvalue()  # type: ignore[attr-defined]
    assert "p50 310 · p95 319 · p99 320 ms" in table
    assert "1.99 ms" in table
    assert "turns" in table and "4 · –/s" in table  # no rate from less than a second


class FakeClock:
    """Stands in for the dashboard module's ``time`` (only ``monotonic`` is read)."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def monotonic(self) -> float:
        return self.t


def recorded_worker_messages() -> list[tuple[float, int, int]]:
    """(arrival time, worker, its turns so far) as the parent receives them from 4 workers
    (one live snapshot per worker per second, all within a few ms of each other), while
    the 4 workers together finish a turn every 0.4 s (2.5 turns/s)."""
    messages = []
    for second in range(1, 31):
        for worker in range(4):
            t = second + 0.001 * worker  # a burst: the four queue messages back to back
            # worker w finishes its turns at w*0.4 + k*1.6 (together: one every 0.4 s)
            done = sum(1 for k in range(100) if worker * 0.4 + k * 1.6 + 0.2 <= t)
            messages.append((t, worker, done))
    return messages


def test_turn_rate_is_the_true_rate_whatever_the_update_cadence(monkeypatch: Any) -> None:
    clock = FakeClock(0.0)
    monkeypatch.setattr(dashboard_module, "time", clock)
    dash = Dashboard("plain", title="load", stream=io.StringIO())
    latest: dict[int, dict[str, Any]] = {}
    rates = []
    for t, worker, turns in recorded_worker_messages():
        clock.t = t
        latest[worker] = {**SNAP, "turns": turns}
        line = dash.line(combine(latest.values()))  # what the parent does on each message
        shown = re.search(r"turns \d+ \(([^)]*)/s\)", line)
        assert shown is not None, line
        if t >= 2.0:
            rates.append((t, float(shown.group(1))))
    # a window of n seconds counts whole turns: within about one turn / n of the true 2.5/s
    early = [r for t, r in rates if t < 10.0]
    steady = [r for t, r in rates if t >= 10.0]
    assert min(early) >= 1.5 and max(early) <= 3.5, early
    assert min(steady) >= 2.3 and max(steady) <= 2.7, steady
