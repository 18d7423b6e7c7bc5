"""Replay's ticker: the interactive run's timer, between received frames and appends.

Every ``TICK_S`` (or at once when something was received) it has the playback part send
what the duty says is owed, writes heard audio into conversation.wav, gives up on committed
turns whose answer is overdue, and — at most every ``REPORT_EVERY_S`` when something
changed — prints the progress line of each newly finished turn and rewrites report.json,
so an interrupted run still leaves a complete report. Headless runs have no ticker: their
microphone loop does the sending (microphone.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Final

from duplexctl.protocol.settings import BACKCHANNEL
from duplexctl.report.render import turn_progress_line
from duplexctl.scenario.assembly import TurnAssembly
from duplexctl.scenario.playback import ReplayPlayback
from duplexctl.scenario.state import RunState, now_ns
from duplexctl.units import NS_PER_S

TICK_S: Final = 0.02
REPORT_EVERY_S: Final = 0.5


class Ticker:
    """The interactive run's timer task (see the module docstring)."""

    def __init__(
        self,
        run: RunState,
        playback: ReplayPlayback,
        assembly: TurnAssembly,
        build_report: Callable[[], dict[str, Any]],
    ) -> None:
        self.run = run
        self.playback = playback
        self.assembly = assembly
        self.build_report = build_report
        self._printed: set[int] = set()  # turns whose progress line was printed

    async def loop(self) -> None:
        run = self.run
        last_report = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_S):
                    await run.wake.wait()
            run.wake.clear()
            now = now_ns()
            now_s = now / NS_PER_S
            await self.playback.send_owed(now_s)
            self.playback.write_heard(now_s)
            self.assembly.expire_unanswered(now)
            if run.report_dirty and now_s - last_report >= REPORT_EVERY_S:
                last_report = now_s
                run.report_dirty = False
                self.print_finished_turns()
                if run.artifacts is not None:
                    run.artifacts.write_report(self.build_report())

    def print_finished_turns(self) -> None:
        run = self.run
        done = [t for t in run.turns if t.finished.is_set() and t.index not in self._printed]
        if not done:
            return
        records = {r.index: r for r in self.assembly.records()}
        for turn in done:
            self._printed.add(turn.index)
            if turn.times.end_mode != BACKCHANNEL:  # the model's "mm-hm" is no user turn
                run.progress(turn_progress_line(records[turn.index].to_json()))
