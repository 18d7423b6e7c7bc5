"""The live loop of ``duplexctl talk``: microphone → server → speaker, with barge-in.

Three tasks share one :class:`~duplexctl.client.connection.DuplexConnection`:

* **input** — blocks from the microphone (or ``--input-file``, same path) feed the level
  meter, the local barge-in detector, a turn VAD (end of speech = ``t_eos``) and, every
  ``chunk_ms``, an ``input_audio_buffer.append`` stamped with its place on the user timeline.
* **happenings** — what the server said: audio deltas go to the output (speaker or
  simulated clock), transcripts to the view, ``response.done`` ends a turn; a cancelled
  ``response.done`` or an ``overlap.decision`` barge-in is a trusted stop signal and flushes.
* **duty** — sends what :class:`~duplexctl.protocol.playback_duty.PlaybackDuty` says the
  client owes, fed with the output's *played* position of each response: ``playback.ack``
  (0 at the first delta, every ``ack_interval_ms`` played, a final exact one at the end),
  the heard position after an interruption, ``session.event_ack``. The server's playback
  ledger then reflects what the listener heard, never what was received (docs/metrics.md,
  docs/protocol.md §6.5); replay and load send exactly the same for the same timeline.

Barge-in, in the order that keeps the server's history honest (docs/protocol.md §6.3-6.5,
§7.3): the local detector fires → the output is flushed at once (sound stops; the heard
position is frozen from the device clock) → the duty's ``playback.ack`` with that position
(the server cuts history at the last acknowledged position when it cancels) →
``response.cancel`` in ``client`` mode (``server`` mode leaves the cancel to server VAD) →
after the cancelled ``response.done``, the duty's ``conversation.item.truncate`` with the
same heard position. What the server's capabilities say it does not support is not sent
(the duty's rule), never decided by model name.

Every exit path — ``--duration``, ``q``, Ctrl-C, a lost connection — stops the input, silences
the output, sends ``session.close`` and finishes the ``--record`` files. Ctrl-C is handled as a
signal (first: a clean stop, reported as exit 130; second: abort), so the close really happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from duplexctl import __version__
from duplexctl.aio import cancel_and_wait
from duplexctl.audio import pcm
from duplexctl.audio.resample import StreamResampler
from duplexctl.audio.vad import StreamingVad, VadParams
from duplexctl.client.connection import (
    ConnectionLost,
    ConnectionOptions,
    DuplexConnection,
    HandshakeFailed,
    ViolationRecorded,
)
from duplexctl.errors import STOP_SIGNALS, DuplexctlError, MissingDependency, ServerUnreachable
from duplexctl.protocol.client_state import (
    AnswerEnded,
    AnswerStarted,
    AudioDelta,
    Committed,
    ErrorReceived,
    Happening,
    Listen,
    OverlapDecision,
    ResponseCreated,
    ResponseDone,
    SessionClosed,
    SessionExpired,
    SessionReplaced,
    SessionResumed,
    SpeechStarted,
    SpeechStopped,
    TextDelta,
    TranscriptDelta,
)
from duplexctl.protocol.errors import BOOKKEEPING_CODES, refuses_server_vad
from duplexctl.protocol.playback_duty import PlaybackDuty
from duplexctl.protocol.playback_stop import stops_playback
from duplexctl.protocol.settings import SessionSettings, TurnEnd
from duplexctl.report.turns import BargeTimes, Delta, Figure, TurnRecord, TurnTimes, compute_turn
from duplexctl.rundir import Writes
from duplexctl.talk.barge import BargeInDetector, Onset
from duplexctl.talk.config import TalkConfig
from duplexctl.talk.echo import APM_RATES, MISSING_LINE, EchoCanceller, load_binding
from duplexctl.talk.inputs import FileInput, InputSource, MicInput
from duplexctl.talk.output import DeviceOutput, Output, SimulatedOutput
from duplexctl.talk.view import View, make_view
from duplexctl.units import NS_PER_MS, NS_PER_S

# errors that are the expected echo of our own races (cancel after the answer ended, an ack
# or truncate for a reply the server already released): not worth the user's attention
# How talk runs without sound (a missing PortAudio, no sound server): said with the error.
WITHOUT_SPEAKER: Final = (
    "to talk without sound: --output-device none (a simulated playback clock) and "
    "--input-file FILE (instead of the microphone)"
)
WITHOUT_MICROPHONE: Final = "to talk without a microphone: --input-file FILE[@SECONDS]"
LOCAL_STOP_ORIGIN: Final = (
    "output flushed (local barge-in) - capture time of the first sample of the interrupting "
    "speech (talk only: how fast playback stopped on the client)"
)


def _ns(t: float) -> int:
    return int(t * NS_PER_S)


def _dbfs(samples: np.ndarray) -> float:
    if samples.size == 0:
        return -120.0
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    return 20.0 * math.log10(max(rms, 1e-6))


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Utterance:
    """One stretch of user speech found by the turn VAD (user-timeline ms)."""

    onset_ms: float
    end_ms: float | None = None
    t_eos_ns: int | None = None  # send of the append reaching end_ms (docs/metrics.md t_eos)
    claimed: bool = False


@dataclass(slots=True)
class Interruption:
    """One interruption of playback, as talk saw it (printed, and kept in report.json).

    Not a scenario's ``BargeIn`` step: this records what happened, whoever caused it."""

    kind: str  # speech (local detector) | key (c) | server (a stop signal from the server)
    response_ids: list[str]
    heard_ms: dict[str, float]
    t_flush: float
    onset: Onset | None = None
    t_bi_ns: int | None = None
    cancel_sent: bool = False

    @property
    def local_stop_ms(self) -> float | None:
        if self.onset is None:
            return None
        return round((self.t_flush - self.onset.t_onset) * 1000.0, 3)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "response_ids": self.response_ids,
            "heard_ms": {k: round(v, 3) for k, v in self.heard_ms.items()},
            "local_stop_ms": self.local_stop_ms,
            "onset_u_ms": None if self.onset is None else self.onset.u_ms,
            "detect_ms": None
            if self.onset is None
            else round((self.onset.t_detected - self.onset.t_onset) * 1000.0, 3),
            "cancel_sent": self.cancel_sent,
        }


