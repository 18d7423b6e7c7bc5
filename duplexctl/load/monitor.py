"""The load generator watching itself (docs/metrics.md "Load-generator validity").

A load test whose client fell behind measures the client, not the server. So every run
samples its own event loop: a task asks to wake every 100 ms and records how late it woke
(``loop_lag_ms``; a loop busy decoding frames or blocked by a slow call shows up here before
it shows up as send lag), and the process's CPU time over the run gives ``client_cpu_percent``
(100 = one core). Both go into the report next to the send lag; a run whose send lag p99
exceeds one chunk is flagged ``invalid_pacing`` by the report, not here.

With a send grid the sampler wakes on the grid's instants (every ``period_s``, on a phase
whose pacers are due then), sharing their wake-up: on these virtual machines a wake-up after
an idle gap costs ~0.2 ms of CPU by itself (``bench/wake_cost.py``), and a sampler of its
own would add ten a second to the process it is meant to watch. It runs before that
instant's pacers, so it still measures the wake-up's lateness, not their sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Final

from duplexctl.audio.sendgrid import SendGrid

LOOP_LAG_PERIOD_S: Final = 0.1


class LoopLagMonitor:
    """Samples event-loop lag every ``period_s`` until stopped; calls ``record(t, lag_ms)``."""

    def __init__(
        self,
        record: Callable[[float, float], None],
        period_s: float = LOOP_LAG_PERIOD_S,
        grid: SendGrid | None = None,
    ) -> None:
        self.record = record
        self.period_s = period_s
        self.grid = grid
        self.max_ms = 0.0
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="loop-lag")

    async def _run(self) -> None:
        due = self._next(time.monotonic() + self.period_s)
        while True:
            delay = max(0.0, due - time.monotonic())
            if self.grid is not None:
                await self.grid.sleep_until(due, delay, first=True)
            else:
                await asyncio.sleep(delay)
            now = time.monotonic()
            lag_ms = max(0.0, (now - due) * 1000.0)
            self.max_ms = max(self.max_ms, lag_ms)
            self.samples += 1
            self.record(now, lag_ms)
            due = self._next(due + self.period_s)
            if due < now:  # fell more than a period behind: re-anchor, do not burst
                due = self._next(now + self.period_s)

    def _next(self, after: float) -> float:
        return after if self.grid is None else self.grid.next_instant(after)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class CpuMeter:
    """Process CPU time (user + system, all threads) over wall time since ``start``."""

    def __init__(self) -> None:
        self.cpu0 = time.process_time()
        self.wall0 = time.monotonic()

    def percent(self) -> float:
        wall = time.monotonic() - self.wall0
        return 100.0 * (time.process_time() - self.cpu0) / wall if wall > 0 else 0.0

    def seconds(self) -> tuple[float, float]:
        """(cpu seconds, wall seconds) since start."""
        return time.process_time() - self.cpu0, time.monotonic() - self.wall0
