"""The state one replay run shares between its parts (docs/architecture.md: replay).

The runner is split by job — microphone, listener, playback, step interpreter, turn
assembly, report — and each part owns its own state where it can. What more than one of
them reads lives here, in :class:`RunState`: the turns in flight, the plays, the scripted
and automatic resumes, the errors and problems, the connection and the artefacts, plus the
few queries every part asks ("which turn is awaiting an answer?") and the one way to send.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from duplexctl.audio.playback import PlaybackClock
from duplexctl.audio.sendgrid import SendGrid
from duplexctl.behaviour.timeline import ConversationTimeline, EnergyCache
from duplexctl.client.connection import ConnectionLostError, DuplexConnection
from duplexctl.protocol.client_state import ClientSession
from duplexctl.protocol.commits import CommitLedger
from duplexctl.protocol.settings import BACKCHANNEL, UNSOLICITED
from duplexctl.report.artifacts import RunArtifacts
from duplexctl.report.turns import ResumeTimes, TurnRecord, TurnTimes
from duplexctl.rundir import Writes
from duplexctl.scenario.clips import AppendCache
from duplexctl.scenario.config import ReplayConfig
from duplexctl.scenario.model import Interrupt, Scenario
from duplexctl.units import NS_PER_MS

CLOSE_TIMEOUT_S: Final = 5.0


def now_ns() -> int:
    """The one clock of a run: monotonic ns, the clock of every send and receive stamp."""
    return time.monotonic_ns()


@dataclass(frozen=True, slots=True)
class Headless:
    """Run as one of many sessions in one process (``load``; runner.py says what changes).

    ``appends`` is shared by every session of the process (its wire format must be the
    session's); ``on_turn`` receives each turn once, when its figures are final (an
    interrupted turn waits for its interrupting turn, for ``post_interrupt_ttfa_ms``);
    ``on_append`` gets (send s, send lag ms) of every append, ``on_audio`` (recv s, audio
    ms) of every non-empty delta of an answer, ``on_open`` the connection once admitted.
    ``send_grid``, shared by the process's sessions, puts their appends on common phases
    (:mod:`duplexctl.audio.sendgrid`).
    """

    appends: AppendCache | None = None
    # the behaviour timeline's frame energies of the clips, shared like ``appends``
    energies: EnergyCache | None = None
    send_grid: SendGrid | None = None
    on_turn: Callable[[TurnRecord, TurnTimes], None] | None = None
    on_append: Callable[[float, float], None] | None = None
    on_audio: Callable[[float, float], None] | None = None
    on_open: Callable[[DuplexConnection], None] | None = None
    open_timeout_s: float = 10.0
    close_timeout_s: float = CLOSE_TIMEOUT_S
    resume_attempts: int = 5


@dataclass(eq=False)
class LiveTurn:
    """A user turn in flight: its raw times plus what the microphone still has to mark."""

    times: TurnTimes
    speech_start_u: float | None = None
    speech_end_u: float | None = None
    commit_u: float | None = None
    response_id: str | None = None
    frozen_ns: int | None = None  # given up on: later events no longer count for this turn
    listened: bool = False
    # committed (client commit sent, or the server's speech_stopped/committed): no
    # response.created by then is an unanswered turn, an error (issue 16.1)
    answer_due_ns: int | None = None
    # a barge-in: the turn this one interrupts, and how (set on the interrupting turn)
    interrupts: LiveTurn | None = None
    interrupt_kind: Interrupt | None = None
    interrupted_by: LiveTurn | None = None  # set on the interrupted turn
    first_audio: asyncio.Event = field(default_factory=asyncio.Event)
    eos_sent: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def index(self) -> int:
        return self.times.index

    @property
    def marks_pending(self) -> bool:
        t = self.times
        return (
            (self.speech_start_u is not None and t.t_speech_start is None)
            or (self.speech_end_u is not None and t.t_eos is None)
            or (self.commit_u is not None and t.t_commit is None)
        )

    def next_mark(self) -> float:
        """The earliest user-timeline point (ms) at which the mic still has to stamp this."""
        t = self.times
        for u, stamped in (
            (self.speech_start_u, t.t_speech_start),
            (self.speech_end_u, t.t_eos),
            (self.commit_u, t.t_commit),
        ):
            if u is not None and stamped is None:
                return u
        return math.inf


@dataclass(eq=False)
class Play:
    """One response's simulated playback and its not-yet-written heard audio."""

    response_id: str
    turn: LiveTurn | None
    clock: PlaybackClock
    pending: list[list[Any]] = field(default_factory=list)  # [start_s, samples, rate, written]

    @property
    def flushed(self) -> bool:
        return self.clock.flushed_at is not None


@dataclass(slots=True)
class PendingResume:
    """One drop and its resume, scripted (a ``drop`` step) or not (the server dropped us)."""

    times: ResumeTimes
    dups_before: int
    gaps_before: int
    dups_after: int | None = None
    gaps_after: int | None = None
    burst: int = 0
    burst_last_ns: int | None = None