@dataclass(slots=True)
class ResponseState:
    """Client-side state of one response while it is received and played."""

    rid: str
    turn: TurnTimes
    resampler: StreamResampler | None = None
    heard_buf: list[np.ndarray] = field(default_factory=list)  # not yet written as heard
    written_frames: int = 0  # output-rate frames written to conversation.wav
    got_audio: bool = False
    flushed: bool = False
    heard_ms: float | None = None
    finalized: bool = False
    barge: Interruption | None = None
    counted: bool = True  # a user turn's answer (a continuous lane's silent response is not)


@dataclass(slots=True)
class TalkResult:
    """What a talk run ended with; the CLI maps it to an exit code."""

    stop_reason: str
    interrupted: bool = False
    error: DuplexctlError | None = None
    session_id: str | None = None
    turns: list[TurnRecord] = field(default_factory=list)
    barge_ins: list[Interruption] = field(default_factory=list)
    record_dir: Path | None = None


class OutputPosition:
    """One response's playback position as the output reports it (a speaker's DAC clock, or
    the simulated clock): what the playback duty acknowledges."""

    __slots__ = ("output", "response_id")

    def __init__(self, output: Output, response_id: str) -> None:
        self.output = output
        self.response_id = response_id

    def played_ms(self, now: float) -> float:
        return self.output.played_ms(self.response_id)

    def end_time(self) -> float | None:
        return self.output.end_time(self.response_id)


# --------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------


