"""Runs a :class:`~duplexctl.scenario.model.Scenario` over a live duplex session.

Three concurrent parts, each owning its own state (architecture.md: data flows one way):

* the **microphone** (:meth:`Replay._mic_loop`): appends on the pacer's absolute schedule,
  clips queued by steps, silence otherwise — the user's clock never waits for the server.
  It stamps each turn's reference points from the send of the append that carries them
  (``t_speech_start``, ``t_eos``), sends the client commit ``tail_ms`` after the speech, and
  sends an explicit interrupt at the onset of a barge-in;
* the **listener** (:meth:`Replay._on_happening`), called by the connection at receive time:
  assigns responses to turns, feeds each response's :class:`PlaybackClock`, flushes on the
  first trusted stop signal, logs the wire trace and the received audio;
* the **ticker** (:meth:`Replay._ticker`): everything that must *send* on the playback
  clock's behalf — ``playback.ack`` (0 at the first delta, every ~200 ms played, a final
  exact one at the end), ``conversation.item.truncate`` with the heard position after an
  interruption, ``session.event_ack`` — plus writing heard audio into conversation.wav.

The steps themselves (:meth:`Replay._run_steps`) only queue speech, wait and inject faults
at exact offsets. The runner keeps raw timestamps; :mod:`duplexctl.report.turns` turns them
into figures. Every exit path (end, Ctrl-C via ``stop``, server gone) closes the session with
``session.close`` and leaves complete artefacts.

**Headless** (:class:`Headless`, what ``load`` runs hundreds of in one process): the same
client core — same appends, marks, playback clocks, acks, truncates and turn times — without
what only one interactive session can afford. There are no artefacts, trace or progress
lines unless ``out_dir`` asks for them; clips come decoded and appends come base64-encoded
from caches shared by every session; each finished turn goes to a callback as soon as its
figures are final; and there is no ticker task: the microphone, which wakes every
``chunk_ms`` anyway, sends what the ticker would (acks, truncates, event acks) right after
each append, so a session costs one timer, not two. A headless run also does not wait for
what cannot come: an interruption whose answer has already ended is skipped (and counted),
and a sequenced error that fails a turn ends that turn's wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from duplexctl import __version__
from duplexctl.audio.pacer import MicQueue, Pacer
from duplexctl.audio.pacer import Pace as PacerPace
from duplexctl.audio.playback import PlaybackClock
from duplexctl.audio.sendgrid import SendGrid
from duplexctl.client.connection import (
    ConnectionLost,
    ConnectionLostError,
    ConnectionOptions,
    DuplexConnection,
    OpenFailed,
    ResumeFailed,
    ViolationRecorded,
)
from duplexctl.protocol.client_state import (
    AudioDelta,
    Committed,
    ErrorReceived,
    Happening,
    Listen,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    SessionExpired,
    SessionResumed,
)
from duplexctl.report.artifacts import RunArtifacts
from duplexctl.report.turns import (
    BargeTimes,
    Delta,
    Figure,
    ResumeTimes,
    TurnRecord,
    TurnTimes,
    compute_turn,
    compute_turns,
)
from duplexctl.scenario.clips import AppendCache, SpokenClip, load_clips
from duplexctl.scenario.config import ReplayConfig
from duplexctl.scenario.model import (
    Anchor,
    BargeIn,
    Cancel,
    Commit,
    Drop,
    Interrupt,
    Pace,
    Say,
    Scenario,
    Silence,
    Step,
    TurnEnd,
    Wait,
)

NS: Final = 1_000_000_000
MS: Final = 1_000_000
ACK_EVERY_MS: Final = 200.0  # playback.ack cadence while playing (protocol.md §6.5)
TICK_S: Final = 0.02
EVENT_ACK_EVERY_S: Final = 0.1
# headless: the journal needs trimming, not per-event acks (it also drops entries after 60 s
# and holds 8 MiB, protocol.md §6.6: a talking session journals ~8 kB/s). Every 2 s keeps it
# to ~2 s of events — what a resume replays at most — and costs 0.5 sends per session-second
# instead of the 2 an ack every 0.5 s cost (with appends at 10/s, 15 % more writes).
HEADLESS_EVENT_ACK_EVERY_S: Final = 2.0
REPORT_EVERY_S: Final = 0.5
BURST_GAP_NS: Final = 10 * MS  # frames closer than this after session.resumed = the replay
CLOSE_TIMEOUT_S: Final = 5.0
# errors that concern playback bookkeeping, not whether a turn was answered
_NOT_TURN_ERRORS: Final = frozenset(
    {
        "playback_item_not_found",
        "playback_item_mismatch",
        "playback_ack_too_late",
        "item_not_found",
        "response_not_active",
    }
)


def _now() -> int:
    return time.monotonic_ns()


__all__ = ["Headless", "Replay", "ReplayResult", "load_clips", "run_replay"]


@dataclass(eq=False)
class _Turn:
    """A user turn in flight: its raw times plus what the microphone still has to mark."""

    times: TurnTimes
    speech_start_u: float | None = None
    speech_end_u: float | None = None
    commit_u: float | None = None
    response_id: str | None = None
    frozen_ns: int | None = None  # timed out: later events no longer count for this turn
    listened: bool = False
    # a barge-in: the turn this one interrupts, and how (set on the interrupting turn)
    interrupts: _Turn | None = None
    interrupt_kind: Interrupt | None = None
    interrupted_by: _Turn | None = None  # set on the interrupted turn
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


@dataclass(eq=False)
class _Play:
    """One response's simulated playback, its ack state and its not-yet-written audio."""

    response_id: str
    turn: _Turn | None
    clock: PlaybackClock
    acked_ms: float = -1.0
    first_ack_due: bool = True
    final_sent: bool = False
    truncate_due: bool = False
    truncated: bool = False
    pending: list[list[Any]] = field(default_factory=list)  # [start_s, samples, rate, written]

    @property
    def flushed(self) -> bool:
        return self.clock.flushed_at is not None


