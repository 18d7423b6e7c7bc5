"""One load session: the scenario runner of ``replay``, headless, plus load's bookkeeping.

A load session speaks its turns with the very client core ``replay`` uses
(:class:`~duplexctl.scenario.runner.Replay` in :class:`~duplexctl.scenario.runner.Headless`
mode): the same appends on the same absolute schedule, the same marks (``t_eos``, the commit
``tail_ms`` after speech, a barge-in's onset), the same playback clocks with continuous
``playback.ack`` and ``conversation.item.truncate`` after an interruption, the same
:class:`~duplexctl.report.turns.TurnTimes` and :func:`~duplexctl.report.turns.compute_turn`.
So a ``ttfa_ms`` from ``load`` means exactly what it means in ``replay``, and the server's
playback ledger is as truthful under load as in a single replay.

What this module adds is what only a load run needs:

* the ``--mix`` behaviours, written into the session's own copy of the scenario as the
  steps a user would have written (``barge_in`` / ``cancel`` / ``drop`` 500 ms after the
  answer's first audio, before the ``wait``), drawn from the session's seeded generator;
* the :class:`SessionRecord` (admission, timings, counts) and the :class:`Sink` calls the
  recorder aggregates: admission at open, each turn as soon as its figures are final, each
  append's send lag and each delta's audio as they happen.

Stopping: when the run stops (duration over, count reached, Ctrl-C) the runner closes the
session with ``session.close`` (shielded, so a second Ctrl-C does not leak the server's
slot). Turns whose figures were not final by then are counted as ``turns_cut``: a stop is
not a server failure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from duplexctl.audio.sendgrid import SendGrid
from duplexctl.client.connection import DuplexConnection, OpenFailed
from duplexctl.load.config import Mix
from duplexctl.load.script import AppendCache, Script, plain_steps
from duplexctl.report.turns import TurnRecord, TurnTimes
from duplexctl.scenario.config import ReplayConfig
from duplexctl.scenario.model import BargeIn, Cancel, Drop, Scenario, Step, Wait
from duplexctl.scenario.runner import Headless, Replay
from duplexctl.units import NS_PER_S

#: Offset of a mix interruption after the answer's first audio.
MIX_AFTER_MS: Final = 500.0
MIX_RESUME_AFTER_MS: Final = 500.0
#: Resume attempts after a scripted drop (each bounded by the connection's resume timeout).
RESUME_ATTEMPTS: Final = 3


@dataclass(slots=True)
class SessionRecord:
    """One session attempt, for sessions.jsonl and the admission figures (docs/metrics.md)."""

    worker: int
    index: int
    attempt: int
    admission: str = (
        "pending"  # admitted | rejected_capacity | rejected_other | transport_error | timeout
    )
    code: str | None = None
    advertised_limit: int | None = None
    session_id: str | None = None
    t_scheduled: float | None = None  # s on the run clock (monotonic)
    t_start: float = 0.0
    t_created: float | None = None
    t_closed: float | None = None
    t_end: float | None = None
    client_queue_ms: float | None = None
    connect_ms: float | None = None
    handshake_ms: float | None = None
    time_to_reject_ms: float | None = None
    close_ms: float | None = None
    closed_cleanly: bool = False
    end_reason: str = ""
    turns: int = 0
    turns_cut: int = 0
    appends: int = 0
    skipped_appends: int = 0
    send_lag_p99_ms: float | None = None
    send_lag_max_ms: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    violations: dict[str, int] = field(default_factory=dict)
    resumes: int = 0  # drops answered by session.resumed (scripted and the server's own)
    drops: int = 0  # connections lost that the client did not close (issue 17.4)
    resume_ms_max: float | None = None  # the slowest resume of the session
    unanswered_turns: int = 0  # turns given up on as no_response (errors no_response)
    behaviours: dict[str, int] = field(default_factory=dict)
    unanswered_interruptions: int = 0

    def to_json(self, origin: float) -> dict[str, Any]:
        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - origin, 6)

        out = {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]
        for key in ("t_scheduled", "t_start", "t_created", "t_closed", "t_end"):
            out[key] = rel(out[key])
        return out


class Sink:
    """Where a session reports (the recorder implements it)."""

    def turn(self, record: TurnRecord, times: TurnTimes, session: SessionRecord) -> None: ...
    def send_lag(self, t: float, lag_ms: float) -> None: ...
    def audio(self, t: float, audio_ms: float) -> None: ...
    def session_started(self, record: SessionRecord) -> None: ...
    def session_admitted(self, record: SessionRecord, capabilities: dict[str, Any]) -> None: ...
    def session_finished(self, record: SessionRecord) -> None: ...


def mix_steps(wait: Wait, behaviour: str, interrupt: Path) -> list[Step]:
    """The steps a ``--mix`` behaviour stands for, in front of the ``wait`` it applies to."""
    i = wait.index
    if behaviour == "barge_in":
        return [BargeIn(i, interrupt, after_ms=MIX_AFTER_MS), wait]
    if behaviour == "cancel":
        return [Cancel(i, after_ms=MIX_AFTER_MS), wait]
    if behaviour == "drop_resume":
        return [Drop(i, after_ms=MIX_AFTER_MS, resume_after_ms=MIX_RESUME_AFTER_MS), wait]
    raise ValueError(f"unknown mix behaviour {behaviour!r}")


def with_mix(
    scenario: Scenario, picks: Sequence[str | None], interrupt: Path
) -> tuple[Scenario, list[str | None]]:
    """``scenario`` with the picked behaviour (one per ``wait``, in order) written in.

    Returns the new scenario and, per step of it, the behaviour that step begins (None for
    the rest), so a session counts only the behaviours it reached before it stopped.
    """
    steps: list[Step] = []
    begins: list[str | None] = []
    waits = iter(picks)
    for step in scenario.steps:
        behaviour = next(waits, None) if isinstance(step, Wait) else None
        if isinstance(step, Wait) and behaviour is not None:
            added = mix_steps(step, behaviour, interrupt)
        else:
            added = [step]
        steps.extend(added)
        begins.extend([behaviour] + [None] * (len(added) - 1))
    return dataclasses.replace(scenario, steps=tuple(steps)), begins


class LoadSession:
    """Drives one session of the script; :meth:`run` returns its :class:`SessionRecord`."""

    def __init__(
        self,
        *,
        url: str,
        config: ReplayConfig,
        script: Script,
        record: SessionRecord,
        sink: Sink,
        mix: Mix,
        rng: random.Random,
        appends: AppendCache,
        send_grid: SendGrid | None = None,
        open_timeout_s: float = 30.0,
        close_timeout_s: float = 10.0,
        api_key: str | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.url = url
        self.config = config
        self.script = script
        self.record = record
        self.sink = sink
        self.mix = mix
        self.rng = rng
        self.appends = appends
        self.send_grid = send_grid
        self.open_timeout_s = open_timeout_s
        self.close_timeout_s = close_timeout_s
        self.api_key = api_key
        self.stop = stop if stop is not None else asyncio.Event()

    def _scenario(self) -> tuple[Scenario, list[str | None]]:
        """This session's scenario: mix behaviours apply to plain say/wait scripts only."""
        scenario = self.script.scenario
        if not self.mix.total or not plain_steps(scenario):
            return scenario, []
        waits = sum(isinstance(s, Wait) for s in scenario.steps)
        picks = [self.mix.pick(self.rng.random()) for _ in range(waits)]
        return with_mix(scenario, picks, self.script.interrupt_path)

    async def run(self) -> SessionRecord:
        rec = self.record
        rec.t_start = time.monotonic()
        self.sink.session_started(rec)
        scenario, begins = self._scenario()
        runner = Replay(
            scenario,
            self.config,
            self.url,
            api_key=self.api_key,
            clips=self.script.clips,
            headless=Headless(
                appends=self.appends,
                send_grid=self.send_grid,
                on_turn=lambda record, times: self.sink.turn(record, times, rec),
                on_append=self.sink.send_lag,
                on_audio=self.sink.audio,
                on_open=self._admitted,
                open_timeout_s=self.open_timeout_s,
                close_timeout_s=self.close_timeout_s,
                resume_attempts=RESUME_ATTEMPTS,
            ),
        )
        try:
            await runner.drive(self.stop)
        except OpenFailed as exc:
            rec.admission = exc.admission
            rec.code = exc.error.code if exc.error is not None else None
            rec.advertised_limit = exc.error.advertised_limit if exc.error is not None else None
            rec.connect_ms = exc.connect_ms
            rec.time_to_reject_ms = exc.time_to_reject_ms
            rec.end_reason = str(exc)
            rec.t_end = time.monotonic()
            self.sink.session_finished(rec)
            return rec
        finally:
            if runner.conn is not None:  # admitted: closed by the runner whatever happened
                self._closed(runner, begins)
        return rec

    def _admitted(self, conn: DuplexConnection) -> None:
        rec, t = self.record, conn.timings
        rec.admission = "admitted"
        rec.session_id = conn.session.session_id
        rec.connect_ms, rec.handshake_ms = t.connect_ms, t.handshake_ms
        rec.t_created = (t.t_created_ns or time.monotonic_ns()) / NS_PER_S
        self.sink.session_admitted(rec, conn.session.capabilities)

    def _closed(self, runner: Replay, begins: list[str | None]) -> None:
        rec, conn = self.record, runner.conn
        assert conn is not None
        t = conn.timings
        rec.close_ms = t.close_ms
        rec.closed_cleanly = t.t_closed_ns is not None
        rec.t_closed = (t.t_closed_ns or time.monotonic_ns()) / NS_PER_S
        rec.t_end = time.monotonic()
        lag = runner.pacer.lag
        rec.appends = lag.count
        if lag.count:
            rec.send_lag_p99_ms = round(lag.percentile(99), 3)
            rec.send_lag_max_ms = round(lag.max_ms, 3)
        rec.skipped_appends = runner.skipped_appends
        errors = Counter(e["code"] or "error" for e in runner.errors)
        errors.update(
            f"resume_{r.times.outcome}" for _, r in runner.resumes if r.times.outcome != "resumed"
        )
        rec.errors = dict(errors)
        rec.violations = conn.session.checker.counts()
        drops = [r.times for _, r in runner.resumes]
        rec.drops = len(drops)
        rec.resumes = sum(d.outcome == "resumed" for d in drops)
        resume_ms = [(d.t_resumed - d.t_drop) / 1e6 for d in drops if d.t_resumed is not None]
        rec.resume_ms_max = round(max(resume_ms), 3) if resume_ms else None
        rec.unanswered_turns = errors.get("no_response", 0)
        rec.behaviours = dict(Counter(b for b in begins[: runner.steps_begun] if b is not None))
        rec.turns = len(runner.turns)
        rec.turns_cut = runner.unreported_turns
        rec.unanswered_interruptions = runner.unanswered_interruptions
        if runner.completed:
            rec.end_reason = "script_done"
        elif runner.interrupted and self.stop.is_set():
            rec.end_reason = "stopped"
        else:
            rec.end_reason = runner.ended_by or "ended"
        self.sink.session_finished(rec)