class TalkSession:
    """One live conversation (see the module docstring)."""

    def __init__(self, config: TalkConfig, view: View | None = None) -> None:
        self.config = config
        self.view: View = view if view is not None else make_view()
        self.conn: DuplexConnection | None = None
        self.output: Output | None = None
        self.input: InputSource | None = None
        self.settings: SessionSettings | None = None
        self.artifacts: Any = None  # report.artifacts.RunArtifacts when --record
        self.user_wav: Any = None
        self.mic_wav: Any = None  # the microphone before echo cancellation (--record)
        self.echo: EchoCanceller | None = None
        self.aec_state = "off"
        self._echo_shown = 0.0
        self.responses: dict[str, ResponseState] = {}
        self.turns: list[TurnTimes] = []
        self._cadence_notes: list[str] = []
        self.records: list[TurnRecord] = []
        self.barge_ins: list[Interruption] = []
        self.duty: PlaybackDuty | None = None
        self.utterances: list[Utterance] = []
        self.appends: deque[tuple[float, float, int]] = deque(maxlen=20_000)
        self._waiting: list[tuple[float, bool, Callable[[int], None]]] = []
        self._pending: list[np.ndarray] = []
        self._pending_frames = 0
        self._u_sent_ms = 0.0
        self._ptt_commits: deque[float] = deque()
        self._t_commit_ns: int | None = None
        self._stop = asyncio.Event()
        self._ack_wakeup = asyncio.Event()
        self.stop_reason = "running"
        self.interrupted = False
        self.error: DuplexctlError | None = None
        self.mode = TurnEnd.VAD  # who ends a turn: decided by _choose_mode from the server
        self.caps: dict[str, Any] = {}
        self.input_t0: float | None = None  # monotonic time of user-timeline 0
        self._stop_signals = 0
        self._main_task: asyncio.Task[Any] | None = None
        self._last_frame: dict[str, Any] | None = None  # held: an id() of a freed one recurs
        self._pending_t: float | None = None

    # -- setup -------------------------------------------------------------------------------

    def _build_settings(self, turn_detection: str) -> SessionSettings:
        """The opening session's settings (resolved once, in TalkConfig); ``turn_detection``
        is the lane asked for now (``auto`` tries server VAD, then push-to-talk)."""
        return self.config.settings.session_settings(turn_detection)

    def _open_devices(self, settings: SessionSettings) -> None:
        """Output first, then input: every device problem is one line before any I/O."""
        c = self.config
        # TalkConfig.__post_init__ resolved it: talk's default is 0.0, a given one is checked
        assert c.prebuffer_ms is not None
        if c.simulated_output:
            self.output = SimulatedOutput(
                settings.output_rate, prebuffer_ms=c.prebuffer_ms, on_started=self._on_started
            )
        else:
            try:
                self.output = DeviceOutput(
                    c.output_device,
                    settings.output_rate,
                    prebuffer_ms=c.prebuffer_ms,
                    on_started=self._on_started,
                )
            except MissingDependency as exc:
                raise MissingDependency(f"{exc}; {WITHOUT_SPEAKER}") from None
        if c.input_files:
            from duplexctl.audio.source import load_audio

            clips = []
            for spec in c.input_files:
                clip = load_audio(
                    spec.path, settings.input_rate, wire_format=settings.input_format_canonical
                )
                if clip.conversion:
                    self.view.info(f"input: {clip.conversion}")
                clips.append((clip, spec.at_s))
            self.input = FileInput(clips, settings.input_rate, c.block_ms)
        else:
            try:
                self.input = MicInput(c.input_device, settings.input_rate, c.block_ms)
            except MissingDependency as exc:
                raise MissingDependency(f"{exc}; {WITHOUT_MICROPHONE}") from None
        self._open_echo(settings)

    def _open_echo(self, settings: SessionSettings) -> None:
        """Echo cancellation between the speaker and the microphone (talk/echo.py), when
        asked for and there is both; a missing binding is one line, then talk goes on."""
        c = self.config
        if c.aec == "off":
            self.aec_state = "off"
            if c.noise_suppression:
                self.view.info("--noise-suppression runs inside echo cancellation: ignored")
        elif not isinstance(self.output, DeviceOutput) or not isinstance(self.input, MicInput):
            self.aec_state = "off (no speaker or no microphone: no echo to cancel)"
        elif settings.input_rate not in APM_RATES:
            self.aec_state = f"off (input rate {settings.input_rate} Hz; it needs {APM_RATES})"
            self.view.info(f"echo cancellation {self.aec_state}")
        elif (rtc := load_binding()) is None:
            self.aec_state = "unavailable (livekit not installed)"
            self.view.info(MISSING_LINE)
        else:
            self.echo = EchoCanceller(
                rtc,
                settings.input_rate,
                self.output.device_rate,
                noise_suppression=c.noise_suppression,
            )
            self.output.speaker.on_render = self.echo.render
            ns = " and noise suppression" if c.noise_suppression else ""
            self.aec_state = "on"
            self.view.info(f"echo cancellation on (WebRTC AEC3{ns}, livekit)")
        self.view.set_state(aec=self.aec_state)

    def _show_echo(self, now: float) -> None:
        """The screen's AEC line, twice a second: the ERLE achieved now and the delay."""
        if self.echo is None or now - self._echo_shown < 0.5:
            return
        self._echo_shown = now
        self.view.set_state(aec=self.echo.stats().describe())

    async def _open_connection(self, url: str) -> DuplexConnection:
        c = self.config
        wanted = "none" if c.turn_detection == "none" else "server_vad"
        options = ConnectionOptions(event_acks=False)  # the playback duty sends them
        settings = self._build_settings(wanted)
        try:
            conn = await DuplexConnection.open(
                url, settings, api_key=c.api_key, options=options, listeners=[self._record_recv]
            )
        except HandshakeFailed as exc:
            err = exc.error
            if c.turn_detection != "auto" or not refuses_server_vad(err):
                raise
            assert err is not None
            self.view.info(f"server refused server VAD ({err.code}): using push-to-talk")
            settings = self._build_settings("none")
            conn = await DuplexConnection.open(
                url, settings, api_key=c.api_key, options=options, listeners=[self._record_recv]
            )
        self.settings = settings
        if self.artifacts is not None and conn.timings.t_update_sent_ns is not None:
            from duplexctl.report.artifacts import redact

            self.artifacts.note(
                conn.timings.t_update_sent_ns,
                "opening session.update sent",
                session=redact(settings.to_session_object(), audio_keys=False),
            )
        return conn

    def _choose_mode(self, conn: DuplexConnection) -> None:
        """Branch on what the server said it does (capabilities, echoed turn_detection)."""
        caps = self.caps = conn.session.capabilities
        td = conn.session.session.get("turn_detection")
        c = self.config
        if c.auto_response:
            self.mode = TurnEnd.MODEL
            turns = "model-native (the model decides when to answer)"
            if td:
                turns += " + server VAD"
        elif td:
            self.mode = TurnEnd.VAD
            turns = f"server VAD (silence {td.get('silence_duration_ms', '?')} ms)"
        else:
            self.mode = TurnEnd.COMMIT
            turns = "push-to-talk (Enter ends a turn)"
            if isinstance(self.input, FileInput):
                turns += "; each input file ends a turn"
            if caps.get("supports_client_commit") is False:
                self.view.info("warning: the server does not support client commits")
        barge = c.barge_in
        if barge == "server" and not td:
            self.view.info(
                "--barge-in server without server VAD: the server will not cancel on speech; "
                "playback still stops locally"
            )
        if barge == "client" and caps.get("supports_barge_in") is False:
            self.view.info("the server does not advertise barge-in; response.cancel is used")
        self.view.set_state(turns=turns, **{"barge-in": barge})
        self.view.info(f"turns: {turns}; barge-in: {barge}")

    # -- run ---------------------------------------------------------------------------------

    async def run(self) -> TalkResult:
        c = self.config
        settings = self._build_settings("none" if c.turn_detection == "none" else "server_vad")
        self._open_devices(settings)  # MissingDependency / BadInput before any connection
        assert self.output is not None and self.input is not None
        self._main_task = asyncio.current_task()
        async with contextlib.AsyncExitStack() as stack:
            from duplexctl.client.target import server_target

            target = await stack.enter_async_context(server_target(c.url, c.server_overrides))
            url = target.url
            if target.line:
                self.view.info(target.line)
            if c.record_dir is not None:
                self._open_record(c.record_dir, settings)
                stack.callback(self._close_record)
            conn = await self._open_connection(url)
            self.conn = conn
            self.duty = PlaybackDuty(conn.session, ack_every_ms=c.ack_interval_ms)
            stack.push_async_callback(self._close_connection)
            self._choose_mode(conn)
            self.view.set_state(
                session=conn.session.session_id,
                connection=f"open ({url}, handshake {conn.timings.handshake_ms or 0:.0f} ms)",
                input=self.input.description,
                output=self.output.description,
                state="listening",
            )
            self.view.info(
                f"session {conn.session.session_id} open; "
                f"{self.input.description} -> {self.output.description}"
            )
            self.view.start()
            stack.callback(self.view.stop)
            await self._live()
        failure = self.artifacts.writes.failure if self.artifacts is not None else None
        return TalkResult(
            stop_reason=self.stop_reason,
            interrupted=self.interrupted and failure is None,
            error=failure or self.error,
            session_id=self.conn.session.session_id if self.conn else None,
            turns=list(self.records),
            barge_ins=list(self.barge_ins),
            record_dir=c.record_dir,
        )

    async def _live(self) -> None:
        assert self.output is not None and self.input is not None
        loop = asyncio.get_running_loop()
        from duplexctl.talk.keys import KeyReader

        keys = KeyReader(self._on_key)
        tasks: list[asyncio.Task[None]] = []
        stopper: asyncio.Task[Any] | None = None
        timer: asyncio.TimerHandle | None = None
        for signum in STOP_SIGNALS:  # SIGTERM (a service manager) stops as Ctrl-C does
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self._on_stop_signal)
        try:
            if self.config.duration_s is not None:
                timer = loop.call_later(self.config.duration_s, self._request_stop, "duration")
            self.output.start()  # a busy or vanished device: one BadInput line, exit 2
            self.input.start()
            self.input_t0 = getattr(self.input, "t0", None) or time.monotonic()
            if keys.start():
                self.view.info("keys: Enter ends a push-to-talk turn, c cancels, q quits")
            tasks = [
                asyncio.create_task(self._input_loop(), name="talk-input"),
                asyncio.create_task(self._happening_loop(), name="talk-happenings"),
                asyncio.create_task(self._ack_loop(), name="talk-acks"),
            ]
            stopper = asyncio.create_task(self._stop.wait())
            done, _ = await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopper and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            if timer is not None:
                timer.cancel()
            if stopper is not None:
                stopper.cancel()
            keys.stop()
            self.input.stop()
            await cancel_and_wait(*tasks)
            self._flush_heard_all()
            self._finalize_unfinished()
            await self.output.aclose(drain=False)
            if self.echo is not None:
                st = self.echo.stats()
                self.view.info(
                    f"echo cancellation {st.describe()}; {1000 * st.cpu_s:.0f} ms CPU for "
                    f"{self.echo.audio_s:.1f} s of microphone, capture path +"
                    f"{st.added_ms_mean:.2f} ms (worst {st.added_ms_max:.1f} ms), "
                    f"{self.echo.render_gaps} speaker underruns/restarts followed, "
                    f"far end late on {self.echo.far_late_frames} of {st.frames} frames"
                )
            for signum in STOP_SIGNALS:
                with contextlib.suppress(Exception):
                    loop.remove_signal_handler(signum)

    def _request_stop(self, reason: str) -> None:
        if not self._stop.is_set():
            self.stop_reason = reason
            self._stop.set()

    def _on_stop_signal(self) -> None:
        """First Ctrl-C or SIGTERM: stop cleanly (session.close, files finished), exit 130
        later. Second: abort at once (the close is still attempted, shielded)."""
        self._stop_signals += 1
        self.interrupted = True
        if self._stop_signals == 1:
            self.view.info("interrupted: closing the session (Ctrl-C again to abort)")
            self._request_stop("interrupted")
        elif self._main_task is not None:
            self._main_task.cancel()

    def _on_key(self, key: str) -> None:
        if key == "q":
            self._request_stop("quit")
        elif key == "c":
            asyncio.get_running_loop().create_task(self._interrupt("key"))
        elif key == "enter":
            if self.mode is TurnEnd.COMMIT:
                asyncio.get_running_loop().create_task(self._commit_turn())
            else:
                self.view.info(f"Enter ignored: turns end by {self.mode}")

    async def _close_connection(self) -> None:
        conn = self.conn
        if conn is None:
            return
        if self.artifacts is not None:
            self.artifacts.note(time.monotonic_ns(), "session.close sending")
        await asyncio.shield(conn.close("client_close"))
        closed = conn.timings.close_ms
        self.view.info(
            f"session closed ({conn.session.close_reason or 'no session.closed'}"
            + (f", close_ms {closed:.1f}" if closed is not None else "")
            + ")"
        )

    # -- sending -----------------------------------------------------------------------------

    async def _send(self, event: dict[str, Any]) -> int | None:
        """Send one event; None when the connection is gone (the stop is handled elsewhere)."""
        assert self.conn is not None
        try:
            sent = await self.conn.send(event)
        except ServerUnreachable:
            return None
        if self.artifacts is not None:
            self.artifacts.event("send", sent, event)
        return sent

    async def _send_append(self, samples: np.ndarray, t_capture: float) -> None:
        assert self.conn is not None and self.settings is not None
        start = self._u_sent_ms
        end = start + 1000.0 * samples.size / self.settings.input_rate
        event = self.conn.session.append(
            pcm.encode(samples, self.settings.input_format_canonical),
            audio_start_ms=start,
            audio_end_ms=end,
        )
        sent = await self._send(event)
        self._u_sent_ms = end
        if sent is None:
            return
        self.appends.append((start, end, sent))
        if self.artifacts is not None:
            # placed at capture time: the assistant channel is at DAC time, so the file
            # reproduces what a person at the device heard and said
            self.artifacts.user_audio(samples, _ns(t_capture))
        still: list[tuple[float, bool, Callable[[int], None]]] = []
        for u, carrying, callback in self._waiting:
            if (start <= u < end) if carrying else (start < u <= end):
                callback(sent)
            elif u < start:
                callback(sent)  # fell between appends (cannot happen with contiguous input)
            else:
                still.append((u, carrying, callback))
        self._waiting = still

    def _when_sent(self, u_ms: float, *, carrying: bool, callback: Callable[[int], None]) -> None:
        """Call ``callback(send_ns)`` for the append reaching (or carrying) ``u_ms``."""
        for start, end, sent in reversed(self.appends):
            if (start <= u_ms < end) if carrying else (start < u_ms <= end):
                callback(sent)
                return
            if end < u_ms:
                break
        self._waiting.append((u_ms, carrying, callback))

    async def _commit_turn(self) -> None:
        """Push-to-talk: end the user's turn (commit, then response.create)."""
        assert self.conn is not None
        if self._pending_frames:
            await self._flush_pending(final=True)
        sent = await self._send(self.conn.session.commit(response_create=False))
        if sent is None:
            return
        self._t_commit_ns = sent
        await self._send(self.conn.session.response_create())
        self.view.set_state(state="turn committed: waiting for the answer")

    # -- input -------------------------------------------------------------------------------

    async def _input_loop(self) -> None:
        assert self.input is not None and self.settings is not None and self.output is not None
        # TalkConfig.__post_init__ resolved it: talk's default is 100, a given one is checked
        assert self.config.chunk_ms is not None
        rate = self.settings.input_rate
        chunk_frames = self._packet_frames(rate)
        learned = self.conn.session.max_append_samples if self.conn is not None else None
        detector = BargeInDetector(rate, self.config.barge_threshold_db)
        turn_vad = StreamingVad(rate, VadParams())
        if isinstance(self.input, FileInput) and self.mode is TurnEnd.COMMIT:
            self._ptt_commits.extend(self.input.clip_ends_ms)
        async for block in self.input.blocks():
            now = time.monotonic()
            if self.echo is not None:  # everything below hears the cleaned microphone
                self._record_wav(self.mic_wav, block.samples)
                block = self.echo.process(block, now)
                self._show_echo(now)
            self.view.level(_dbfs(block.samples))
            self._record_wav(self.user_wav, block.samples)
            armed = self.config.barge_in != "off" and self.output.busy() and self._speaking()
            heard = block if self.echo is None else self.echo.for_barge_in or block
            onset = detector.feed(heard, armed=armed, now=now)
            if onset is not None:
                await self._interrupt("speech", onset)  # flushes first, then tells the server
            for ev in turn_vad.feed(block.samples):
                self._on_turn_vad(ev.kind, ev.onset_ms if ev.kind == "start" else ev.ms)
            if self.conn is not None and self.conn.session.max_append_samples != learned:
                learned = self.conn.session.max_append_samples  # a refusal taught the limit
                chunk_frames = self._packet_frames(rate)
            self._pending.append(block.samples)
            self._pending_frames += block.samples.size
            if self._pending_t is None:
                self._pending_t = block.t_capture
            if self._pending_frames >= chunk_frames:
                await self._flush_pending(final=False, chunk_frames=chunk_frames)
            block_end = block.start_ms + 1000.0 * block.samples.size / rate
            while self._ptt_commits and self._ptt_commits[0] <= block_end:
                self._ptt_commits.popleft()
                await self._commit_turn()
            if self._stop.is_set():
                return
        self._request_stop("input ended")

    def _packet_frames(self, rate: int) -> int:
        """Samples per append: ``--chunk-ms``, cut to what the lane wants
        (docs/protocol.md §13.1; the decision is the protocol state's)."""
        assert self.config.chunk_ms is not None and self.conn is not None
        origin = self.config.settings.origins.get("chunk_ms")
        asked_by = "--chunk-ms" if origin is not None and origin.value == "flag" else "chunk_ms"
        decided = self.conn.session.packet_ms(self.config.chunk_ms, rate, asked_by=asked_by)
        if decided.note is not None and decided.note not in self._cadence_notes:
            self._cadence_notes.append(decided.note)
            self.view.info(decided.note)
        return rate * decided.packet_ms // 1000

    async def _flush_pending(self, *, final: bool, chunk_frames: int | None = None) -> None:
        """Send whole chunks of the pending input (all of it when ``final``)."""
        data = np.concatenate(self._pending) if self._pending else np.zeros(0, np.float32)
        t_first = self._pending_t if self._pending_t is not None else time.monotonic()
        rate = self.settings.input_rate if self.settings else 16000
        size = data.size if final or chunk_frames is None else chunk_frames
        offset = 0
        while data.size - offset >= size > 0:
            await self._send_append(data[offset : offset + size], t_first + offset / rate)
            offset += size
            if final:
                break
        rest = data[offset:]
        self._pending = [rest] if rest.size else []
        self._pending_frames = int(rest.size)
        self._pending_t = t_first + offset / rate if rest.size else None

    def _on_turn_vad(self, kind: str, u_ms: float) -> None:
        if kind == "start":
            self.utterances.append(Utterance(onset_ms=u_ms))
            self.view.set_state(state="you are speaking")
            return
        if not self.utterances or self.utterances[-1].end_ms is not None:
            return
        utt = self.utterances[-1]
        utt.end_ms = u_ms
        self.view.set_state(state="listening")

        def resolved(sent: int, utt: Utterance = utt) -> None:
            utt.t_eos_ns = sent

        self._when_sent(u_ms, carrying=False, callback=resolved)

    def _claim_eos(self, before_ns: int | None = None) -> int | None:
        """t_eos of the latest finished, unclaimed utterance (the turn being answered); with
        ``before_ns``, of one whose speech had ended by then (a late claim: the answer began
        before the local VAD had decided the utterance was over)."""
        for utt in reversed(self.utterances):
            if utt.claimed:
                return None
            if utt.t_eos_ns is not None and (before_ns is None or utt.t_eos_ns <= before_ns):
                utt.claimed = True
                return utt.t_eos_ns
        return None

    # -- barge-in ----------------------------------------------------------------------------

    async def _interrupt(self, kind: str, onset: Onset | None = None) -> None:
        """Stop playback now, then tell the server what was heard and (maybe) cancel."""
        assert self.output is not None and self.conn is not None
        t_flush = time.monotonic()
        heard = self.output.flush()
        active = self.conn.session.active_response_id
        if not heard and (kind != "key" or active is None):
            return
        barge = Interruption(kind, sorted(heard), heard, t_flush, onset)
        self.barge_ins.append(barge)
        for rid, ms in heard.items():
            self._mark_flushed(rid, ms, t_flush, barge)
        if onset is not None:
            self.view.info(
                f"barge-in: playback stopped {barge.local_stop_ms:.0f} ms after your speech "
                f"began; heard {', '.join(f'{v:.0f} ms' for v in heard.values()) or 'nothing'}"
            )
            for rid in heard:
                self._set_t_bi(rid, onset.u_ms, barge)
        elif heard:
            self.view.info(
                f"{kind}: playback stopped; heard "
                + ", ".join(f"{v:.0f} ms" for v in heard.values())
            )
        self.view.set_state(state="interrupted" if kind != "server" else "cancelled by server")
        await self._send_owed(time.monotonic())  # the heard position, before any cancel
        cs = self.conn.session
        # a lane without barge-in whose model ends its turn when it hears the user: a cancel
        # there would reset its conversation (docs/protocol.md §13.3), so speech only stops
        # the local playback
        model_stops = cs.continuous_output and cs.capabilities.get("supports_barge_in") is False
        cancel = kind == "key" or (
            kind == "speech" and self.config.barge_in == "client" and not model_stops
        )
        targets = [r for r in heard if not self.conn.session.responses[r].done]
        if cancel and active is not None and active not in targets:
            targets.append(active)
        if cancel:
            for rid in targets:
                sent = await self._send(self.conn.session.response_cancel(rid))
                barge.cancel_sent = sent is not None
                if kind == "key" and sent is not None:
                    barge.t_bi_ns = sent
                    st = self.responses.get(rid)
                    if st is not None:
                        st.turn.barge = BargeTimes("cancel", sent)

    def _set_t_bi(self, rid: str, u_ms: float, barge: Interruption) -> None:
        st = self.responses.get(rid)

        def resolved(sent: int) -> None:
            barge.t_bi_ns = barge.t_bi_ns or sent
            if st is not None and st.turn.barge is None:
                st.turn.barge = BargeTimes("speech", sent)

        self._when_sent(u_ms, carrying=True, callback=resolved)

    def _mark_flushed(self, rid: str, heard_ms: float, t_flush: float, barge: Interruption) -> None:
        st = self.responses.get(rid)
        if st is None:
            return
        self._write_heard(st, heard_ms)
        st.flushed = True
        st.heard_ms = heard_ms
        st.heard_buf.clear()
        st.barge = barge
        st.turn.heard_ms = heard_ms
        st.turn.playback_end = _ns(t_flush)
        if self.duty is not None:
            self.duty.interrupted(rid, heard_ms)

    async def _send_owed(self, now: float) -> None:
        """Send what the playback duty says the client owes the server at ``now``."""
        duty = self.duty
        if duty is None:
            return
        for event in duty.due(now):
            if await self._send(event) is None:
                duty.unsent(event)
        duty.played_out.clear()  # talk finishes its turns from the output (_progress)

    # -- happenings --------------------------------------------------------------------------

    def _record_recv(self, h: Happening) -> None:
        """Connection listener: every frame into events.jsonl at its receive time."""
        if self.artifacts is None:
            return
        if isinstance(h, ConnectionLost):
            self.artifacts.note(h.recv_ns, "connection.lost", code=h.code, reason=h.reason)
            return
        if isinstance(h, ViolationRecorded):  # with its evidence, as replay logs it
            self.artifacts.note(h.recv_ns, "violation", **h.violation.to_dict())
            return
        # one frame may yield several happenings: log it once. Compared by identity with a
        # reference held — comparing id()s lost frames, since CPython hands a freed dict's
        # address to the next one (the next frame, when the last was already consumed)
        if h.frame and h.frame is not self._last_frame:
            self._last_frame = h.frame
            self.artifacts.event("recv", h.recv_ns, h.frame)

    async def _happening_loop(self) -> None:
        assert self.conn is not None
        async for h in self.conn:
            await self._on_happening(h)
        if not self._stop.is_set():
            session = self.conn.session
            if session.closed:
                self.view.info(f"the server closed the session ({session.close_reason})")
                self._request_stop("server closed")
            else:
                self.error = self.error or ServerUnreachable("the connection ended")
                self._request_stop("connection ended")

    async def _on_happening(self, h: Happening) -> None:
        assert self.conn is not None and self.output is not None
        if isinstance(h, AudioDelta):
            await self._on_audio(h)
        elif isinstance(h, TranscriptDelta | TextDelta):
            if h.delta:
                self.view.transcript(h.response_id, h.delta)
        elif isinstance(h, ResponseCreated):
            if not self.conn.session.continuous_output:  # else: an answer says it speaks
                self._state_for(h.response_id, h.recv_ns)
                self.view.set_state(state="assistant is thinking", epoch=self.conn.session.epoch)
        elif isinstance(h, AnswerStarted):
            self._count(self._state_for(h.response_id))
        elif isinstance(h, AnswerEnded):
            st = self._state_for(h.response_id)
            st.turn.t_done = h.recv_ns  # the end of its speech (docs/protocol.md §13.2)
            self._ack_wakeup.set()
        elif isinstance(h, ResponseDone):
            await self._on_done(h)
        elif isinstance(h, OverlapDecision):
            if stops_playback(h):  # the server heard the user over the answer
                await self._interrupt("server")
        elif isinstance(h, SpeechStarted):
            self.view.set_state(state="you are speaking (server VAD)")
        elif isinstance(h, SpeechStopped):
            self.view.set_state(state="turn ended (server VAD)")
        elif isinstance(h, Committed):
            if h.overlap_deferred:
                self.view.info("your turn was deferred until the answer ends")
        elif isinstance(h, Listen):
            if h.response_id is not None:
                self.view.info(f"the model chose to listen ({h.reason})")
        elif isinstance(h, ErrorReceived):
            if h.error.code not in BOOKKEEPING_CODES:
                self.view.info(f"server error: {h.error.code}: {h.error.message}")
        elif isinstance(h, ConnectionLost):
            if h.resuming:
                self.view.info(f"connection lost ({h.code} {h.reason}): resuming on its own")
                self.view.set_state(connection="lost: resuming")
            else:
                self.view.info(f"connection lost and not resumed: {h.reason}")
                self.error = ServerUnreachable(f"connection lost and not resumed: {h.reason}")
                self.view.set_state(connection="lost")
        elif isinstance(h, SessionResumed):
            rec = self.conn.timings.resumes[-1] if self.conn.timings.resumes else None
            took = f" after {rec.resume_ms:.0f} ms" if rec and rec.resume_ms else ""
            self.view.info(
                f"resumed session {h.session_id}{took} (generation {h.attachment_generation})"
            )
            self.view.set_state(connection=f"resumed (generation {h.attachment_generation})")
            if self.duty is not None:  # a final ack the resume shows lost is owed again
                self.duty.resumed(h.session)
            if self.artifacts is not None:
                self.artifacts.note(h.recv_ns, "session.resumed", resume_ms=rec and rec.resume_ms)
        elif isinstance(h, SessionClosed):
            self.view.set_state(connection=f"closed ({h.reason})")
        elif isinstance(h, SessionExpired):
            self.error = ServerUnreachable(f"the server expired the session ({h.reason})")
            self._request_stop("expired")
        elif isinstance(h, SessionReplaced):
            self.error = ServerUnreachable("another client took over this session")
            self._request_stop("replaced")

    def _state_for(self, rid: str, recv_ns: int | None = None) -> ResponseState:
        st = self.responses.get(rid)
        if st is None:
            turn = TurnTimes(
                index=len(self.turns) + 1,
                end_mode=self.mode.value,
                t_created=recv_ns,
                response_id=rid,
                t_commit=self._t_commit_ns if self.mode is TurnEnd.COMMIT else None,
            )
            st = self.responses[rid] = ResponseState(rid, turn, counted=False)
            assert self.conn is not None
            if not self.conn.session.continuous_output:
                self._count(st)
        return st

    def _count(self, st: ResponseState) -> None:
        """``st`` answers a user turn: number it. On a lane that streams silence too, only a
        response the model speaks in does (docs/protocol.md §13.2)."""
        if st.counted:
            return
        st.counted = True
        st.turn.index = len(self.turns) + 1
        st.turn.t_created = None  # there, response.created is no decision to speak
        self.turns.append(st.turn)

    def _uncount(self, st: ResponseState) -> None:
        """Counted before the lane showed it streams silence, and silent so far: no turn."""
        if st.counted and self.turns and self.turns[-1] is st.turn:
            self.turns.pop()
            st.counted = False
            st.turn.deltas.clear()  # its packets so far were the silence, not an answer
            st.turn.t_eos = st.turn.p0 = None

    def _speaking(self) -> bool:
        """The assistant's voice is on (where silence streams too, only during an answer)."""
        assert self.conn is not None
        cs = self.conn.session
        if not cs.continuous_output:
            return True
        return any(
            t.answer_start_ns is not None and t.answer_end_ns is None for t in cs.responses.values()
        )

    async def _on_audio(self, h: AudioDelta) -> None:
        assert self.output is not None and self.conn is not None
        if not h.pcm:
            return
        st = self._state_for(h.response_id)
        turn = st.turn
        first = not st.got_audio
        cs = self.conn.session
        if cs.continuous_output:  # its voice: the audible packets of an answer (§13.2)
            track = cs.responses.get(h.response_id)
            if track is not None and track.answer_start_ns is None:
                self._uncount(st)
            if h.audible and st.counted:
                if turn.t_eos is None and not turn.deltas:
                    turn.t_eos = self._claim_eos()
                turn.deltas.append(Delta(h.recv_ns, h.audio_end_ms - h.audio_start_ms))
        else:
            if turn.t_eos is None and first:
                turn.t_eos = self._claim_eos()
            turn.deltas.append(Delta(h.recv_ns, h.audio_end_ms - h.audio_start_ms))
        st.got_audio = True
        if self.artifacts is not None:
            self.artifacts.response_audio(h.response_id, h.pcm, h.sample_rate_hz)
        if st.flushed:
            return  # a late delta of an interrupted answer must not be heard
        samples = pcm.pcm16_to_float(h.pcm)
        if h.sample_rate_hz != self.output.rate:
            if st.resampler is None or st.resampler.rate_in != h.sample_rate_hz:
                st.resampler = StreamResampler(h.sample_rate_hz, self.output.rate)
            samples = st.resampler.process(samples)
        self.output.enqueue(h.response_id, samples)
        if first and self.duty is not None:
            self.duty.playing(h.response_id, OutputPosition(self.output, h.response_id))
            self._ack_wakeup.set()
        if self.artifacts is not None:
            st.heard_buf.append(samples)
        self.view.set_state(state="assistant is speaking")

    async def _on_done(self, h: ResponseDone) -> None:
        assert self.output is not None
        st = self._state_for(h.response_id)
        turn = st.turn
        if turn.t_done is None:  # a continuous lane's answer ended at its AnswerEnded
            turn.t_done = h.recv_ns
        turn.status, turn.reason = h.status, h.reason
        turn.first_text_recv = h.track.first_text_ns
        self.output.end(h.response_id)
        if self.artifacts is not None:
            self.artifacts.response_finished(h.response_id, h.status or "unknown")
        text = h.track.transcript or h.track.text
        self.view.response_finished(h.response_id, h.status, text)
        if stops_playback(h) and not st.flushed:
            await self._interrupt("server")  # cancelled: protocol/playback_stop.py
        await self._send_owed(time.monotonic())  # a truncate follows the cancelled done
        self._ack_wakeup.set()

    def _on_started(self, rid: str, t0: float) -> None:
        """The output started playing ``rid`` (P0): its figures start here."""
        st = self.responses.get(rid)
        if st is not None and self.conn is not None and not self.conn.session.continuous_output:
            st.turn.p0 = _ns(t0)  # else: when its first audible packet plays (_progress)
        self._ack_wakeup.set()

    # -- acks and turn completion -----------------------------------------------------------

    async def _ack_loop(self) -> None:
        assert self.output is not None and self.conn is not None
        interval = self.config.ack_interval_ms / 1000.0
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._ack_wakeup.wait()
            self._ack_wakeup.clear()
            await self._service(time.monotonic())

    async def _service(self, now: float) -> None:
        """What the loop does at ``now``: send what is owed, then advance every turn."""
        await self._send_owed(now)
        for st in list(self.responses.values()):
            if not st.finalized:
                self._progress(st, now)

    def _progress(self, st: ResponseState, now: float) -> None:
        """Write what has played to the recording, finish the turn when over."""
        assert self.output is not None and self.conn is not None
        rid = st.rid
        track = self.conn.session.responses.get(rid)
        done = track is not None and track.done
        if st.flushed:
            over = True
        elif not st.got_audio:
            over = done
        else:
            # where silence streams too, the answer's speech starts inside the response
            speech_at = 0.0
            if self.conn.session.continuous_output:
                speech_at = track.speech_start_ms if track is not None else None  # type: ignore[assignment]
            if st.turn.p0 is None and speech_at is not None and st.counted:
                started = self.output.started_at(rid)
                if started is not None:  # never before its first audible packet arrived
                    at = _ns(started + speech_at / 1000)
                    st.turn.p0 = max(at, st.turn.deltas[0].recv_ns) if st.turn.deltas else at
            end = self.output.end_time(rid)
            played = self.output.played_ms(rid)
            over = done and end is not None and end <= now
            if over and track is not None:
                played = max(played, track.audio_ms)  # it all played
            self._write_heard(st, played)
            if over:
                heard = max(0.0, played - (speech_at or 0.0))
                if speech_at and track is not None:  # the speech heard, not its silence
                    heard = min(heard, track.speech_end_ms - speech_at)
                st.turn.heard_ms = heard
                st.turn.playback_end = _ns(end) if end is not None else None
        # a spoken barge-in's t_bi is the send of the append carrying the onset, which may
        # still be in the pending input: wait for it (at most one chunk) before the figures
        waiting_t_bi = st.barge is not None and st.barge.kind == "speech" and st.turn.barge is None
        if over and done and not waiting_t_bi:
            self._finalize(st)

    def _finalize(self, st: ResponseState, *, interrupted: bool = False) -> None:
        st.finalized = True
        if not st.counted:
            return  # a response the model never spoke in: no turn
        turn = st.turn
        if turn.t_eos is None and turn.deltas:  # the model answered before the VAD decided
            turn.t_eos = self._claim_eos(before_ns=turn.deltas[0].recv_ns)
        record = compute_turn(st.turn, {t.index: t for t in self.turns})
        if interrupted:  # our own stop, not the server's failure (same word as the WAV name)
            record.outcome = "interrupted"
        if st.barge is not None and st.barge.local_stop_ms is not None:
            record.figures["local_stop_ms"] = Figure(st.barge.local_stop_ms, LOCAL_STOP_ORIGIN)
        self.records.append(record)
        self.view.turn(record)
        if not any(not s.finalized for s in self.responses.values()):
            self.view.set_state(state="listening")
        self._write_report()

    # -- recording ---------------------------------------------------------------------------

    def _write_heard(self, st: ResponseState, played_ms: float) -> None:
        """Write the response's audio up to ``played_ms`` into conversation.wav at the time
        the output played it (P0 + position; flushed audio never appears)."""
        if self.artifacts is None or self.output is None or not st.heard_buf:
            return
        p0 = self.output.started_at(st.rid)
        if p0 is None:
            return
        rate = self.output.rate
        target = int(played_ms * rate / 1000.0)
        need = target - st.written_frames
        if need <= 0:
            return
        data = np.concatenate(st.heard_buf)
        take = data[:need]
        rest = data[need:]
        st.heard_buf = [rest] if rest.size else []
        if take.size:
            at = p0 + st.written_frames / rate
            self.artifacts.assistant_heard(take, rate, _ns(at))
            st.written_frames += int(take.size)

    def _finalize_unfinished(self) -> None:
        """The run stopped mid-answer: keep those turns' figures with what was heard."""
        if self.output is None:
            return
        now = time.monotonic()
        for st in self.responses.values():
            if st.finalized:
                continue
            if st.got_audio and not st.flushed:
                st.turn.heard_ms = self.output.played_ms(st.rid)
                end = self.output.end_time(st.rid)
                st.turn.playback_end = _ns(min(end, now)) if end is not None else None
            unfinished = st.turn.t_done is None
            if unfinished and st.turn.error is None:
                st.turn.error = f"run stopped ({self.stop_reason}) before response.done"
            self._finalize(st, interrupted=unfinished)

    def _flush_heard_all(self) -> None:
        if self.output is None:
            return
        for st in self.responses.values():
            if not st.flushed and st.got_audio:
                self._write_heard(st, self.output.played_ms(st.rid))

    def _open_record(self, out_dir: Path, settings: SessionSettings) -> None:
        from duplexctl.audio.writers import WavWriter
        from duplexctl.report.artifacts import RunArtifacts

        # a file that cannot be written stops the conversation (exit 4, duplexctl/rundir.py)
        loop = asyncio.get_running_loop()

        def write_failed() -> None:
            loop.call_soon_threadsafe(self._write_failed)

        self.artifacts = artifacts = RunArtifacts(
            out_dir,
            origin_ns=time.monotonic_ns(),
            user_rate=settings.input_rate,
            conversation_rate=settings.output_rate,
            writes=Writes(write_failed),
        )
        with artifacts.writing(Path(out_dir) / "user.wav"):
            self.user_wav = WavWriter(Path(out_dir) / "user.wav", settings.input_rate)
        mic = ""
        if self.echo is not None:  # user.wav is what was sent: the cleaned microphone
            with artifacts.writing(Path(out_dir) / "mic.wav"):
                self.mic_wav = WavWriter(Path(out_dir) / "mic.wav", settings.input_rate)
            mic = ", mic.wav (before echo cancellation)"
        self.view.info(f"recording to {out_dir}/ (conversation.wav, user.wav{mic}, events.jsonl)")

    def _write_failed(self) -> None:
        """A ``--record`` file could not be written: the conversation stops as on ``q`` (the
        session closed, the files kept as they were) and the run ends with that error."""
        assert self.artifacts is not None
        if self.error is None:
            self.error = self.artifacts.writes.failure
        self._request_stop("write failed")

    def _record_wav(self, wav: Any, samples: Any) -> None:
        """One block into user.wav or mic.wav (a write that fails stops the run)."""
        artifacts = self.artifacts
        if wav is None or artifacts is None or not artifacts.writes.ok:
            return
        with artifacts.writing(wav.path):
            wav.write(samples)

    def _report(self) -> dict[str, Any]:
        from duplexctl.report.artifacts import redact

        conn = self.conn
        settings = self.settings
        return {
            "command": "talk",
            "duplexctl_version": __version__,
            "url": conn.url if conn else self.config.url,
            "session_id": conn.session.session_id if conn else None,
            "turn_mode": self.mode.value,
            "barge_in": self.config.barge_in,
            "aec": self._echo_report(),
            "input": self.input.description if self.input else None,
            "output": self.output.description if self.output else None,
            "config": self.config.settings.echo(),  # each setting used, with its origin
            "settings": redact(settings.to_session_object(), audio_keys=False)
            if settings
            else None,
            "capabilities": self.caps,
            "turns": [r.to_json() for r in self.records],
            "barge_ins": [b.to_json() for b in self.barge_ins],
            "resumes": [
                {
                    "outcome": r.outcome,
                    "resume_ms": r.resume_ms,
                    "reconnect_ms": r.reconnect_ms,
                    "resume_handshake_ms": r.resume_handshake_ms,
                    "attempts": r.attempts,
                }
                for r in (conn.timings.resumes if conn else [])
            ],
            "close_ms": conn.timings.close_ms if conn else None,
            "stop_reason": self.stop_reason,
            "interrupted": self.interrupted,
            "measurement_origins": {"local_stop_ms": LOCAL_STOP_ORIGIN},
        }

    def _echo_report(self) -> dict[str, Any]:
        if self.echo is None:
            return {"state": self.aec_state}
        st = self.echo.stats()
        return {
            "state": self.aec_state,
            "noise_suppression": self.echo.noise_suppression,
            "erle_db": None if st.erle_db is None else round(st.erle_db, 1),
            "delay_ms": round(st.delay_ms, 1),
            "device_latency_ms": round(st.device_latency_ms, 1),
            "audio_s": round(self.echo.audio_s, 2),
            "render_gaps": self.echo.render_gaps,
            "far_late_frames": self.echo.far_late_frames,
            "gated_frames": self.echo.gated_frames,
            "raw_frames": self.echo.raw_frames,
            "leaks_silenced": self.echo.leaks_silenced,
            "cpu_s": round(st.cpu_s, 3),
            "added_capture_ms_mean": round(st.added_ms_mean, 3),
            "added_capture_ms_max": round(st.added_ms_max, 3),
        }

    def _write_report(self) -> None:
        if self.artifacts is not None:  # a write that fails goes to the run's writes
            self.artifacts.write_report(self._report())

    def _close_record(self) -> None:
        if self.artifacts is None:
            return
        self._write_report()
        self.artifacts.close()
        if self.user_wav is not None:
            self.user_wav.close()
        if self.mic_wav is not None:
            self.mic_wav.close()
        self._write_behaviour()

    def _write_behaviour(self) -> None:
        """How the conversation behaved (docs/metrics.md "Conversation behaviour"), read off
        the finished conversation.wav, added to report.json."""
        from duplexctl.behaviour.figures import recorded_figures

        artifacts = self.artifacts
        origin = artifacts.origin_ns
        ends = [(u.t_eos_ns - origin) / NS_PER_MS for u in self.utterances if u.t_eos_ns]
        if not artifacts.writes.ok:
            return
        with contextlib.suppress(OSError, RuntimeError):  # no audio recorded: no figures
            figures = recorded_figures(artifacts.dir / "conversation.wav", ends)
            artifacts.write_report({**self._report(), "behaviour": figures.to_json()})


async def run_talk(config: TalkConfig, view: View | None = None) -> TalkResult:
    """Run one live conversation until ``--duration``, ``q``, Ctrl-C or the server ends it."""
    return await TalkSession(config, view).run()


def list_device_lines() -> list[str]:
    """``talk --list-devices``: one line per PortAudio device (MissingDependency without)."""
    from duplexctl.audio.devices import list_devices

    devices = list_devices()
    if not devices:
        return [f"no audio devices found (no sound server, no sound card); {WITHOUT_SPEAKER}"]
    return ["  < default input, > default output", *(d.describe() for d in devices)]