@dataclass(slots=True)
class _Resume:
    times: ResumeTimes
    dups_before: int
    gaps_before: int
    dups_after: int | None = None
    gaps_after: int | None = None
    burst: int = 0
    burst_last_ns: int | None = None


@dataclass(frozen=True, slots=True)
class Headless:
    """Run as one of many sessions in one process (the module docstring says what changes).

    ``appends`` is shared by every session of the process (its wire format must be the
    session's); ``on_turn`` receives each turn once, when its figures are final (an
    interrupted turn waits for its interrupting turn, for ``post_interrupt_ttfa_ms``);
    ``on_append`` gets (send s, send lag ms) of every append, ``on_audio`` (recv s, audio
    ms) of every non-empty delta of an answer, ``on_open`` the connection once admitted.
    ``send_grid``, shared by the process's sessions, puts their appends on common phases
    (:mod:`duplexctl.audio.sendgrid`).
    """

    appends: AppendCache | None = None
    send_grid: SendGrid | None = None
    on_turn: Callable[[TurnRecord, TurnTimes], None] | None = None
    on_append: Callable[[float, float], None] | None = None
    on_audio: Callable[[float, float], None] | None = None
    on_open: Callable[[DuplexConnection], None] | None = None
    open_timeout_s: float = 10.0
    close_timeout_s: float = CLOSE_TIMEOUT_S
    resume_attempts: int = 5


@dataclass(slots=True)
class ReplayResult:
    """What a run produced; ``exit_code`` follows design.md (130 when interrupted)."""

    report: dict[str, Any]
    records: list[TurnRecord]
    failed_expectations: list[dict[str, Any]]
    violations: int
    interrupted: bool
    problems: list[str]

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.failed_expectations or self.violations or self.problems:
            return 1
        return 0


def _next_mark(turn: _Turn) -> float:
    """The earliest user-timeline point (ms) at which the mic still has to stamp ``turn``."""
    t = turn.times
    for u, stamped in (
        (turn.speech_start_u, t.t_speech_start),
        (turn.speech_end_u, t.t_eos),
        (turn.commit_u, t.t_commit),
    ):
        if u is not None and stamped is None:
            return u
    return math.inf


async def _first_set(*events: asyncio.Event) -> None:
    """Return as soon as one of ``events`` is set."""
    if any(e.is_set() for e in events):
        return
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


