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
from duplexctl.behaviour.figures import Figures
from duplexctl.behaviour.timeline import EnergyCache
from duplexctl.client.connection import ConnectionLost, DuplexConnection, OpenFailed
from duplexctl.load.config import Mix
from duplexctl.load.script import AppendCache, Script, plain_steps
from duplexctl.protocol.client_state import Happening, SessionResumed
from duplexctl.protocol.commits import LOST_AT_DROP
from duplexctl.protocol.settings import BACKCHANNEL
from duplexctl.report.continuity import SessionContinuity
from duplexctl.report.slices import UNFINISHED
from duplexctl.report.turns import TurnRecord, TurnTimes
from duplexctl.scenario.config import ReplayConfig
from duplexctl.scenario.model import BargeIn, Cancel, Drop, Pace, Scenario, Step, ToolOutput, Wait
from duplexctl.scenario.results import behaviour_figures
from duplexctl.scenario.runner import Headless, Replay
from duplexctl.units import NS_PER_MS, NS_PER_S

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
    # admitted | rejected_capacity | rejected_other | transport_error | timeout, or unfinished:
    # still opening when the run stopped (not an attempt; the recorder counts it apart)
    admission: str = "pending"
    # why it was not admitted (client.causes; client_error: an exception of the client itself),
    # None when admitted
    cause: str | None = None
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
    # connection losses (docs/metrics.md "Resume"): scripted ones (--mix drop_resume, a
    # scenario's drop step) and unplanned ones (the server or the network dropped it)
    drops: int = 0
    unplanned_drops: int = 0
    resumes: int = 0  # resumed successfully
    resume_failures: int = 0
    resume_ms: list[float] = field(default_factory=list)  # each successful resume
    resume_outcomes: dict[str, int] = field(default_factory=dict)
    unanswered_turns: int = 0  # turns given up on as no_response (errors no_response)
    # across drops (protocol/commits.py): commits sent again because the resume showed they
    # never reached the server, and turns whose commit could not be recovered
    commits_resent: int = 0
    turns_lost_at_drop: int = 0
    behaviours: dict[str, int] = field(default_factory=dict)
    unanswered_interruptions: int = 0
    # --stagger: the fraction of one pass it began at (docs/metrics.md "A steady start")
    stagger: float | None = None
    # what its responses add up to (docs/metrics.md "Audio continuity")
    continuity: SessionContinuity = field(default_factory=SessionContinuity)
    # frames in and out on a frame-locked lane (docs/metrics.md "Frame accounting"); None on
    # any other lane
    frames: dict[str, Any] | None = None

    def to_json(self, origin: float) -> dict[str, Any]:
        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - origin, 6)

        out = {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]
        for key in ("t_scheduled", "t_start", "t_created", "t_closed", "t_end"):
            out[key] = rel(out[key])
        out["continuity"] = self.continuity.to_json()
        return out


class Sink:
    """Where a session reports (the recorder implements it)."""

    def turn(self, record: TurnRecord, times: TurnTimes, session: SessionRecord) -> None: ...
    def send_lag(self, t: float, lag_ms: float) -> None: ...
    def audio(self, t: float, audio_ms: float) -> None: ...
    def session_started(self, record: SessionRecord) -> None: ...
    def session_admitted(self, record: SessionRecord, capabilities: dict[str, Any]) -> None: ...
    def session_finished(self, record: SessionRecord) -> None: ...
    def resumed(self, t: float, figures: dict[str, float | None]) -> None: ...
    def behaviour(
        self, t: float, figures: Figures, session: SessionRecord | None = None
    ) -> None: ...


