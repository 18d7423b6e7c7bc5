"""The load dashboard's plain line and rich table show the same rolling figures."""

from __future__ import annotations

import io

from rich.console import Console

from duplexctl.load.dashboard import Dashboard

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
    assert "turns" in table and "4 · 0.0/s" in table  # no new turns since the line above
