"""Shared send phases: many sessions' appends go out on a few wake-ups per chunk period.

Why this exists: a pacer that sleeps on its own timer costs one event-loop wake-up per
session per chunk — 1,000 wake-ups a second at 100 sessions of 100 ms appends, each with its
epoll round, timer bookkeeping and task switch, a large share of ``load``'s CPU (measured in
BENCHMARKS.md, round 3). A :class:`SendGrid` divides the chunk period into ``phases`` slots
(10 by default: 10 ms apart for 100 ms chunks):

* a pacer joining the grid starts its schedule (``t0``) on a slot of the **least occupied**
  phase, the earliest such slot from now — so the server still sees appends spread evenly
  over the period, not one burst, and a session waits at most one period to start;
* pacers due at the same instant share **one timer** and are woken in one loop iteration, so
  a process wakes at most ``phases`` times per period however many sessions it runs.

Nothing about the schedule changes: chunk ``k`` is still due at ``t0 + k * chunk_ms`` on the
pacer's clock and its lateness is still measured as send lag (docs/metrics.md). A grid belongs to
one event loop (one per ``load`` worker process).
"""

from __future__ import annotations

import asyncio
import math


class SendGrid:
    """Phases for pacers sharing one event loop (see the module docstring)."""

    def __init__(self, period_s: float, phases: int = 10) -> None:
        if not period_s > 0 or phases < 1:
            raise ValueError(
                f"a send grid needs period_s > 0 and phases >= 1, got {period_s}, {phases}"
            )
        self.period_s = period_s
        self.phases = phases
        self.slot_s = period_s / phases
        self.members = [0] * phases  # pacers currently on each phase
        self._waiters: dict[int, list[asyncio.Future[None]]] = {}  # due (µs) -> sleepers
        self._loop: asyncio.AbstractEventLoop | None = None

    def join(self, now: float) -> tuple[int, float]:
        """A phase for a new pacer and its ``t0``: the earliest slot at or after ``now`` whose
        phase has the fewest members. Give the phase back with :meth:`leave`."""
        first = math.ceil(now / self.slot_s)
        slot = min(range(first, first + self.phases), key=lambda n: self.members[n % self.phases])
        phase = slot % self.phases
        self.members[phase] += 1
        return phase, slot * self.slot_s

    def leave(self, phase: int) -> None:
        self.members[phase] -= 1

    def next_instant(self, after: float) -> float:
        """The earliest slot instant at or after ``after`` on which some pacer is due (any
        slot when the grid is empty): another periodic task sleeping until it
        (:meth:`sleep_until`) shares that wake-up instead of adding one of its own."""
        first = math.ceil(after / self.slot_s - 1e-9)
        for slot in range(first, first + self.phases):
            if self.members[slot % self.phases]:
                return slot * self.slot_s
        return first * self.slot_s

    async def sleep_until(self, due: float, delay: float, *, first: bool = False) -> None:
        """Sleep ``delay`` seconds, until ``due`` on the caller's clock; callers due at the
        same instant (to the microsecond) share the first one's timer and wake together, in
        the order they came — or ahead of the others with ``first`` (a sampler that measures
        the wake-up itself, not the sends it shares it with)."""
        key = round(due * 1_000_000)
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future = loop.create_future()
        waiters = self._waiters.get(key)
        if waiters is None:
            waiters = self._waiters[key] = []
            loop.call_later(delay, self._fire, key)
        if first:
            waiters.insert(0, future)
        else:
            waiters.append(future)
        await future

    def _fire(self, key: int) -> None:
        for future in self._waiters.pop(key, []):
            if not future.done():  # a cancelled sleeper is skipped
                future.set_result(None)