def mix_steps(wait: Wait, behaviour: str, interrupt: Path) -> list[Step]:
    """The steps a ``--mix`` behaviour stands for, in front of the ``wait`` it applies to."""
    i = wait.index
    if behaviour == "barge_in":
        return [BargeIn(i, interrupt, after_ms=MIX_AFTER_MS), wait]
    if behaviour == "cancel":
        return [Cancel(i, after_ms=MIX_AFTER_MS), wait]
    if behaviour == "drop_resume":
        return [Drop(i, after_ms=MIX_AFTER_MS, resume_after_ms=MIX_RESUME_AFTER_MS), wait]
    if behaviour == "tool_call":  # answered from --tool-outputs, as the model calls
        return [ToolOutput(i), wait]
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


def _ms_between(start_ns: int | None, end_ns: int | None) -> float | None:
    return None if start_ns is None or end_ns is None else (end_ns - start_ns) / NS_PER_MS


class UnplannedDrops:
    """Counts the connection losses the client did not cause, from the connection's
    ``connection.lost`` happenings (a deliberate drop emits none). A failed automatic resume
    ends with a second ``connection.lost`` (``resuming=False``) for the same loss: not
    counted twice."""

    def __init__(self) -> None:
        self.count = 0
        self._resuming = False

    def see(self, h: Happening) -> None:
        if isinstance(h, ConnectionLost):
            if h.resuming:
                self.count += 1
                self._resuming = True
            elif self._resuming:
                self._resuming = False  # the end of the resume started for the last loss
            else:
                self.count += 1
        elif isinstance(h, SessionResumed):
            self._resuming = False


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
        energies: EnergyCache | None = None,
        send_grid: SendGrid | None = None,
        open_timeout_s: float = 30.0,
        close_timeout_s: float = 10.0,
        api_key: str | None = None,
        stop: asyncio.Event | None = None,
        stagger: float | None = None,
    ) -> None:
        self.url = url
        # --stagger: this session begins at this fraction of one pass (Script.staggered)
        self.stagger = stagger
        self.config = config
        self.script = script
        self.record = record
        self.sink = sink
        self.mix = mix
        self.rng = rng
        self.appends = appends
        self.energies = energies
        self.send_grid = send_grid
        self.open_timeout_s = open_timeout_s
        self.close_timeout_s = close_timeout_s
        self.api_key = api_key
        self.stop = stop if stop is not None else asyncio.Event()
        self._unplanned = UnplannedDrops()
        record.stagger = stagger

    def _scenario(self) -> tuple[Scenario, list[str | None]]:
        """This session's scenario: mix behaviours apply to plain say/wait scripts only;
        ``--stagger`` then begins it elsewhere in the pass."""
        scenario = self.script.scenario
        begins: list[str | None] = []
        if self.mix.total and plain_steps(scenario):
            waits = sum(isinstance(s, Wait) for s in scenario.steps)
            picks = [self.mix.pick(self.rng.random()) for _ in range(waits)]
            scenario, begins = with_mix(scenario, picks, self.script.interrupt_path)
        if self.stagger is not None:
            scenario, begins = self.script.staggered(scenario, begins, self.stagger)
        return scenario, begins

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
                energies=self.energies,
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
        crash: Exception | None = None
        try:
            await runner.drive(self.stop)
        except OpenFailed as exc:
            self._not_admitted(exc)
            return rec
        except Exception as exc:  # a server must not crash the load: counted, never raised
            if runner.conn is None:
                self._not_admitted(exc)
                return rec
            crash = exc
        finally:
            if runner.conn is not None:  # admitted: closed by the runner whatever happened
                self._closed(runner, begins, crash)
        return rec

    def _not_admitted(self, exc: Exception) -> None:
        """The attempt failed before ``session.created``: its admission and cause (the
        client names both for every failed open; any other exception is the client's own)."""
        rec = self.record
        rec.t_end = time.monotonic()
        if not isinstance(exc, OpenFailed):
            rec.admission, rec.cause = "transport_error", "client_error"
            rec.end_reason = f"{type(exc).__name__}: {exc}"
            self.sink.session_finished(rec)
            return
        # an open the run's stop abandoned got no answer either way: not a failed attempt
        admission = UNFINISHED if exc.gave_up else exc.admission
        rec.admission, rec.cause, rec.end_reason = admission, str(exc.cause), str(exc)
        if exc.error is not None:
            rec.code, rec.advertised_limit = exc.error.code, exc.error.advertised_limit
        rec.connect_ms, rec.time_to_reject_ms = exc.connect_ms, exc.time_to_reject_ms
        self.sink.session_finished(rec)

    def _admitted(self, conn: DuplexConnection) -> None:
        rec, t = self.record, conn.timings
        rec.admission = "admitted"
        rec.session_id = conn.session.session_id
        rec.connect_ms, rec.handshake_ms = t.connect_ms, t.handshake_ms
        rec.t_created = (t.t_created_ns or time.monotonic_ns()) / NS_PER_S
        conn.add_listener(self._unplanned.see)
        self.sink.session_admitted(rec, conn.session.capabilities)

    def _count_resumes(self, runner: Replay) -> None:
        """Drops and resumes of this session. The runner keeps one record per drop, scripted
        or the server's own, with its resume's outcome and times; a loss that could not even
        start a resume leaves none, so unplanned losses are counted from the connection too.
        Every resume's times go to the sink here (a turn's figures hold only its last one)."""
        rec = self.record
        times = [r.times for _, r in runner.resumes]
        rec.unplanned_drops = max(self._unplanned.count, sum(t.automatic for t in times))
        rec.drops = rec.unplanned_drops + sum(not t.automatic for t in times)
        outcomes = Counter(t.outcome for t in times)
        if rec.drops > len(times):
            outcomes["not_attempted"] = rec.drops - len(times)
        rec.resume_outcomes = dict(outcomes)
        rec.resumes = outcomes["resumed"]
        rec.resume_failures = rec.drops - rec.resumes
        for t in times:
            if t.outcome != "resumed" or t.t_resumed is None:
                continue
            resume_ms = (t.t_resumed - t.t_drop) / NS_PER_MS
            rec.resume_ms.append(round(resume_ms, 3))
            self.sink.resumed(
                t.t_resumed / NS_PER_S,
                {
                    "resume_ms": resume_ms,
                    "reconnect_ms": _ms_between(t.t_drop, t.t_open),
                    "resume_handshake_ms": _ms_between(t.t_resume_sent, t.t_resumed),
                },
            )

    def _closed(
        self, runner: Replay, begins: list[str | None], crash: Exception | None = None
    ) -> None:
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
        errors.update(
            f"resume_{r.outcome or 'pending'}"
            for r in conn.timings.resumes
            if r.automatic and r.outcome != "resumed"
        )
        rec.errors = dict(errors)
        rec.violations = conn.session.checker.counts()
        self._count_resumes(runner)
        rec.unanswered_turns = errors.get("no_response", 0)
        rec.turns_lost_at_drop = errors.get(LOST_AT_DROP, 0)
        commits = runner.state.commits
        rec.commits_resent = commits.resent_count if commits is not None else 0
        frames = conn.session.frames
        rec.frames = frames.to_json() if frames is not None else None
        rec.behaviours = dict(Counter(b for b in begins[: runner.steps_begun] if b is not None))
        rec.turns = sum(t.times.end_mode != BACKCHANNEL for t in runner.turns)  # user turns
        if self.config.pace is Pace.REALTIME:  # fast pace has no conversation timeline
            self.sink.behaviour(rec.t_end, behaviour_figures(runner.state), rec)
        rec.turns_cut = runner.unreported_turns
        rec.unanswered_interruptions = runner.unanswered_interruptions
        if crash is not None:
            rec.errors["client_exception"] = rec.errors.get("client_exception", 0) + 1
            rec.end_reason = f"client exception: {type(crash).__name__}: {crash}"
        elif runner.completed:
            rec.end_reason = "script_done"
        elif runner.interrupted and self.stop.is_set():
            rec.end_reason = "stopped"
        else:
            rec.end_reason = runner.ended_by or "ended"
        self.sink.session_finished(rec)