class RunState:
    """What the parts of one run share (see the module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        config: ReplayConfig,
        url: str,
        headless: Headless | None,
        progress: Callable[[str], None],
    ) -> None:
        self.scenario = scenario
        self.config = config
        self.url = url
        self.headless = headless
        self.progress = progress
        self.meta: dict[str, Any] = {}  # extra top-level report keys (embedded_server, …)
        self.origin_ns = now_ns()
        self.conn: DuplexConnection | None = None
        self.artifacts: RunArtifacts | None = None
        # --out's writes: the first that fails stops the run (exit 4, duplexctl/rundir.py)
        self.writes = Writes()
        # the client's commits the server has not confirmed, across drops (turn_detection
        # none: protocol/commits.py); what the listener sends for it goes out in the background
        self.commits: CommitLedger[LiveTurn | None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        # the aligned timeline of the behaviour figures (replay's and each load session's)
        # and what the script placed on it: pauses inside turns, on the user timeline u
        self.timeline: ConversationTimeline | None = ConversationTimeline()
        self.user_offset_ms: float | None = None  # timeline ms - u, fixed by the first append
        self.pauses_u: list[tuple[float, float]] = []
        self.turns: list[LiveTurn] = []
        self.by_response: dict[str, LiveTurn] = {}
        self.plays: dict[str, Play] = {}
        self.step_turn: dict[int, LiveTurn | None] = {}
        self.resumes: list[tuple[LiveTurn | None, PendingResume]] = []
        self.errors: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.notes: list[str] = []  # what the client adapted to the server (cadence …)
        self.skipped_appends = 0
        self.unanswered_interruptions = 0  # headless: skipped, the answer had already ended
        self.completed = False  # every step ran
        self.steps_begun = 0
        self.ended_by: str | None = None  # what ended the session early, if anything
        self.interrupted = False
        self.closing = False
        self.status = "running"
        self.report_dirty = True
        self.ended = asyncio.Event()  # the session is over (closed, expired, lost)
        self.wake = asyncio.Event()  # something was received: the ticker looks now

    @property
    def session(self) -> ClientSession:
        assert self.conn is not None
        return self.conn.session

    # -- queries -----------------------------------------------------------------------------

    def new_turn(self, *, step: int, source: str | None) -> LiveTurn:
        turn = LiveTurn(
            TurnTimes(
                index=len(self.turns) + 1,
                step=step,
                source=source,
                end_mode=self.config.end_mode.value,
            )
        )
        self.turns.append(turn)
        return turn

    def latest(self) -> LiveTurn | None:
        """The latest turn a step spoke (unsolicited answers are not steps' turns)."""
        for turn in reversed(self.turns):
            if turn.times.step > 0:
                return turn
        return None

    def awaiting(self, *, need_eos: bool) -> LiveTurn | None:
        """The oldest scripted turn that has started speaking and has no answer yet."""
        for turn in self.turns:
            if turn.response_id is not None or turn.frozen_ns is not None or turn.done.is_set():
                continue
            if turn.times.t_speech_start is None and turn.speech_start_u is not None:
                continue
            if need_eos and turn.times.t_eos is None:
                continue
            return turn
        return None

    def in_flight(self) -> LiveTurn | None:
        """The turn a drop happening now belongs to: the oldest unfinished one, else the
        latest (a drop between turns is charged to the turn before it)."""
        for turn in self.turns:
            if not turn.finished.is_set():
                return turn
        return self.turns[-1] if self.turns else None

    def assign(self, response_id: str, *, backchannel: bool = False) -> LiveTurn:
        """The turn ``response_id`` answers (an unsolicited turn when none is waiting, or
        when it is a backchannel: it answers no turn)."""
        turn = self.by_response.get(response_id)
        if turn is not None:
            return turn
        turn = None if backchannel else self.awaiting(need_eos=False)
        if turn is None:  # an answer nobody asked for (a split utterance, a model-native turn)
            turn = self.new_turn(step=0, source=None)
            # a backchannel is tracked like an answer (its audio plays, is acknowledged) but
            # is no user turn: the reports list it apart (BACKCHANNEL)
            turn.times.end_mode = BACKCHANNEL if backchannel else UNSOLICITED
        turn.response_id = response_id
        turn.times.response_id = response_id
        self.by_response[response_id] = turn
        return turn

    def unassign(self, response_id: str) -> None:
        """``response_id`` answers no turn after all (a tool call's synthetic response,
        docs/protocol.md §13.4): its turn awaits its answer again; an unsolicited turn made
        for it alone goes."""
        turn = self.by_response.pop(response_id, None)
        if turn is None:
            return
        play = self.plays.get(response_id)
        if play is not None:
            play.turn = None
        if turn.times.step == 0 and self.turns and self.turns[-1] is turn:
            self.turns.pop()
            return
        turn.response_id = None
        turn.times.response_id = None
        turn.first_audio.clear()

    def t_ms(self, t_ns: int) -> float:
        """A monotonic stamp as ms since the run began (report times)."""
        return round((t_ns - self.origin_ns) / NS_PER_MS, 3)

    # -- sending -----------------------------------------------------------------------------

    async def send(self, event: dict[str, Any]) -> int | None:
        """Send and trace one event; None when the socket is gone (dropped on purpose)."""
        conn = self.conn
        if conn is None or not conn.connected:
            return None
        try:
            sent = await conn.send(event)
        except ConnectionLostError:
            return None
        if self.artifacts is not None:
            self.artifacts.event("send", sent, event)
        return sent

    def send_soon(self, event: dict[str, Any]) -> None:
        """Send ``event`` from a synchronous part (the listener), as soon as the loop can;
        it waits for a resume running, like every send."""
        task = asyncio.get_running_loop().create_task(self._send_waiting(event))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send_waiting(self, event: dict[str, Any]) -> None:
        conn = self.conn
        if conn is None or self.closing:
            return
        try:
            sent = await conn.send(event)  # waits for a running resume
        except ConnectionLostError:
            return
        if self.artifacts is not None:
            self.artifacts.event("send", sent, event)

    def cancel_background(self) -> None:
        for task in list(self._background):
            task.cancel()

    async def send_text(self, text: str) -> int | None:
        """:meth:`send` for an event already encoded (only used when nothing is traced)."""
        conn = self.conn
        if conn is None or not conn.connected:
            return None
        try:
            return await conn.send_text(text)
        except ConnectionLostError:
            return None
