"""What ``duplexctl load`` shows while it runs (oha / k6 style).

On a terminal: a rich Live panel refreshed about once a second — what is offered (the
sessions, the ramp's current target, the rate and arrival process, the client's own limit and
its queue), sessions active / admitted / rejected, turns per second, rolling ttfa p50/p95/p99 over the last 10 s, send-lag p99 (the
client's own validity) and errors by code. Not on a terminal (CI logs, pipes): one plain
line every few seconds with the same numbers. With ``--json`` nothing is printed while the
run goes, so stdout holds exactly one JSON document.

Snapshots come from each process's :meth:`Recorder.live`; :func:`combine` adds workers'
snapshots (live percentiles are computed over the union of their recent values).
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TextIO

import numpy as np

from duplexctl.load.arrivals import Ramp
from duplexctl.load.config import Shape
from duplexctl.load.recorder import live_percentiles
from duplexctl.prometheus.run import live_line
from duplexctl.report.summary import format_value

PLAIN_EVERY_S = 5.0
#: The turn rate is taken over this much of the recent past …
RATE_WINDOW_S = 10.0
#: … and only once it spans at least this much (before: shown as "–").
RATE_MIN_SPAN_S = 1.0


def offered_now(shape: Shape) -> Callable[[float, Mapping[str, Any]], str]:
    """The live view's ``offered`` line for a run's shape: what the client offers at an
    elapsed time (the ramp's current target), the client's own limit and its queue."""
    ramp = Ramp.parse(shape.ramp) if shape.ramp else None

    def line(elapsed: float, snap: Mapping[str, Any]) -> str:
        if shape.rate is None:
            if ramp is None:
                return f"{shape.sessions} sessions at once (closed loop)"
            return f"ramp target now {ramp.level_at(elapsed)} of {math.floor(ramp.peak)} sessions (closed loop)"
        rate = ramp.target_at(elapsed) if ramp is not None else shape.rate
        text = f"{rate:.3g} new sessions/s, {shape.arrival} arrivals" + (
            " (ramp target now)" if ramp is not None else ""
        )
        if shape.max_concurrency:
            text += (
                f" · in flight {snap.get('active', 0)} of {shape.max_concurrency} (the client's "
                f"limit) · queued on the client {snap.get('queued', 0)} now, "
                f"{snap.get('queued_total', 0)} so far"
            )
        return text

    return line


def combine(snapshots: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "active": 0,
        "admitted_now": 0,
        "queued": 0,
        "queued_total": 0,
        "attempts": 0,
        "admitted": 0,
        "rejected": 0,
        "failed": 0,
        "turns": 0,
        "drops": 0,
        "errors": {},
        "causes": {},
        "ttfa_window": [],
    }
    # per worker an array (one value per append in the window): joined once, not copied
    # value by value into a list
    lags: list[np.ndarray] = []
    for snap in snapshots:
        for key in (
            "active",
            "admitted_now",
            "queued",
            "queued_total",
            "attempts",
            "admitted",
            "rejected",
            "failed",
            "turns",
            "drops",
        ):
            out[key] += snap.get(key, 0)
        for key in ("errors", "causes"):
            for code, n in snap.get(key, {}).items():
                out[key][code] = out[key].get(code, 0) + n
        out["ttfa_window"].extend(snap.get("ttfa_window", []))
        window = snap.get("send_lag_window", [])
        if len(window):
            lags.append(np.asarray(window, dtype=float))
    out["send_lag_window"] = np.concatenate(lags) if lags else []
    return out


def node_line(node: Mapping[str, Any]) -> str:
    """One node of a ``--ray`` run: its workers' sessions, send-lag p99, CPU, and whether
    it keeps pace (a node whose own send lag exceeds a chunk is marked)."""
    if node.get("lost"):
        return "LOST (its sessions are gone; see the report)"
    return (
        f"{node.get('workers', 0)} workers · active {node.get('active', 0)} · send lag p99 "
        f"{format_value(node.get('send_lag_p99_ms'))} ms · cpu "
        f"{format_value(node.get('cpu_percent'))} %"
        + ("" if node.get("pacing_ok", True) else " · INVALID PACING")
    )


def second_line(second: Mapping[str, Any]) -> str:
    """A ``--ray`` run's last complete second, the workers' deltas added up
    (:mod:`duplexctl.load.cluster.seconds`)."""
    counts = second.get("counts", {})
    attempts = sum(counts.get(k, 0) for k in ("admitted", "rejected_capacity", "failed"))
    return (
        f"turns {counts.get('turns', 0)} · attempts {attempts} · ttfa p99 "
        f"{format_value(second.get('ttfa_p99_ms'))} ms · send lag p99 "
        f"{format_value(second.get('send_lag_p99_ms'))} ms · cpu "
        f"{format_value(second.get('cpu_percent'))} %"
    )


def _failed(snap: Mapping[str, Any]) -> str:
    """Failed attempts with their causes, e.g. ``3 (refused 3)``."""
    causes = {c: n for c, n in snap.get("causes", {}).items() if c != "rejected_capacity"}
    detail = ", ".join(f"{c} {n}" for c, n in sorted(causes.items()))
    return f"{snap.get('failed', 0)}" + (f" ({detail})" if detail else "")


class RateWindow:
    """The rate of a growing count over the last ``window_s``, from ``(time, total)`` samples.

    Snapshots arrive at no fixed cadence: with ``--workers`` the view updates on every
    worker's message, and W messages often land within a millisecond. A rate between two
    consecutive updates then divides one worker's new turns by a millisecond (the dashboard
    read 309.7 → 1234.1 → 1603.6 turns/s while the true rate was ~2.5/s); a rate over a
    fixed window of time does not depend on how often it is asked.
    """

    def __init__(
        self, t0: float, window_s: float = RATE_WINDOW_S, min_span_s: float = RATE_MIN_SPAN_S
    ) -> None:
        self.window_s = window_s
        self.min_span_s = min_span_s
        self._samples: deque[tuple[float, int]] = deque([(t0, 0)])

    def add(self, t: float, total: int) -> float | None:
        """Record ``total`` at ``t``; the rate over the window ending at ``t`` (None while
        the samples span less than ``min_span_s``)."""
        samples = self._samples
        samples.append((t, total))
        # keep the newest sample at or before the window's start, so the span covers it
        while len(samples) > 2 and samples[1][0] <= t - self.window_s:
            samples.popleft()
        t_first, first = samples[0]
        span = t - t_first
        return (total - first) / span if span >= self.min_span_s else None


class Dashboard:
    """Live view; ``mode`` is ``rich``, ``plain`` or ``off``."""

    def __init__(
        self,
        mode: str,
        *,
        title: str,
        stream: TextIO | None = None,
        offered: Callable[[float, Mapping[str, Any]], str] | None = None,
    ) -> None:
        self.mode = mode
        self.title = title
        self.offered = offered  # the "offered" line (offered_now), None: not shown
        self.stream = stream or sys.stdout
        self._live: Any = None
        self._t0 = time.monotonic()
        self._last_plain = 0.0
        self._turn_rate = RateWindow(self._t0)

    @staticmethod
    def choose(*, json_output: bool, live: bool | None) -> str:
        if json_output:
            return "off"
        if live is None:
            return "rich" if sys.stdout.isatty() else "plain"
        return "rich" if live else "plain"

    def start(self) -> None:
        if self.mode == "rich":
            from rich.live import Live

            from duplexctl.terminal import console

            self._live = Live(self._render({}), console=console(self.stream), refresh_per_second=2)
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _rolling(
        self, snap: Mapping[str, Any]
    ) -> tuple[float, int, float | None, tuple[float | None, ...], float | None]:
        """(now, turns, turns/s over the last RATE_WINDOW_S, ttfa p50/p95/p99, send-lag
        p99) for either rendering."""
        now = time.monotonic()
        turns = snap.get("turns", 0)
        rate = self._turn_rate.add(now, turns)
        ttfa = tuple(live_percentiles(snap.get("ttfa_window", [])))
        (lag99,) = live_percentiles(snap.get("send_lag_window", []), (99,))
        return now, turns, rate, ttfa, lag99

    def line(self, snap: Mapping[str, Any]) -> str:
        now, turns, rate, (p50, p95, p99), lag99 = self._rolling(snap)
        elapsed = now - self._t0
        errors = ", ".join(f"{k} {n}" for k, n in sorted(snap.get("errors", {}).items()))
        return (
            f"[{elapsed:6.1f}s] active {snap.get('active', 0)} (admitted {snap.get('admitted_now', 0)}) · "
            f"attempts {snap.get('attempts', 0)} admitted {snap.get('admitted', 0)} "
            f"rejected {snap.get('rejected', 0)} failed {_failed(snap)} · "
            f"turns {turns} ({format_value(rate)}/s) · ttfa p50 {format_value(p50)} p95 "
            f"{format_value(p95)} p99 {format_value(p99)} ms · send lag p99 "
            f"{format_value(lag99)} ms"
            + (f" · drops {snap['drops']}" if snap.get("drops") else "")
            + (f" · errors: {errors}" if errors else "")
        )

    def update(
        self,
        snap: Mapping[str, Any],
        *,
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
        second: Mapping[str, Any] | None = None,
    ) -> None:
        """Show ``snap`` (the totals); a ``--ray`` run adds one line per node (``nodes``:
        :func:`node_line`'s fields, by node name) and its last complete second (``second``:
        :func:`second_line`)."""
        if self.mode == "off":
            return
        if self.mode == "plain":
            now = time.monotonic()
            if now - self._last_plain >= PLAIN_EVERY_S:
                self._last_plain = now
                lines = [self.line(snap)]
                if self.offered is not None:
                    lines.append(f"         offered: {self.offered(now - self._t0, snap)}")
                if second is not None:
                    lines.append(f"  second {second['second']}: {second_line(second)}")
                lines += [f"  node {name}: {node_line(n)}" for name, n in (nodes or {}).items()]
                server = live_line()
                if server is not None:
                    lines.append(f"         {server}")
                print("\n".join(lines), file=self.stream, flush=True)
            return
        if self._live is not None:
            self._live.update(self._render(snap, nodes or {}, second))

    def _render(
        self,
        snap: Mapping[str, Any],
        nodes: Mapping[str, Mapping[str, Any]] | None = None,
        second: Mapping[str, Any] | None = None,
    ) -> Any:
        from rich.table import Table

        table = Table(title=self.title, show_header=False, expand=False)
        table.add_column("what", style="bold")
        table.add_column("value")
        if not snap:
            table.add_row("starting", "…")
            return table
        now, turns, rate, (p50, p95, p99), lag99 = self._rolling(snap)
        table.add_row("elapsed", f"{now - self._t0:.1f} s")
        if self.offered is not None:
            table.add_row("offered", self.offered(now - self._t0, snap))
        table.add_row(
            "sessions",
            f"active {snap.get('active', 0)} · admitted now {snap.get('admitted_now', 0)} · "
            f"attempts {snap.get('attempts', 0)}",
        )
        table.add_row(
            "admission",
            f"admitted {snap.get('admitted', 0)} · rejected {snap.get('rejected', 0)} · "
            f"failed {_failed(snap)}",
        )
        table.add_row("turns", f"{turns} · {format_value(rate)}/s")
        table.add_row(
            "ttfa (10 s)",
            f"p50 {format_value(p50)} · p95 {format_value(p95)} · p99 {format_value(p99)} ms",
        )
        table.add_row("send lag p99 (10 s)", f"{format_value(lag99)} ms")
        table.add_row("connection drops", str(snap.get("drops", 0)))
        server = live_line()
        if server is not None:
            table.add_row("server", server.removeprefix("server: "))
        errors = snap.get("errors", {})
        table.add_row("errors", ", ".join(f"{k} {n}" for k, n in sorted(errors.items())) or "none")
        if second is not None:
            table.add_row(f"second {second['second']}", second_line(second))
        for name, node in (nodes or {}).items():
            table.add_row(f"node {name}", node_line(node))
        return table
