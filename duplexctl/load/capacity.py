"""The capacity search controller (``--find-capacity``), pure.

``CapacitySearch`` finds the largest offered load that still meets the run's criteria (SLOs
held, no capacity rejections). It is a controller, not a runner: the load command runs a step
at the proposed level, reports pass or fail with a reason, and asks for the next level. Steps
go up (geometrically and/or by an increment) until the first failure, then bisect between the
last pass and the first failure down to ``resolution``. Keeping it free of I/O makes it
testable against a synthetic oracle and reusable for rate (open loop) or sessions (closed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class CapacityStep:
    level: int
    passed: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """``largest_pass`` None: even the lowest level failed. ``first_fail`` None: nothing
    failed up to ``max_level`` (the server's capacity was not reached)."""

    largest_pass: int | None
    first_fail: int | None
    reason: str
    steps: tuple[CapacityStep, ...]


@dataclass
class CapacitySearch:
    """Step-up-then-bisect over integer load levels: sessions (closed loop) or sessions/s
    (open loop; search in tenths or hundredths for finer rates).

    Step up: ``next = max(level + 1, ceil(level × factor), level + increment)``; so
    ``factor=2`` doubles, ``factor=1, increment=4`` adds 4 each step. The first failure starts
    the bisection between the last passing level (0 if none: no load trivially passes) and
    the failing one; it ends when they are ``resolution`` or less apart. Assumes pass/fail is
    monotone in the level; a non-monotone oracle still terminates (bisection only ever
    proposes levels strictly between the two bounds), reporting the boundary it found.
    Without ``max_level`` the step-up phase is unbounded: the caller must bound it (the load
    command caps it by its session/connection budget).
    """

    start: int = 1
    factor: float = 2.0
    increment: int = 0
    resolution: int = 1
    max_level: int | None = None
    steps: list[CapacityStep] = field(default_factory=list)
    _lo: int = field(default=0, init=False, repr=False)  # highest pass (0 = implicit)
    _hi: int | None = field(default=None, init=False, repr=False)  # lowest fail
    _pending: int | None = field(default=None, init=False, repr=False)
    _top_reached: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.start < 1:
            raise ValueError(f"start level must be >= 1, got {self.start}")
        if self.factor < 1:
            raise ValueError(f"step factor must be >= 1, got {self.factor}")
        if self.increment < 0:
            raise ValueError(f"step increment must be >= 0, got {self.increment}")
        if self.resolution < 1:
            raise ValueError(f"resolution must be >= 1, got {self.resolution}")
        if self.max_level is not None and self.max_level < self.start:
            raise ValueError(f"max level {self.max_level} is below the start {self.start}")

    @property
    def done(self) -> bool:
        if self._top_reached:
            return True
        if self._hi is None:
            return False
        return self._hi - self._lo <= self.resolution

    def next_level(self) -> int | None:
        """The level to run next, or None when the search is over. Idempotent until
        :meth:`record` reports the proposed level's outcome."""
        if self._pending is not None:
            return self._pending
        if self.done:
            return None
        if not self.steps:
            level = self.start
        elif self._hi is None:
            last = self.steps[-1].level
            level = max(last + 1, math.ceil(last * self.factor), last + self.increment)
            if self.max_level is not None:
                level = min(level, self.max_level)
        else:
            level = (self._lo + self._hi) // 2
        self._pending = level
        return level

    def record(self, level: int, passed: bool, reason: str = "") -> None:
        """Report the outcome of the proposed level (``reason``: why it failed)."""
        if self._pending is None or level != self._pending:
            raise ValueError(f"level {level} was not the proposed level {self._pending}")
        self._pending = None
        self.steps.append(CapacityStep(level, passed, reason))
        if passed:
            self._lo = max(self._lo, level)
            if self._hi is None and self.max_level is not None and level >= self.max_level:
                self._top_reached = True
        elif self._hi is None or level < self._hi:
            self._hi = level

    @property
    def largest_pass(self) -> int | None:
        return self._lo if self._lo > 0 else None

    @property
    def first_fail(self) -> int | None:
        return self._hi

    @property
    def fail_reason(self) -> str:
        if self._hi is None:
            return ""
        return next(s.reason for s in self.steps if s.level == self._hi and not s.passed)

    def result(self) -> CapacityResult:
        if self._hi is None:
            reason = "max level reached without a failure" if self._top_reached else ""
        else:
            reason = self.fail_reason
        return CapacityResult(self.largest_pass, self.first_fail, reason, tuple(self.steps))

    def run(self, oracle: Callable[[int], tuple[bool, str]]) -> CapacityResult:
        """Drive the search with ``oracle(level) -> (passed, reason)`` (tests, simulations)."""
        while (level := self.next_level()) is not None:
            passed, reason = oracle(level)
            self.record(level, passed, reason)
        return self.result()
