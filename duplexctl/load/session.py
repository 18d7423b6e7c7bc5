"""One load session: open, speak the script's turns in real time, measure, always close.

This is the thin adapter the load generator needs until the scenario runner of
``duplexctl.scenario`` can drive a session without owning a terminal and artefacts: it runs
the same :class:`~duplexctl.scenario.model.Scenario` steps (say / silence / wait / barge_in /
cancel / drop / commit), records raw timestamps into the same
:class:`~duplexctl.report.turns.TurnTimes` and turns them into figures with the same
:func:`~duplexctl.report.turns.compute_turn`, so a ``ttfa_ms`` from ``load`` means exactly
what it means in ``replay``. What it leaves out is what load cannot afford per session:
WAV writing, the event trace, expectations.

Shape, and why:

* **Two tasks per session.** The *pacer* task owns every append: chunk k goes out at
  ``t0 + k·chunk_ms`` (absolute schedule, :class:`~duplexctl.audio.pacer.Pacer`), and the
  sends that must sit at an exact place in the user's audio (``t_eos``, the commit
  ``tail_ms`` after speech, a barge-in's first speech sample and its ``barge_in`` /
  ``response.cancel``) are *marks* on the user timeline, sent by the pacer right after the
  append that reaches them — so their order relative to the audio is exact. The *script*
  task walks the steps and waits for what the server does.
* **Receive-time listener.** The connection calls :meth:`LoadSession._on` synchronously as
  each frame is read (no queue of happenings per session: memory stays flat at hundreds of
  sessions); it stamps the turn's timestamps and feeds the playback clock.
* **Stopping.** When the run stops (duration over, count reached, Ctrl-C) the script task is
  cancelled wherever it waits, the pacer stops, and ``session.close`` is sent and
  ``session.closed`` awaited (shielded: a second Ctrl-C must not leak the server's slot).
  Turns still waiting for their answer are dropped from the figures and counted as
  ``turns_cut``: a stop is not a server failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from duplexctl.audio.pacer import Chunk, MicQueue, Pacer
from duplexctl.audio.playback import PlaybackClock
from duplexctl.client.connection import (
    ConnectionLost,
    ConnectionLostError,
    ConnectionOptions,
    DuplexConnection,
    OpenFailed,
    ResumeFailed,
)
from duplexctl.load.config import Mix
from duplexctl.load.script import AppendCache, Script, Utterance
from duplexctl.protocol import ids
from duplexctl.protocol.client_state import (
    AudioDelta,
    ErrorReceived,
    Happening,
    Listen,
    OverlapDecision,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    SessionExpired,
    SpeechStopped,
    TextDelta,
    TranscriptDelta,
)
from duplexctl.protocol.settings import SessionSettings
from duplexctl.report.turns import (
    BargeTimes,
    Delta,
    ResumeTimes,
    TurnRecord,
    TurnTimes,
    compute_turn,
)
from duplexctl.scenario.model import (
    Anchor,
    BargeIn,
    Cancel,
    Commit,
    Drop,
    Interrupt,
    Say,
    Silence,
    Step,
    TurnEnd,
    Wait,
)

NS: Final = 1_000_000_000
MS: Final = 1_000_000
#: Longest a turn may keep "playing" on the simulated clock after response.done.
MAX_PLAYOUT_S: Final = 60.0
#: Default offset of a mix interruption after the answer's first audio.
MIX_AFTER_MS: Final = 500.0
MIX_RESUME_AFTER_MS: Final = 500.0


class SessionEnded(Exception):
    """The server ended the session (closed, expired, socket lost for good)."""


@dataclass(slots=True)
class SessionRecord:
    """One session attempt, for sessions.jsonl and the admission figures (metrics.md)."""

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
    resumes: int = 0
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


@dataclass(slots=True)
class _Mark:
    u_ms: float
    inclusive: bool  # True: fire on the append that *reaches* u (t_eos); False: *carries* u
    fn: Callable[[int], Awaitable[None] | None]


@dataclass(slots=True)
class _Turn:
    times: TurnTimes
    clock: PlaybackClock
    first_audio: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    finished: bool = False  # recorded (or dropped)
    settled: bool = False  # its wait ended (answer done or timed out)


class LoadSession:
    """Drives one session of the script; :meth:`run` returns its :class:`SessionRecord`."""

    def __init__(
        self,
        *,
        url: str,
        settings: SessionSettings,
        script: Script,
        record: SessionRecord,
        sink: Sink,
        mix: Mix,
        rng: random.Random,
        cache: AppendCache,
        end_mode: TurnEnd,
        chunk_ms: int = 100,
        prebuffer_ms: float = 0.0,
        response_timeout_s: float = 20.0,
        open_timeout_s: float = 30.0,
        close_timeout_s: float = 10.0,
        api_key: str | None = None,
        passes: int | None = 1,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.url = url
        self.settings = settings
        self.script = script
        self.record = record
        self.sink = sink
        self.mix = mix
        self.rng = rng
        self.cache = cache
        self.end_mode = end_mode
        self.chunk_ms = chunk_ms
        self.prebuffer_ms = prebuffer_ms
        self.response_timeout_s = response_timeout_s
        self.open_timeout_s = open_timeout_s
        self.close_timeout_s = close_timeout_s
        self.api_key = api_key
        self.passes = passes
        self.stop = stop if stop is not None else asyncio.Event()
        self.conn: DuplexConnection | None = None
        self.mic = MicQueue(settings.input_rate)
        self.pacer = Pacer(chunk_ms, settings.input_rate, source=self.mic, clock=time.monotonic)
        self._marks: list[_Mark] = []
        self._turns: list[_Turn] = []
        self._by_rid: dict[str, _Turn] = {}
        self._paused = False
        self._ended = asyncio.Event()
        self._end_reason = ""
        self._errors: Counter[str] = Counter()
        self._behaviours: Counter[str] = Counter()

    # -- the whole session -----------------------------------------------------------------

    async def run(self) -> SessionRecord:
        rec = self.record
        rec.t_start = time.monotonic()
        self.sink.session_started(rec)
        options = ConnectionOptions(
            queue_happenings=False,
            close_timeout_s=self.close_timeout_s,
            open_timeout_s=self.open_timeout_s,
            resume_attempts=3,
        )
        try:
            self.conn = await DuplexConnection.open(
                self.url,
                self.settings,
                api_key=self.api_key,
                timeout=self.open_timeout_s,
                options=options,
                listeners=[self._on],
            )
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
        conn = self.conn
        t = conn.timings
        rec.admission = "admitted"
        rec.session_id = conn.session.session_id
        rec.connect_ms, rec.handshake_ms = t.connect_ms, t.handshake_ms
        rec.t_created = (t.t_created_ns or time.monotonic_ns()) / NS
        self.sink.session_admitted(rec, conn.session.capabilities)
        pacer_task = asyncio.create_task(self._pace(), name="load-pacer")
        try:
            rec.end_reason = await self._script_until_end()
        finally:
            pacer_task.cancel()
            with contextlib.suppress(BaseException):
                await pacer_task
            await asyncio.shield(self._close())
        return rec

    async def _script_until_end(self) -> str:
        """Run the script; end early if the server ends the session."""
        script = asyncio.create_task(self._script(), name="load-script")
        ended = asyncio.create_task(self._ended.wait())
        stopped = asyncio.create_task(self.stop.wait())
        try:
            await asyncio.wait({script, ended, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (script, ended, stopped):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
        if script.done() and not script.cancelled() and script.exception() is None:
            return "script_done"
        if script.done() and not script.cancelled():
            exc = script.exception()
            if isinstance(exc, SessionEnded | ConnectionLostError):
                return self._end_reason or str(exc)
            raise exc  # type: ignore[misc]
        if self.stop.is_set() and not self._ended.is_set():
            return "stopped"
        return self._end_reason or "ended"

    async def _close(self) -> None:
        rec, conn = self.record, self.conn
        assert conn is not None
        self.mic.close()
        try:
            await conn.close("client_close", timeout=self.close_timeout_s)
        finally:
            t = conn.timings
            rec.close_ms = t.close_ms
            rec.closed_cleanly = t.t_closed_ns is not None
            rec.t_closed = (t.t_closed_ns or time.monotonic_ns()) / NS
            rec.t_end = time.monotonic()
            rec.appends = self.pacer.lag.count
            if self.pacer.lag.count:
                rec.send_lag_p99_ms = round(self.pacer.lag.percentile(99), 3)
                rec.send_lag_max_ms = round(self.pacer.lag.max_ms, 3)
            rec.errors = dict(self._errors)
            rec.violations = conn.session.checker.counts()
            rec.resumes = len(t.resumes)
            rec.behaviours = dict(self._behaviours)
            rec.turns_cut += sum(1 for turn in self._turns if not turn.finished)
            self.sink.session_finished(rec)

    # -- pacing ------------------------------------------------------------------------------

    async def _pace(self) -> None:
        conn, pacer, cache = self.conn, self.pacer, self.cache
        assert conn is not None
        rate = self.settings.input_rate
        while True:
            chunk = await pacer.next_chunk()
            if chunk is None:
                return
            if self._paused or not conn.connected:
                self.record.skipped_appends += 1
                continue
            event = {
                "type": "input_audio_buffer.append",
                "audio": cache.encode(chunk.samples, chunk.silent),
                "audio_start_ms": int(chunk.audio_start_ms),
                "audio_end_ms": int(chunk.audio_end_ms),
                "sample_rate_hz": rate,
                "event_id": ids.client_event_id(),
            }
            try:
                sent_ns = await conn.send(event)
            except ConnectionLostError:
                self.record.skipped_appends += 1
                continue
            sent = sent_ns / NS
            lag = pacer.record_send(chunk, sent)
            self.sink.send_lag(sent, lag)
            if self._marks:
                await self._fire_marks(chunk, sent_ns)

    async def _fire_marks(self, chunk: Chunk, sent_ns: int) -> None:
        due = [
            m
            for m in self._marks
            if m.u_ms < chunk.audio_end_ms or (m.inclusive and m.u_ms <= chunk.audio_end_ms)
        ]
        if not due:
            return
        self._marks = [m for m in self._marks if m not in due]
        for mark in sorted(due, key=lambda m: m.u_ms):
            result = mark.fn(sent_ns)
            if result is not None:
                with contextlib.suppress(ConnectionLostError):
                    await result

    def _mark(self, u_ms: float, fn: Callable[[int], Any], *, inclusive: bool) -> None:
        self._marks.append(_Mark(u_ms, inclusive, fn))

    # -- receiving (synchronous, at receive time) -------------------------------------------

    def _on(self, h: Happening) -> None:
        if isinstance(h, AudioDelta):
            turn = self._by_rid.get(h.response_id)
            dur = h.audio_end_ms - h.audio_start_ms
            if turn is None or dur <= 0:
                return
            turn.times.deltas.append(Delta(h.recv_ns, dur))
            turn.clock.receive(h.recv_ns / NS, dur)
            turn.first_audio.set()
            self.sink.audio(h.recv_ns / NS, dur)
        elif isinstance(h, TranscriptDelta | TextDelta):
            turn = self._by_rid.get(h.response_id)
            if turn is not None and h.delta and turn.times.first_text_recv is None:
                turn.times.first_text_recv = h.recv_ns
        elif isinstance(h, ResponseCreated):
            turn = self._awaiting_response()
            if turn is not None:
                turn.times.response_id = h.response_id
                turn.times.t_created = h.recv_ns
                self._by_rid[h.response_id] = turn
        elif isinstance(h, ResponseDone):
            turn = self._by_rid.get(h.response_id)
            if turn is not None:
                turn.times.t_done = h.recv_ns
                turn.times.status, turn.times.reason = h.status, h.reason
                if h.status == "cancelled":
                    turn.clock.flush(h.recv_ns / NS)
                turn.done.set()
        elif isinstance(h, Listen):
            turn = self._by_rid.get(h.response_id) if h.response_id else None
            if turn is not None and not turn.done.is_set():
                turn.times.listened = True
                turn.times.t_done = h.recv_ns
                turn.done.set()
        elif isinstance(h, SpeechStopped):
            turn = self._awaiting_response()
            if turn is not None and turn.times.t_speech_stopped is None:
                turn.times.t_speech_stopped = h.recv_ns
        elif isinstance(h, OverlapDecision):
            if h.action == "barge_in":
                for turn in self._by_rid.values():
                    if not turn.done.is_set():
                        turn.clock.flush(h.recv_ns / NS)
        elif isinstance(h, ErrorReceived):
            if self.record.admission != "admitted":
                return  # the open's refusal: counted as the admission outcome
            code = h.error.code or h.error.type or "error"
            self._errors[code] += 1
            turn = self._awaiting_response()
            if turn is not None and h.seq is not None and code != "response_not_active":
                turn.times.error = code
                turn.done.set()
        elif isinstance(h, SessionClosed | SessionExpired):
            self._end_reason = h.type + (f": {h.reason}" if h.reason else "")
            self._ended.set()
        elif isinstance(h, ConnectionLost) and not h.resuming:
            self._end_reason = f"connection lost: {h.reason}"
            self._ended.set()

    def _awaiting_response(self) -> _Turn | None:
        """The oldest turn that has spoken and has no response yet."""
        for turn in self._turns:
            t = turn.times
            if t.response_id is None and not turn.settled and t.t_speech_start is not None:
                return turn
        return None

    # -- the script ----------------------------------------------------------------------

    async def _script(self) -> None:
        steps = self.script.scenario.steps
        plain = all(isinstance(s, Say | Wait) for s in steps)
        n = 0
        while self.passes is None or n < self.passes:
            n += 1
            for step in steps:
                await self._step(step, plain)
            self._flush_records()
        # let the last answer finish playing before the close
        self._flush_records()

    async def _step(self, step: Step, plain: bool) -> None:
        if isinstance(step, Say):
            self._say(step.index, self.script.utterance(step.file), step.commit, step.tail_ms)
        elif isinstance(step, Wait):
            turn = self._latest()
            if turn is None:
                return
            behaviour = self.mix.pick(self.rng.random()) if plain else None
            if behaviour is not None:
                self._behaviours[behaviour] += 1
                await self._mix_interrupt(turn, behaviour)
            await self._wait(turn, step.timeout_s)
        elif isinstance(step, Silence):
            await asyncio.sleep(step.ms / 1000)
        elif isinstance(step, BargeIn):
            turn = self._latest()
            utt = self.script.utterance(step.file)
            if turn is not None and await self._anchor(turn, step.anchor, step.after_ms):
                self._barge(turn, utt, step.index, step.interrupt, step.commit, step.tail_ms)
                await self._wait(turn, None, playout=False)
            else:
                self._say(step.index, utt, step.commit, step.tail_ms)
        elif isinstance(step, Cancel):
            turn = self._latest()
            if turn is not None and await self._anchor(turn, step.anchor, step.after_ms):
                await self._cancel(turn)
        elif isinstance(step, Drop):
            turn = self._latest()
            if turn is not None and await self._anchor(turn, step.anchor, step.after_ms):
                await self._drop_resume(turn, step.resume_after_ms)
        elif isinstance(step, Commit):
            assert self.conn is not None
            sent = await self.conn.send(
                self.conn.session.commit(response_create=step.response_create)
            )
            turn = self._latest()
            if turn is not None and turn.times.t_commit is None:
                turn.times.t_commit = sent

    def _latest(self) -> _Turn | None:
        return self._turns[-1] if self._turns else None

    def _new_turn(self, step: int, source: str, end_mode: TurnEnd) -> _Turn:
        times = TurnTimes(index=len(self._turns) + 1, step=step, source=source)
        times.end_mode = end_mode.value
        turn = _Turn(times, PlaybackClock(self.prebuffer_ms))
        self._turns.append(turn)
        self.record.turns += 1
        return turn

    def _say(
        self,
        step: int,
        utt: Utterance,
        commit: bool | None,
        tail_ms: float,
        *,
        on_speech: Callable[[int], Any] | None = None,
    ) -> _Turn:
        """Queue an utterance on the microphone; marks stamp t_speech_start and t_eos and
        send the commit ``tail_ms`` after the end of speech when this turn commits."""
        end_mode = self.end_mode
        if commit is True:
            end_mode = TurnEnd.COMMIT
        elif commit is False and end_mode is TurnEnd.COMMIT:
            end_mode = TurnEnd.VAD
        turn = self._new_turn(step, utt.name, end_mode)
        placement = self.mic.play(utt.clip.samples)
        u_start = placement.start_ms + utt.speech_start_ms
        u_end = placement.start_ms + utt.speech_end_ms
        times = turn.times

        def speech_start(sent_ns: int) -> Any:
            times.t_speech_start = sent_ns
            return on_speech(sent_ns) if on_speech is not None else None

        def eos(sent_ns: int) -> None:
            times.t_eos = sent_ns

        self._mark(u_start, speech_start, inclusive=False)
        self._mark(u_end, eos, inclusive=True)
        if end_mode is TurnEnd.COMMIT:

            async def do_commit(_sent_ns: int) -> None:
                assert self.conn is not None
                times.t_commit = await self.conn.send(
                    self.conn.session.commit(response_create=True)
                )

            self._mark(u_end + tail_ms, do_commit, inclusive=True)
        return turn

    async def _anchor(self, turn: _Turn, anchor: Anchor, after_ms: float) -> bool:
        """Sleep until ``after_ms`` after the anchor; False if the answer ended first (or
        never started) so there is nothing left to interrupt."""
        if anchor is Anchor.FIRST_AUDIO:
            waiter = asyncio.ensure_future(turn.first_audio.wait())
            done = asyncio.ensure_future(turn.done.wait())
            try:
                await asyncio.wait(
                    {waiter, done},
                    timeout=self.response_timeout_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                waiter.cancel()
                done.cancel()
            if not turn.first_audio.is_set():
                return False
        try:
            await asyncio.wait_for(turn.done.wait(), after_ms / 1000)
        except TimeoutError:
            return True
        self.record.unanswered_interruptions += 1
        return False

    async def _mix_interrupt(self, turn: _Turn, behaviour: str) -> None:
        if not await self._anchor(turn, Anchor.FIRST_AUDIO, MIX_AFTER_MS):
            return
        if behaviour == "barge_in":
            self._barge(turn, self.script.interrupt, turn.times.step, None, None, 200.0)
            await self._wait(turn, None, playout=False)
            # the interruption is now the latest turn; the scenario's wait answers it
        elif behaviour == "cancel":
            await self._cancel(turn)
        elif behaviour == "drop_resume":
            await self._drop_resume(turn, MIX_RESUME_AFTER_MS)

    def _interrupt_kind(self, requested: Interrupt | None) -> Interrupt:
        if requested is not None:
            return requested
        if self.end_mode is TurnEnd.VAD:
            return Interrupt.SPEECH
        assert self.conn is not None
        if self.conn.session.capabilities.get("supports_barge_in"):
            return Interrupt.BARGE_IN
        return Interrupt.CANCEL

    def _barge(
        self,
        turn: _Turn,
        utt: Utterance,
        step: int,
        interrupt: Interrupt | None,
        commit: bool | None,
        tail_ms: float,
    ) -> None:
        """Speak ``utt`` over ``turn``'s answer; t_bi per metrics.md for the kind used."""
        kind = self._interrupt_kind(interrupt)
        conn = self.conn
        assert conn is not None
        holder: list[_Turn] = []

        async def at_speech(sent_ns: int) -> None:
            t_bi = sent_ns
            if kind is Interrupt.BARGE_IN:
                t_bi = await conn.send(conn.session.barge_in())
            elif kind is Interrupt.CANCEL:
                t_bi = await conn.send(conn.session.response_cancel(turn.times.response_id))
            turn.times.barge = BargeTimes(kind.value, t_bi, holder[0].times.index)

        holder.append(self._say(step, utt, commit, tail_ms, on_speech=at_speech))

    async def _cancel(self, turn: _Turn) -> None:
        assert self.conn is not None
        t_bi = await self.conn.send(self.conn.session.response_cancel(turn.times.response_id))
        turn.times.barge = BargeTimes("cancel", t_bi)

    async def _drop_resume(self, turn: _Turn, resume_after_ms: float) -> None:
        conn = self.conn
        assert conn is not None
        before_dups, before_gaps = conn.session.duplicates_dropped, conn.session.seq_gaps
        self._paused = True
        try:
            t_drop = await conn.drop()
            resume = ResumeTimes(t_drop=t_drop, scripted_wait_ms=resume_after_ms)
            turn.times.resumes.append(resume)
            await asyncio.sleep(resume_after_ms / 1000)
            try:
                rec = await conn.resume()
            except ResumeFailed as exc:
                resume.outcome = exc.record.outcome or "failed"
                self._errors[f"resume_{resume.outcome}"] += 1
                raise SessionEnded(f"resume failed: {exc}") from None
        finally:
            self._paused = False
        resume.outcome = rec.outcome or "resumed"
        if rec.reconnect_ms is not None:
            resume.t_open = t_drop + int(rec.reconnect_ms * MS)
        resume.t_resumed = rec.t_resumed_ns
        # ClientSession counts replays it discarded; everything else the journal resent
        # arrives after t_resumed and is counted by the checker's seq continuity.
        resume.duplicates_dropped = conn.session.duplicates_dropped - before_dups
        resume.seq_gaps = conn.session.seq_gaps - before_gaps

    async def _wait(self, turn: _Turn, timeout_s: float | None, *, playout: bool = True) -> None:
        """Wait for the turn's answer (``no_response`` on timeout), then for it to finish
        playing on the simulated clock, then acknowledge the playback."""
        limit = self.response_timeout_s if timeout_s is None else timeout_s
        if not turn.done.is_set():
            try:
                await asyncio.wait_for(turn.done.wait(), limit)
            except TimeoutError:
                turn.times.timed_out = True
        turn.settled = True
        clock, times = turn.clock, turn.times
        if playout and times.deltas and clock.flushed_at is None:
            end = clock.end_time()
            if end is not None:
                delay = min(MAX_PLAYOUT_S, end - time.monotonic())
                if delay > 0:
                    await asyncio.sleep(delay)
        if clock.first_audible is not None:
            times.p0 = int(clock.first_audible * NS)
            end = clock.end_time()
            times.playback_end = int(end * NS) if end is not None else None
            times.underruns, times.stall_ms = clock.underruns, clock.stall_ms
            times.heard_ms = clock.played_ms(time.monotonic())
        if (
            times.response_id is not None
            and times.deltas
            and times.status == "completed"
            and self.conn is not None
        ):
            with contextlib.suppress(ConnectionLostError):
                await self.conn.ack_playback(times.response_id, times.heard_ms or 0.0)
        self._flush_records()

    def _flush_records(self) -> None:
        """Record every settled turn whose figures are final (an interrupted turn waits for
        its interruption's answer: post_interrupt_ttfa_ms needs it)."""
        by_index = {t.times.index: t.times for t in self._turns}
        for turn in self._turns:
            if turn.finished or not turn.settled:
                continue
            barge = turn.times.barge
            if barge is not None and barge.interrupt_turn is not None:
                nxt = self._turns[barge.interrupt_turn - 1]
                if not nxt.settled:
                    continue
            turn.finished = True
            self.sink.turn(compute_turn(turn.times, by_index), turn.times, self.record)