class Replay:
    """One run of one scenario (see the module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        config: ReplayConfig,
        url: str,
        *,
        api_key: str | None = None,
        out_dir: Path | None = None,
        progress: Callable[[str], None] | None = None,
        meta: dict[str, Any] | None = None,
        clips: dict[Path, SpokenClip] | None = None,
        headless: Headless | None = None,
    ) -> None:
        self.scenario = scenario
        self.config = config
        self.url = url
        self._api_key = api_key
        self.out_dir = out_dir
        self.progress = progress or (lambda _line: None)
        self.meta = meta or {}
        s = config.settings
        self.input_format = s.input_format_canonical
        if clips is None:
            clips = load_clips(scenario, s.input_rate, self.input_format)
        self.clips = clips
        self.headless = headless
        appends = headless.appends if headless is not None else None
        if appends is not None and appends.wire_format != self.input_format:
            raise ValueError(f"append cache is {appends.wire_format}, not {self.input_format}")
        self._encode = (appends or AppendCache(self.input_format, limit=0)).encode
        self.origin_ns = _now()
        self.artifacts: RunArtifacts | None = None
        self.conn: DuplexConnection | None = None
        self.mic = MicQueue(s.input_rate)
        self.pacer = Pacer(
            config.chunk_ms,
            s.input_rate,
            pace=PacerPace(config.pace.value),
            source=self.mic,
            grid=headless.send_grid if headless is not None else None,
        )
        self.turns: list[_Turn] = []
        self.by_response: dict[str, _Turn] = {}
        self.plays: dict[str, _Play] = {}
        self.step_turn: dict[int, _Turn | None] = {}
        self.resumes: list[tuple[_Turn | None, _Resume]] = []
        self.errors: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.skipped_appends = 0
        self.unanswered_interruptions = 0  # headless: skipped, the answer had already ended
        self.completed = False  # every step ran
        self.steps_begun = 0
        self.ended_by: str | None = None  # what ended the session early, if anything
        self._marking: list[_Turn] = []  # turns whose reference points the mic still stamps
        self._next_mark_ms = math.inf  # no append ending before this can stamp anything
        self._live_plays: dict[str, _Play] = {}  # plays that may still send something
        self._last_event_ack = 0.0
        self._held: list[_Turn] = []  # headless: finished, waiting for their interruption
        self._reported: set[int] = set()  # headless: turn indexes given to on_turn
        self._log_buffer: list[Happening] | None = []  # recv during open, before the send line
        self._wake = asyncio.Event()
        self._ended = asyncio.Event()
        self._report_dirty = True
        self._interrupted = False
        self._closing = False
        self._emitted: set[int] = set()
        self._status = "running"

    # -- the run -----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> ReplayResult:
        """Open, play every step, close; returns the result (raises OpenFailed on open)."""
        await self.drive(stop)
        result = self._result()
        self._finish_artifacts(report=result.report)
        return result

    async def drive(self, stop: asyncio.Event | None = None) -> None:
        """Open, play every step, close (raises OpenFailed on open); builds no report, so
        a headless session reads what it needs from the runner instead."""
        s = self.config.settings
        headless = self.headless
        if self.out_dir is not None:
            self.artifacts = RunArtifacts(
                self.out_dir,
                origin_ns=self.origin_ns,
                user_rate=s.input_rate,
                conversation_rate=s.output_rate,
            )
        close_timeout = CLOSE_TIMEOUT_S if headless is None else headless.close_timeout_s
        options = ConnectionOptions(
            heartbeat_s=None,  # the microphone never stops sending
            ack_interval_s=3600.0,  # session.event_ack is sent (and traced) by the ticker
            ack_batch=1 << 30,
            auto_resume=True,
            close_timeout_s=close_timeout,
        )
        open_timeout = max(10.0, self.config.response_timeout_s)
        if headless is not None:
            open_timeout = options.open_timeout_s = headless.open_timeout_s
            options.resume_attempts = headless.resume_attempts
            options.queue_happenings = False  # listener only: memory stays flat
        try:
            self.conn = await DuplexConnection.open(
                self.url,
                s,
                api_key=self._api_key,
                timeout=open_timeout,
                options=options,
                listeners=[self._on_happening],
                give_up=stop,  # a stop while opening ends the wait at once
            )
        except OpenFailed as exc:
            if exc.gave_up and headless is None:  # Ctrl-C while opening: interrupted (130)
                self._interrupted, self._status = True, "interrupted"
                self._flush_open_log(None)
                return
            self._status = "open_failed"
            self._flush_open_log(None)
            self._finish_artifacts(error=str(exc), admission=exc.admission)
            raise
        except BaseException:
            self._finish_artifacts(error="interrupted while opening")
            raise
        self._flush_open_log(self.conn)
        if headless is not None and headless.on_open is not None:
            headless.on_open(self.conn)
        tasks = [asyncio.create_task(self._mic_loop(), name="replay-mic")]
        if headless is None:
            tasks.append(asyncio.create_task(self._ticker(), name="replay-ticker"))
        steps = asyncio.create_task(self._run_steps(), name="replay-steps")
        waiters = {steps, asyncio.create_task(self._ended.wait())}
        if stop is not None:
            waiters.add(asyncio.create_task(stop.wait()))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            if not steps.done():
                if stop is not None and stop.is_set():
                    self._interrupted = True
                else:
                    self.problems.append("the session ended before the scenario did")
            elif steps.exception() is not None:
                raise steps.exception()  # type: ignore[misc]
            else:
                self.completed = True
        except asyncio.CancelledError:
            self._interrupted = True  # Ctrl-C without a stop event: still close and save
        finally:
            for task in waiters | set(tasks):
                task.cancel()
            for task in waiters | set(tasks):
                with contextlib.suppress(BaseException):
                    await task
            self.pacer.close()
            self._closing = True
            with contextlib.suppress(BaseException):
                await asyncio.shield(self.conn.close(timeout=close_timeout))
            t_close = self.conn.timings.t_close_sent_ns
            if self.artifacts is not None and t_close is not None:  # sent by the connection
                close_event = {"type": "session.close", "reason": "client_close"}
                self.artifacts.event("send", t_close, close_event)
            self._flush_heard(final=True)
            self._status = "interrupted" if self._interrupted else "finished"

    def _finish_artifacts(
        self,
        *,
        report: dict[str, Any] | None = None,
        error: str | None = None,
        admission: str | None = None,
    ) -> None:
        if self.artifacts is None:
            return
        if report is None:
            report = self._report()
            report["error"] = error
            if admission is not None:
                report["admission"] = admission
        self.artifacts.write_report(report)
        self.artifacts.close()

    def _flush_open_log(self, conn: DuplexConnection | None) -> None:
        """Write the opening session.update, then what was received during the handshake."""
        buffered, self._log_buffer = self._log_buffer or [], None
        if self.artifacts is None:
            return
        t_sent = conn.timings.t_update_sent_ns if conn is not None else None
        update = {"type": "session.update", "session": self.config.settings.to_session_object()}
        self.artifacts.event("send", t_sent or self.origin_ns, update)
        for h in buffered:
            self._log_recv(h)

    # -- sending -----------------------------------------------------------------------------

    async def _send(self, event: dict[str, Any]) -> int | None:
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

    async def _send_text(self, text: str) -> int | None:
        """:meth:`_send` for an event already encoded (only used when nothing is traced)."""
        conn = self.conn
        if conn is None or not conn.connected:
            return None
        try:
            return await conn.send_text(text)
        except ConnectionLostError:
            return None

    # -- microphone --------------------------------------------------------------------------

    async def _mic_loop(self) -> None:
        """Append on schedule; per append O(1) work unless a reference point is due.

        Headless, the loop is also the session's only timer: after each append it does
        what the ticker does (:meth:`_service`), at most ``chunk_ms`` late.
        """
        assert self.conn is not None
        cs = self.conn.session
        chunk_ms = self.config.chunk_ms
        fast = self.config.pace is Pace.FAST
        encode = self._encode
        headless = self.headless
        on_append = headless.on_append if headless is not None else None
        # with nothing to trace, appends go out as pre-formatted text (no dict, no orjson)
        text_only = self.artifacts is None and type(chunk_ms) is int
        append_text = cs.append_text
        while True:
            chunk = await self.pacer.next_chunk()
            if chunk is None:
                return
            if not self.conn.connected:
                self.skipped_appends += 1
                if fast:
                    await asyncio.sleep(chunk_ms / 1000)
                continue
            if text_only:
                sent = await self._send_text(
                    append_text(
                        encode(chunk.samples, chunk.silent, chunk.origin),
                        audio_end_ms=int(chunk.audio_end_ms),
                        duration_ms=chunk_ms,
                    )
                )
            else:
                event = cs.append(
                    encode(chunk.samples, chunk.silent, chunk.origin),
                    duration_ms=chunk_ms,
                    audio_end_ms=int(chunk.audio_end_ms),
                )
                sent = await self._send(event)
            if sent is None:
                self.skipped_appends += 1
                continue
            lag_ms = self.pacer.record_send(chunk, sent / NS)
            if on_append is not None:
                on_append(sent / NS, lag_ms)
            if self.artifacts is not None:
                self.artifacts.user_audio(chunk.samples, sent)
            if chunk.audio_end_ms >= self._next_mark_ms:
                await self._marks(chunk.audio_start_ms, chunk.audio_end_ms, sent)
            if headless is not None:
                now_s = _now() / NS
                if self._live_plays or now_s - self._last_event_ack >= HEADLESS_EVENT_ACK_EVERY_S:
                    await self._service(now_s, HEADLESS_EVENT_ACK_EVERY_S)
            if fast and chunk.silent:
                await asyncio.sleep(chunk_ms / 1000)  # silence flows like a real microphone

    async def _marks(self, start_ms: float, end_ms: float, sent: int) -> None:
        """Stamp reference points carried by the append ``[start_ms, end_ms)`` sent at ``sent``."""
        assert self.conn is not None
        for turn in [t for t in self._marking if t.marks_pending]:
            t = turn.times
            start_u = turn.speech_start_u
            if t.t_speech_start is None and start_u is not None and end_ms > start_u:
                t.t_speech_start = sent  # this append carries the first speech sample
                if turn.interrupts is not None:
                    await self._interrupt(turn, sent)
            if t.t_eos is None and turn.speech_end_u is not None and end_ms >= turn.speech_end_u:
                t.t_eos = sent
                turn.eos_sent.set()
            if t.t_commit is None and turn.commit_u is not None and end_ms >= turn.commit_u:
                commit_sent = await self._send(self.conn.session.commit(response_create=True))
                t.t_commit = commit_sent or _now()
        self._marking = [t for t in self._marking if t.marks_pending]
        self._next_mark_ms = min((_next_mark(t) for t in self._marking), default=math.inf)

    async def _interrupt(self, turn: _Turn, speech_sent: int) -> None:
        """A barge-in's speech onset went out: stamp t_bi, send the explicit interrupt if any."""
        assert self.conn is not None and turn.interrupts is not None
        target, kind = turn.interrupts, turn.interrupt_kind or Interrupt.SPEECH
        t_bi = speech_sent
        if kind is Interrupt.BARGE_IN:
            t_bi = await self._send(self.conn.session.barge_in()) or _now()
        elif kind is Interrupt.CANCEL:
            event = self.conn.session.response_cancel(target.response_id)
            t_bi = await self._send(event) or _now()
        target.times.barge = BargeTimes(kind=kind.value, t_bi=t_bi, interrupt_turn=turn.index)
        if kind is not Interrupt.SPEECH:
            self._flush_play(target, t_bi)  # the client itself decided to stop listening

    # -- listener (called by the connection at receive time) ---------------------------------

    def _on_happening(self, h: Happening) -> None:
        try:
            self._handle(h)
        except Exception as exc:  # never break the connection's reader
            self.problems.append(f"internal error handling {h.type}: {exc!r}")

    def _handle(self, h: Happening) -> None:
        if self._log_buffer is not None:
            self._log_buffer.append(h)
        elif self.artifacts is not None:
            self._log_recv(h)
        if self.resumes:
            self._count_burst(h)
        if isinstance(h, AudioDelta):  # the most frequent, so first (the types exclude each other)
            self._audio(h)
        elif isinstance(h, ResponseCreated):
            self._assign(h.response_id)
            if self.artifacts is not None:
                self.artifacts.response_started(h.response_id, self.config.settings.output_rate)
        elif isinstance(h, ResponseDone):
            self._response_done(h)
        elif isinstance(h, Listen) and h.response_id is not None:
            turn = self.by_response.get(h.response_id)
            if turn is not None:
                turn.listened = True
        elif isinstance(h, Committed) and (h.no_response or h.empty):
            turn = self._awaiting(need_eos=True)
            if turn is not None:
                turn.listened = True
                turn.done.set()
                self._finish(turn)
        elif isinstance(h, ErrorReceived):
            err = h.error
            self.errors.append(
                {"t_ms": self._t_ms(h.recv_ns), "code": err.code, "message": err.message}
            )
            turn = self._awaiting(need_eos=False)
            if turn is not None and err.code not in _NOT_TURN_ERRORS and turn.response_id is None:
                turn.times.error = err.code
                if self.headless is not None and h.seq is not None:
                    turn.done.set()  # the server failed the turn: no answer will come
                    self._finish(turn)
        elif isinstance(h, (SessionClosed, SessionExpired)):
            if not self._closing:
                self.problems.append(f"server ended the session: {h.type} ({h.reason})")
                self.ended_by = h.type + (f": {h.reason}" if h.reason else "")
            self._ended.set()
        elif isinstance(h, ConnectionLost) and not h.resuming:
            self.problems.append(f"connection lost: {h.reason}")
            self.ended_by = self.ended_by or f"connection lost: {h.reason}"
            self._ended.set()
        if self.headless is None:  # headless, the microphone loop services (no ticker)
            self._wake.set()

    def _log_recv(self, h: Happening) -> None:
        if self.artifacts is None:
            return
        if isinstance(h, ConnectionLost):
            self.artifacts.note(h.recv_ns, "connection.lost", reason=h.reason, resuming=h.resuming)
        elif isinstance(h, ViolationRecorded):  # with its evidence (issue 16.1)
            self.artifacts.note(h.recv_ns, "violation", **h.violation.to_dict())
        else:
            self.artifacts.event("recv", h.recv_ns, h.frame)

    def _t_ms(self, t_ns: int) -> float:
        return round((t_ns - self.origin_ns) / MS, 3)

    def _awaiting(self, *, need_eos: bool) -> _Turn | None:
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

    def _assign(self, response_id: str) -> _Turn:
        turn = self.by_response.get(response_id)
        if turn is not None:
            return turn
        turn = self._awaiting(need_eos=False)
        if turn is None:  # an answer nobody asked for (a split utterance, a model-native turn)
            turn = self._new_turn(step=0, source=None)
            turn.times.end_mode = "unsolicited"
        turn.response_id = response_id
        turn.times.response_id = response_id
        self.by_response[response_id] = turn
        return turn

    def _audio(self, h: AudioDelta) -> None:
        turn = self._assign(h.response_id)
        play = self.plays.get(h.response_id)
        if play is None:
            play = _Play(h.response_id, turn, PlaybackClock(self.config.prebuffer_ms))
            self.plays[h.response_id] = play
            self._live_plays[h.response_id] = play
        now_s = h.recv_ns / NS
        duration = h.audio_end_ms - h.audio_start_ms
        if self.artifacts is not None and not play.flushed and duration > 0 and h.pcm:
            due = play.clock.due_time()
            prebuffer_s = self.config.prebuffer_ms / 1000
            start = now_s + prebuffer_s if due is None else max(due, now_s)
            samples = np.frombuffer(h.pcm, dtype="<i2").astype(np.float32) / 32768.0
            play.pending.append([start, samples, h.sample_rate_hz, 0])
        play.clock.receive(now_s, duration)
        if self.artifacts is not None and h.pcm:
            self.artifacts.response_audio(h.response_id, h.pcm, h.sample_rate_hz)
        if duration > 0 and not turn.first_audio.is_set() and (turn.frozen_ns is None):
            turn.first_audio.set()
        on_audio = self.headless.on_audio if self.headless is not None else None
        if on_audio is not None and duration > 0:
            on_audio(now_s, duration)

    def _response_done(self, h: ResponseDone) -> None:
        turn = self._assign(h.response_id)
        play = self.plays.get(h.response_id)
        if self.artifacts is not None:
            self.artifacts.response_finished(h.response_id, h.status or "unknown")
        if h.status == "cancelled":
            self._flush_play(turn, h.recv_ns)  # the first trusted stop signal
        if play is not None and play.flushed and not play.truncated:
            play.truncate_due = play.clock.received_ms > 0
        turn.done.set()
        if play is None or play.flushed or play.clock.received_ms <= 0:
            self._finish(turn)
        self._report_dirty = True

    def _flush_play(self, turn: _Turn, at_ns: int) -> None:
        if turn.response_id is None:
            return
        play = self.plays.get(turn.response_id)
        if play is None or play.flushed:
            return
        self._write_heard(play, at_ns / NS)
        play.clock.flush(at_ns / NS)
        play.pending.clear()
        if self.artifacts is not None:
            self.artifacts.note(
                at_ns, "playback.flush", response_id=play.response_id, heard_ms=play.clock.heard_ms
            )

    def _count_burst(self, h: Happening) -> None:
        if not self.resumes:
            return
        r = self.resumes[-1][1]
        if isinstance(h, SessionResumed):
            r.burst_last_ns = h.recv_ns
        elif h.seq is not None and r.burst_last_ns is not None:
            if h.recv_ns - r.burst_last_ns <= BURST_GAP_NS:
                r.burst += 1
                r.burst_last_ns = h.recv_ns
            else:
                r.burst_last_ns = None

    # -- ticker: acks, truncates, event acks, conversation audio, report ---------------------

    async def _ticker(self) -> None:
        last_report = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TICK_S):
                    await self._wake.wait()
            self._wake.clear()
            now_s = _now() / NS
            await self._service(now_s, EVENT_ACK_EVERY_S)
            if self._report_dirty and now_s - last_report >= REPORT_EVERY_S:
                last_report = now_s
                self._report_dirty = False
                self._emit_finished_turns()
                if self.artifacts is not None:
                    self.artifacts.write_report(self._report())

    async def _service(self, now_s: float, event_ack_every_s: float) -> None:
        """Send what the playback clocks and the journal are owed by ``now_s``: acks and
        truncates of the plays that may still need one, then a due ``session.event_ack``."""
        assert self.conn is not None
        cs = self.conn.session
        if self._live_plays:
            for play in list(self._live_plays.values()):
                await self._tick_play(play, now_s)
                if self._spent(play):
                    del self._live_plays[play.response_id]
        if now_s - self._last_event_ack >= event_ack_every_s:
            self._last_event_ack = now_s
            seq = cs.pending_ack()
            if seq is not None and await self._send(cs.event_ack(seq)) is not None:
                cs.mark_acked(seq)

    def _spent(self, play: _Play) -> bool:
        """Nothing is left to send for ``play``: its final ack or its truncate went out, or
        it was flushed and its response ended with nothing to truncate."""
        if play.final_sent or play.truncated:
            return True
        if not play.flushed or play.truncate_due or self.conn is None:
            return False
        track = self.conn.session.responses.get(play.response_id)
        return track is not None and track.done

    async def _tick_play(self, play: _Play, now_s: float) -> None:
        assert self.conn is not None
        cs = self.conn.session
        rid = play.response_id
        if play.truncate_due:
            play.truncate_due = False
            play.truncated = True
            heard = play.clock.heard_ms or 0.0
            track = cs.responses.get(rid)
            item_id = (track.item_id if track else None) or f"item_{rid}"
            await self._send(cs.item_truncate(item_id, heard))
            return
        if play.flushed or play.final_sent:
            return
        self._write_heard(play, now_s)
        if play.clock.first_audible is None:
            return
        if play.first_ack_due:
            play.first_ack_due = False
            play.acked_ms = 0.0
            await self._send(cs.playback_ack(rid, 0.0))
            return
        played = play.clock.played_ms(now_s)
        track = cs.responses.get(rid)
        if track is not None and track.done and play.clock.done_playing(now_s):
            final = math.ceil(play.clock.received_ms)
            if await self._send(cs.playback_ack(rid, final)) is not None:
                play.final_sent = True
                if play.turn is not None:
                    self._finish(play.turn)
        elif played - play.acked_ms >= ACK_EVERY_MS and (
            await self._send(cs.playback_ack(rid, played)) is not None
        ):
            play.acked_ms = played

    def _write_heard(self, play: _Play, until_s: float) -> None:
        """Write the audio the playback clock has played by ``until_s`` into conversation.wav."""
        if self.artifacts is None:
            return
        while play.pending:
            start, samples, rate, written = play.pending[0]
            if start >= until_s:
                return
            upto = min(samples.size, int((until_s - start) * rate))
            if upto > written:
                at_ns = int((start + written / rate) * NS)
                self.artifacts.assistant_heard(samples[written:upto], rate, at_ns)
                play.pending[0][3] = upto
            if upto < samples.size:
                return
            play.pending.pop(0)

    def _flush_heard(self, *, final: bool) -> None:
        now_s = _now() / NS
        for play in self.plays.values():
            if not play.flushed:
                self._write_heard(play, now_s)

    def _finish(self, turn: _Turn) -> None:
        """The turn's answer is over (played out, flushed, refused or timed out)."""
        turn.finished.set()
        self._report_dirty = True
        if self.headless is not None and self.headless.on_turn is not None:
            if turn.index not in self._reported and turn not in self._held:
                self._held.append(turn)
            self._report_turns(self.headless.on_turn)

    def _report_turns(self, on_turn: Callable[[TurnRecord, TurnTimes], None]) -> None:
        """Hand finished turns to ``on_turn`` once each; an interrupted turn waits until
        its interrupting turn is finished too (``post_interrupt_ttfa_ms`` needs it)."""
        for turn in list(self._held):
            nxt = turn.interrupted_by
            if nxt is not None and not nxt.finished.is_set():
                continue
            self._held.remove(turn)
            self._reported.add(turn.index)
            times = self._times(turn)
            by_index = {turn.index: times}
            if nxt is not None:
                by_index[nxt.index] = self._times(nxt)
            on_turn(compute_turn(times, by_index), times)

    @property
    def interrupted(self) -> bool:
        """The run was stopped (the ``stop`` event, or Ctrl-C) before its steps were done."""
        return self._interrupted

    @property
    def unreported_turns(self) -> int:
        """Headless: turns never handed to ``on_turn`` (cut by the end of the session)."""
        return len(self.turns) - len(self._reported)

    def _emit_finished_turns(self) -> None:
        emitted = self._emitted
        done = [t for t in self.turns if t.finished.is_set() and t.index not in emitted]
        if not done:
            return
        records = {r.index: r for r in compute_turns([self._times(t) for t in self.turns])}
        from duplexctl.report.render import turn_progress_line

        for turn in done:
            emitted.add(turn.index)
            self.progress(turn_progress_line(records[turn.index].to_json()))

    # -- steps -------------------------------------------------------------------------------

    def _new_turn(self, *, step: int, source: str | None) -> _Turn:
        end_mode = self.config.end_mode.value
        turn = _Turn(
            TurnTimes(index=len(self.turns) + 1, step=step, source=source, end_mode=end_mode)
        )
        self.turns.append(turn)
        return turn

    def _speak(self, step: int, path: Path, commit: bool | None, tail_ms: float) -> _Turn:
        """Queue ``path`` on the microphone as a new turn; the mic stamps its points."""
        clip = self.clips[path]
        turn = self._new_turn(step=step, source=path.name)
        placement = self.mic.play(clip.clip.samples)
        turn.speech_start_u = placement.start_ms + clip.speech_start_ms
        turn.speech_end_u = placement.start_ms + clip.speech_end_ms
        do_commit = commit if commit is not None else self.config.end_mode is TurnEnd.COMMIT
        if do_commit:
            turn.commit_u = turn.speech_end_u + tail_ms
        self._marking.append(turn)
        self._next_mark_ms = min(self._next_mark_ms, _next_mark(turn))
        return turn

    def _latest(self) -> _Turn | None:
        scripted = [t for t in self.turns if t.times.step > 0]
        return scripted[-1] if scripted else None

    async def _run_steps(self) -> None:
        for step in self.scenario.steps:
            self.steps_begun += 1
            turn = await self._step(step)
            self.step_turn[step.index] = turn
            self._report_dirty = True
        await self._drain()

    async def _step(self, step: Step) -> _Turn | None:
        timeout = self.config.response_timeout_s
        if isinstance(step, Say):
            return self._speak(step.index, step.file, step.commit, step.tail_ms)
        if isinstance(step, Silence):
            await asyncio.sleep(step.ms / 1000)
            return self._latest()
        if isinstance(step, Wait):
            turn = self._latest()
            if turn is not None:
                await self._wait_finished(turn, step.timeout_s or timeout)
            return turn
        if isinstance(step, Commit):
            turn = self._latest()
            assert self.conn is not None
            sent = await self._send(self.conn.session.commit(response_create=step.response_create))
            if turn is not None and turn.times.t_commit is None:
                turn.times.t_commit = sent
            return turn
        if isinstance(step, BargeIn):
            return await self._barge_in(step)
        if isinstance(step, Cancel):
            return await self._cancel(step)
        if isinstance(step, Drop):
            return await self._drop(step)
        raise AssertionError(f"unknown step {step!r}")

    async def _anchor(self, step: BargeIn | Cancel | Drop, target: _Turn | None) -> bool:
        """Sleep until ``after_ms`` past the step's anchor; False if the anchor never came.

        Headless, also False (and counted) when the answer is over by then: under load an
        answer may end early, and interrupting a finished answer measures nothing.
        """
        start = _now()
        headless = self.headless is not None
        if step.anchor is Anchor.FIRST_AUDIO and target is not None:
            try:
                async with asyncio.timeout(self.config.response_timeout_s):
                    if headless:
                        await _first_set(target.first_audio, target.done)
                    else:
                        await target.first_audio.wait()
            except TimeoutError:
                self.problems.append(
                    f"step {step.index}: {type(step).__name__.lower()}: the answer never "
                    f"started (no audio within {self.config.response_timeout_s:g} s)"
                )
                return False
            if not target.first_audio.is_set():
                return False  # headless: answered without audio, nothing to interrupt
            assert target.response_id is not None
            track = self.conn.session.responses.get(target.response_id) if self.conn else None
            if track is not None and track.first_audio_ns is not None:
                start = track.first_audio_ns
        delay = (start + step.after_ms * MS - _now()) / NS
        if delay > 0:
            await asyncio.sleep(delay)
        if headless and target is not None and target.done.is_set():
            self.unanswered_interruptions += 1
            return False
        return True

    def _interrupt_kind(self, step: BargeIn) -> Interrupt:
        if step.interrupt is not None:
            return step.interrupt
        if self.config.end_mode in (TurnEnd.VAD, TurnEnd.MODEL):
            return Interrupt.SPEECH
        caps = self.conn.session.capabilities if self.conn else {}
        return Interrupt.BARGE_IN if caps.get("supports_barge_in") else Interrupt.CANCEL

    async def _barge_in(self, step: BargeIn) -> _Turn | None:
        target = self._latest()
        if not await self._anchor(step, target):
            return target
        turn = self._speak(step.index, step.file, step.commit, step.tail_ms)
        if target is not None:
            turn.interrupts = target
            turn.interrupt_kind = self._interrupt_kind(step)
            target.interrupted_by = turn
        return target

    async def _cancel(self, step: Cancel) -> _Turn | None:
        assert self.conn is not None
        target = self._latest()
        if not await self._anchor(step, target):
            return target
        rid = target.response_id if target is not None else None
        t_bi = await self._send(self.conn.session.response_cancel(rid)) or _now()
        if target is not None:
            target.times.barge = BargeTimes(kind="cancel", t_bi=t_bi)
            self._flush_play(target, t_bi)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.response_timeout_s):
                    await target.done.wait()
        return target

    async def _drop(self, step: Drop) -> _Turn | None:
        assert self.conn is not None
        cs = self.conn.session
        target = self._latest()
        if not await self._anchor(step, target):
            return target
        r = _Resume(
            ResumeTimes(t_drop=_now(), scripted_wait_ms=step.resume_after_ms),
            dups_before=cs.duplicates_dropped,
            gaps_before=cs.seq_gaps,
        )
        if self.resumes:  # the previous resume's counting window ends here
            prev = self.resumes[-1][1]
            prev.dups_after, prev.gaps_after = cs.duplicates_dropped, cs.seq_gaps
        self.resumes.append((target, r))
        if target is not None:
            target.times.resumes.append(r.times)
        try:
            r.times.t_drop = await self.conn.drop()
        except ConnectionLostError:
            r.times.outcome = "not_connected"
            return target
        if self.artifacts is not None:
            self.artifacts.note(r.times.t_drop, "drop", resume_after_ms=step.resume_after_ms)
        await asyncio.sleep(step.resume_after_ms / 1000)
        try:
            record = await self.conn.resume()
        except ResumeFailed as exc:
            record = exc.record
            self.problems.append(f"step {step.index}: drop: {exc}")
        rt = r.times
        rt.outcome = record.outcome or "unknown"
        if record.reconnect_ms is not None:
            rt.t_open = rt.t_drop + int(record.reconnect_ms * MS)
        rt.t_resumed = record.t_resumed_ns
        if record.t_resumed_ns is not None and record.resume_handshake_ms is not None:
            rt.t_resume_sent = record.t_resumed_ns - int(record.resume_handshake_ms * MS)
        if self.artifacts is not None and rt.t_resume_sent is not None:
            self.artifacts.event(
                "send",
                rt.t_resume_sent,
                {
                    "type": "session.resume",
                    "session_id": cs.session_id,
                    "resume_token": "<redacted>",
                    "last_received_server_event_seq": record.resumed_from_seq,
                },
            )
        if rt.outcome != "resumed":
            self.ended_by = self.ended_by or f"resume failed: {rt.outcome}"
            self._ended.set()
        return target

    async def _wait_finished(self, turn: _Turn, timeout: float) -> None:
        """Wait for the turn's speech to go out, then up to ``timeout`` for its answer."""
        if turn.speech_end_u is not None:
            clip_left_s = max(0.0, (turn.speech_end_u - self.mic.position_ms) / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(clip_left_s + timeout):
                    await turn.eos_sent.wait()
        try:
            async with asyncio.timeout(timeout):
                await turn.finished.wait()
        except TimeoutError:
            turn.frozen_ns = _now()
            turn.times.timed_out = True
            self._finish(turn)

    async def _drain(self) -> None:
        """After the last step: let answers that are still running end (bounded)."""
        deadline = self.config.response_timeout_s
        pending = [t for t in self.turns if t.response_id is not None and not t.finished.is_set()]
        for turn in pending:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(deadline):
                    await turn.finished.wait()

    # -- results -----------------------------------------------------------------------------

    def _times(self, turn: _Turn) -> TurnTimes:
        """The turn's raw times completed from its response track and playback clock."""
        t = dataclasses.replace(turn.times, deltas=[], resumes=list(turn.times.resumes))
        t.listened = turn.listened
        cutoff = turn.frozen_ns if turn.frozen_ns is not None else 1 << 62
        cs = self.conn.session if self.conn is not None else None
        track = cs.responses.get(turn.response_id) if cs and turn.response_id else None
        if track is not None:

            def upto(x: int | None) -> int | None:
                return x if x is not None and x <= cutoff else None

            t.t_created = upto(track.created_ns)
            t.deltas = [Delta(r, e - s) for r, s, e in track.deltas if e > s and r <= cutoff]
            t.first_text_recv = upto(track.first_text_ns)
            if upto(track.done_ns) is not None:
                t.t_done, t.status, t.reason = track.done_ns, track.status, track.reason
            if track.listen_ns is not None and track.listen_ns <= cutoff:
                t.listened = True
        play = self.plays.get(turn.response_id or "")
        first_audible = play.clock.first_audible if play is not None else None
        if play is not None and first_audible is not None:
            clock = play.clock
            t.p0 = int(first_audible * NS)
            end = clock.end_time()
            t.playback_end = int(end * NS) if end is not None else None
            t.underruns, t.stall_ms = clock.underruns, clock.stall_ms
            t.heard_ms = clock.heard_ms if play.flushed else clock.played_ms(_now() / NS)
        for _, r in self.resumes:
            if r.times in t.resumes:
                self._finish_resume(r)
        return t

    def _finish_resume(self, r: _Resume) -> None:
        cs = self.conn.session if self.conn is not None else None
        if cs is None:
            return
        dups = (r.dups_after if r.dups_after is not None else cs.duplicates_dropped) - r.dups_before
        gaps = (r.gaps_after if r.gaps_after is not None else cs.seq_gaps) - r.gaps_before
        r.times.duplicates_dropped = dups
        r.times.seq_gaps = gaps
        r.times.replayed_events = r.burst + dups

    def _expectations(self, records: dict[int, TurnRecord]) -> tuple[int, list[dict[str, Any]]]:
        checked, failed = 0, []
        for step in self.scenario.steps:
            if not step.expect:
                continue
            turn = self.step_turn.get(step.index)
            record = records.get(turn.index) if turn is not None else None
            for exp in step.expect:
                checked += 1
                actual = record.value(exp.name) if record is not None else None
                ok = record is not None and exp.holds(actual)
                entry = {
                    "step": step.index,
                    "turn": turn.index if turn is not None else None,
                    "name": exp.name,
                    "expected": exp.source,
                    "actual": actual,
                    "ok": ok,
                }
                if record is not None:
                    record.expectations.append(entry)
                if not ok:
                    failed.append(entry)
        return checked, failed

    def _report(self) -> dict[str, Any]:
        records = compute_turns([self._times(t) for t in self.turns])
        by_index = {r.index: r for r in records}
        checked, failed = self._expectations(by_index)
        cs = self.conn.session if self.conn is not None else None
        timings = self.conn.timings if self.conn is not None else None
        session_figures: dict[str, Any] = {}
        if timings is not None:
            for name, value, origin in (
                ("connect_ms", timings.connect_ms, "websocket open complete - connect start"),
                (
                    "handshake_ms",
                    timings.handshake_ms,
                    "recv session.created - send session.update",
                ),
                ("close_ms", timings.close_ms, "recv session.closed - send session.close"),
            ):
                if value is not None:
                    session_figures[name] = Figure(round(value, 3), origin).to_json()
        checker = cs.checker if cs is not None else None
        lag = self.pacer.lag
        return {
            "duplexctl_version": __version__,
            "command": "replay",
            "status": self._status,
            "url": self.url,
            **self.meta,
            "scenario": {
                "name": self.scenario.name,
                "source": str(self.scenario.source) if self.scenario.source else None,
                "description": self.scenario.description,
                "steps": len(self.scenario.steps),
            },
            "config": self.config.echo(),
            "session": {
                "id": cs.session_id if cs else None,
                "capabilities": cs.capabilities if cs else {},
                "close_reason": cs.close_reason if cs else None,
            },
            "session_figures": session_figures,
            "turns": [r.to_json() for r in records],
            "expectations": {"checked": checked, "failed": failed},
            "violations": [v.to_dict() for v in checker.violations] if checker else [],
            "violation_counts": checker.counts() if checker else {},
            "errors": self.errors,
            "problems": self.problems,
            "pacing": {
                "chunk_ms": self.config.chunk_ms,
                "appends": lag.count,
                "skipped_appends": self.skipped_appends,
                "send_lag_p99_ms": round(lag.percentile(99), 3),
                "send_lag_max_ms": round(lag.max_ms, 3),
                "invalid_pacing": self.config.pace is Pace.REALTIME
                and lag.count > 0
                and lag.percentile(99) > self.config.chunk_ms,
            },
        }

    def _result(self) -> ReplayResult:
        for _, r in self.resumes:
            self._finish_resume(r)
        report = self._report()
        records = compute_turns([self._times(t) for t in self.turns])
        failed = report["expectations"]["failed"]
        report["exit_code"] = (
            130
            if self._interrupted
            else (1 if failed or report["violations"] or self.problems else 0)
        )
        return ReplayResult(
            report=report,
            records=records,
            failed_expectations=failed,
            violations=len(report["violations"]),
            interrupted=self._interrupted,
            problems=list(self.problems),
        )


async def run_replay(
    scenario: Scenario,
    config: ReplayConfig,
    url: str | None,
    *,
    api_key: str | None = None,
    out_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
    handle_sigint: bool = False,
) -> ReplayResult:
    """The ``replay`` command's body: embedded server when no URL, Ctrl-C = stop and save.

    Audio is decoded before anything is started (bad input must not cost a server start).
    With ``handle_sigint`` the first Ctrl-C sets a stop flag: the run stops, closes the
    session with ``session.close``, writes what it has, and returns ``interrupted``; a
    second Ctrl-C is the usual KeyboardInterrupt.
    """
    import signal

    say = progress or (lambda _line: None)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_sigint() -> None:
        stop.set()
        loop.remove_signal_handler(signal.SIGINT)

    settings = config.settings
    clips = load_clips(scenario, settings.input_rate, settings.input_format_canonical)
    for clip in clips.values():
        if clip.clip.conversion:
            say(clip.clip.conversion)
    if handle_sigint:
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        from duplexctl.client.target import server_target

        async with server_target(url) as target:
            if target.line:
                say(target.line)
            replay = Replay(
                scenario,
                config,
                target.url,
                api_key=api_key,
                out_dir=out_dir,
                progress=say,
                meta={"embedded_server": True} if target.embedded else None,
                clips=clips,
            )
            return await replay.run(stop)
    finally:
        if handle_sigint:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)
