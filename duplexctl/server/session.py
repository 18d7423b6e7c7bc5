"""EngineSession: one duplex session's meaning — mailbox, lanes, responses, cancel family.

The transport owns sockets, journals and timers; this module owns everything a session
*means* (docs/architecture.md, "Contract between the server transport and the session
engine"). Client events are validated by :mod:`duplexctl.server.translate` in
:meth:`EngineSession.receive` (translator rejections are raised at once, for the transport
to send unsequenced) and then applied one at a time by a mailbox task, so every reply —
sequenced errors included — comes out through ``emit`` in arrival order (§6.9).

Output generation runs in one task per response. Every await in it is followed by an epoch
check before anything is emitted: once a response's terminal event has gone out, nothing of
its epoch follows (§3.4, §6.4) — the cancellation is atomic at the session, not at the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from duplexctl.audio import pcm
from duplexctl.audio.resample import StreamResampler
from duplexctl.audio.vad import VadEvent
from duplexctl.protocol import ids, names
from duplexctl.protocol.errors import ProtocolError, realtime_error
from duplexctl.server import session_object, translate
from duplexctl.server.config import ServerConfig
from duplexctl.server.model import SimulatedGpu, SimulatedModel, encode_chunk, reply_text
from duplexctl.server.session_object import ACK_ONLY, BARGE_IN_ON_SPEECH, NegotiatedSettings
from duplexctl.server.vadgate import VadGate, VadVerdict
from duplexctl.server.wire_numbers import is_position

Emit = Callable[[dict[str, Any]], None]
log = logging.getLogger(__name__)

INTERNAL_RATE: Final = 16000
FIRST_UNIT_SAMPLES: Final = 16480  # MiniCPM-o: the first 1 s unit closes after ≈1030 ms
UNIT_SAMPLES: Final = 16000
MAX_RESAMPLERS: Final = 4
_TURN_EVENT_STATES: Final[dict[str, str]] = {
    "user_started": "user_speaking",
    "user_committed": "user_committed",
    "assistant_started": "assistant_generating",
    "assistant_done": "assistant_playing",
    "playback_ack": "idle",
    "timeout": "idle",
    "close": "idle",
    "barge_in": "barge_in",
}


def validate_open(session_obj: dict[str, Any] | None, config: ServerConfig) -> None:
    """Check an opening session object; raises the unsequenced open-time ProtocolError."""
    session_object.parse_open(session_obj, config)


def cut_transcript(text: str, ms: int, total_ms: int) -> str:
    """The transcript proportionally cut at ``ms`` of ``total_ms`` (not word-aligned)."""
    if total_ms <= 0 or ms <= 0:
        return ""
    n = int(len(text) * min(ms, total_ms) / total_ms)
    return text[:n].rstrip()


@dataclass(slots=True)
class Ledger:
    generated_ms: int = 0
    sent_ms: int = 0
    played_ms: int = 0
    committed_ms: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "generated_ms": self.generated_ms,
            "sent_ms": self.sent_ms,
            "played_ms": self.played_ms,
            "committed_ms": self.committed_ms,
        }


@dataclass(slots=True)
class Turn:
    """A committed user turn the model may answer."""

    item_id: str | None
    audio: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return 0 if self.audio is None else int(self.audio.size) * 4


@dataclass(slots=True)
class Response:
    id: str
    epoch: int
    turn_id: int
    previous_item_id: str | None
    output_format: str
    output_rate: int | None
    metadata: dict[str, Any] | None = None
    promoted: bool = False
    in_history: bool = True
    text: str = ""
    emitted_text: str = ""
    ledger: Ledger = field(default_factory=Ledger)
    chunks: int = 0
    last_b64: str = ""
    status: str = "in_progress"
    finished: bool = False
    announced: bool = False
    released: bool = False
    superseded: bool = False
    task: asyncio.Task[None] | None = None

    @property
    def item_id(self) -> str:
        return ids.assistant_item_id(self.id)


class EngineSession:
    """The per-session engine (see the module docstring and the architecture contract)."""

    def __init__(
        self,
        *,
        session_id: str,
        session_obj: dict[str, Any] | None,
        config: ServerConfig,
        gpu: SimulatedGpu,
        emit: Emit,
    ) -> None:
        self.id = session_id
        self.config = config
        self.settings: NegotiatedSettings = session_object.parse_open(session_obj, config)
        self.capabilities: dict[str, Any] = session_object.capabilities(config)
        self.receive_timeout_s: float = self.settings.idle_timeout_s
        self.last_activity: float = time.monotonic()
        self.closed = False
        self._emit_fn = emit
        self._gpu = gpu
        self._model = SimulatedModel(config)
        self._queue: asyncio.Queue[translate.Command] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._vad: VadGate | None = (
            VadGate(self.settings.turn_detection) if self.settings.turn_detection else None
        )
        self._resamplers: dict[tuple[str, int], StreamResampler] = {}
        # conversation state
        self.epoch = 0
        self.turn_id = 0
        self.turn_state = "idle"
        self._items: dict[str, dict[str, Any]] = {}
        self._prev_of: dict[str, str | None] = {}
        self._last_item_id: str | None = None
        self._last_user_item: str | None = None
        # input state
        self._buf: list[np.ndarray] = []
        self._utterance_item: str | None = None
        self._utterance_stopped = False
        self._silence_since_commit = False
        self._pending_turns: list[Turn] = []
        self._deferred: list[Turn] = []
        self._text_turn: str | None = None
        self._audio_seen = False
        self._output_started = False
        self._append_count = 0
        self._overlap_speech_ms = 0.0
        # native lane
        self._unit_fill = 0
        self._unit_target = FIRST_UNIT_SAMPLES
        self._unit_speech = False
        self._heard_speech = False
        self._silent_units = 0
        # responses
        self._active: Response | None = None
        self._last_response: Response | None = None
        self._responses: dict[str, Response] = {}
        self._playback: dict[str, Response] = {}
        # cancelled replies whose audio was not fully acknowledged: they no longer own the
        # turn, but stay addressable so the client can truncate to (or ack) what was heard,
        # as on vLLM-Omni 0.30.0 (truncate after cancel -> truncated + truncating ack)
        self._cancelled_playback: dict[str, Response] = {}
        self._gate_stuck = False

    # --- contract -------------------------------------------------------------------------

    def session_object(self) -> dict[str, Any]:
        """The full wire session object (session.created / .updated / .resumed)."""
        active = self._active
        playback = (
            self._last_response.ledger.as_dict()
            if self._last_response is not None and not self._last_response.released
            else None
        )
        state: dict[str, Any] = {
            "state": "closed" if self.closed else "open",
            "turn_state": self.turn_state,
            "epoch": self.epoch,
            "turn_id": self.turn_id,
            "active_request_id": active.id if active else None,
            "active_response_id": active.id if active else None,
            "active_response_turn_id": active.turn_id if active else None,
        }
        if playback is not None:
            state["playback"] = playback
        return session_object.build(
            self.settings, session_id=self.id, state=state, caps=self.capabilities
        )

    def start(self) -> None:
        """Emit session.updated (journal entry #1) and start the mailbox."""
        self._ev("session.updated", session=self.session_object())
        self._worker = asyncio.get_running_loop().create_task(self._run())

    def receive(self, event: dict[str, Any]) -> None:
        """Translate one client event and queue it; translator rejections raise at once."""
        if self.closed:
            raise ProtocolError("session_closed", "Duplex session is closed")
        self.last_activity = time.monotonic()
        try:
            command = translate.translate(
                event, input_format=self.settings.input_format, input_rate=self.settings.input_rate
            )
        except ProtocolError:
            raise
        except Exception as exc:  # a translator bug must not take the socket reader down
            log.exception("translator failed")
            raise ProtocolError("bad_event", f"could not translate event: {exc}") from None
        self._queue.put_nowait(command)

    async def drain(self) -> None:
        """Wait until every queued command has been applied (tests and orderly shutdown)."""
        await self._queue.join()

    async def close(self, reason: str) -> None:
        """Stop all work without a cancelled response.done; session.closed is the last event."""
        if self.closed:
            return
        self._stop(cancel_worker=asyncio.current_task() is not self._worker)
        self.closed = True
        self._ev("session.closed", session_id=self.id, reason=reason, event={})

    async def expire(self, reason: str) -> None:
        """Lease expiry: session.expired, then nothing more."""
        if self.closed:
            return
        self._stop(cancel_worker=asyncio.current_task() is not self._worker)
        self.closed = True
        self._ev("session.expired", session_id=self.id, reason=reason)

    async def abort(self) -> None:
        """Stop everything and emit nothing (failed open, server shutdown)."""
        self._stop(cancel_worker=asyncio.current_task() is not self._worker)
        self.closed = True

    # --- plumbing -------------------------------------------------------------------------

    def _stop(self, *, cancel_worker: bool) -> None:
        for response in list(self._responses.values()):
            response.finished = True
            if response.task is not None and not response.task.done():
                response.task.cancel()
        self._active = None
        if cancel_worker and self._worker is not None and not self._worker.done():
            self._worker.cancel()
        while not self._queue.empty():
            with contextlib.suppress(asyncio.QueueEmpty, ValueError):
                self._queue.get_nowait()
                self._queue.task_done()

    def _ev(self, etype: str, **fields: Any) -> None:
        event: dict[str, Any] = {"type": etype, "event_id": ids.server_event_id()}
        event.update(fields)
        self._emit_fn(event)

    def _err(
        self, code: str, message: str, client_event_id: str | None = None, **extra: Any
    ) -> None:
        self._emit_fn(
            realtime_error(code, message, client_event_id=client_event_id, extra=extra or None)
        )

    async def _run(self) -> None:
        while True:
            command = await self._queue.get()
            try:
                if not self.closed:
                    await self._dispatch(command)
            except ProtocolError as exc:
                self._err(exc.code, exc.message, command.event_id if exc.echo_event_id else None)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("engine failed on %s", command.type)
                self._err("internal_error", f"internal error while handling {command.type}")
            finally:
                self._queue.task_done()
            if self.closed:
                return

    async def _dispatch(self, cmd: translate.Command) -> None:
        handler = getattr(self, "_on_" + cmd.type.replace(".", "_"))
        result = handler(cmd)
        if asyncio.iscoroutine(result):
            await result

    @property
    def _native(self) -> bool:
        return self.settings.auto_response

    def _listen(self, reason: str, **meta: Any) -> None:
        metadata = {
            "type": "response.listen",
            "session_id": self.id,
            "epoch": self.epoch,
            "reason": reason,
            **meta,
        }
        self._ev(
            "response.listen",
            session_id=self.id,
            epoch=self.epoch,
            response={"object": "realtime.response", "status": "listening", "metadata": metadata},
        )

    def _pending_bytes(self) -> int:
        buffered = sum(int(chunk.size) * 4 for chunk in self._buf)
        return buffered + sum(t.nbytes for t in self._pending_turns + self._deferred)

    def _owns_turn(self) -> bool:
        """The model owns the turn: a response runs, or (ack_only) its audio is unacked."""
        if self._active is not None:
            return True
        if self.settings.playback_commit_policy == ACK_ONLY:
            return any(not r.released for r in self._playback.values())
        return False

    def _resampler(self, fmt: str, rate: int) -> StreamResampler:
        """The streaming resampler of one input (format, rate), kept across appends so that
        chunking does not change the audio. At most a few are kept: each holds ~240 kB of
        soxr state, and a client switching rates on every append grew a session by that
        much per rate (400 rates: ~95 MB) until it closed."""
        key = (fmt, rate)
        resampler = self._resamplers.pop(key, None)
        if resampler is None:
            resampler = StreamResampler(rate, INTERNAL_RATE)
            while len(self._resamplers) >= MAX_RESAMPLERS:
                self._resamplers.pop(next(iter(self._resamplers)))
        self._resamplers[key] = resampler  # most recently used last
        return resampler

    # --- session lifecycle commands -----------------------------------------------------

    def _on_session_heartbeat(self, cmd: translate.Command) -> None:
        self._ev("session.heartbeat_ack", session_id=self.id)

    async def _on_session_close(self, cmd: translate.Command) -> None:
        await self.close(cmd.args["reason"])

    def _on_session_update(self, cmd: translate.Command) -> None:
        patch = cmd.args["session"]
        old_td = self.settings.turn_detection
        try:
            updated = session_object.apply_update(
                self.settings,
                patch,
                self.config,
                audio_started=self._audio_seen,
                output_started=self._output_started,
            )
        except ProtocolError as exc:
            self._err(exc.code, exc.message, cmd.event_id)
            return
        if updated.turn_detection != old_td:
            self._vad = VadGate(updated.turn_detection) if updated.turn_detection else None
        self.settings = updated
        self._ev("session.updated", session=self.session_object())

    # --- input ---------------------------------------------------------------------------

    def _on_input_audio_buffer_append(self, cmd: translate.Command) -> None:
        a = cmd.args
        data: bytes = a["data"]
        fmt: str = a["format"]
        rate: int = a["rate"]
        self._append_count += 1
        width = pcm.BYTES_PER_SAMPLE.get(fmt, 2)
        incoming = int(len(data) // width * INTERNAL_RATE / rate) * 4
        if self._pending_bytes() + incoming > self.config.max_pending_input_bytes:
            self._err(
                "input_backpressure",
                "Duplex session has too many pending input bytes",
                cmd.event_id,
            )
            return
        failing = self._append_fails()
        if not data:
            if failing:
                self._append_failed(cmd, None)
            return
        try:
            raw = pcm.decode(data, fmt)
        except pcm.AudioDecodeError:
            self._err("bad_audio", f"input_audio_buffer.append {fmt} audio could not be decoded")
            return
        samples = self._resampler(fmt, rate).process(raw)
        self._audio_seen = True
        duration_ms = 1000.0 * raw.size / rate
        if failing and not self._native:
            self._append_failed(cmd, None)
            return
        if self._native:
            created = self._native_append(raw, samples, a["hints"], duration_ms)
            if failing or (created is not None and self._orphan_on_its_own()):
                self._append_failed(cmd, created)
            return
        self._turn_append(raw, samples, a["hints"], duration_ms)

    def _append_fails(self) -> bool:
        fault = self.config.fault("fail-append-every")
        if fault is None or not fault.value or fault.value < 1:
            return False
        return self._append_count % int(fault.value) == 0

    def _orphan_on_its_own(self) -> bool:
        """``orphan-response`` without ``fail-append-every``: the append on which the model
        decides to speak fails, so the bug is observable with the one fault alone (model-native
        lane only: in the turn lane responses come from commits, not appends)."""
        return (
            self.config.fault("orphan-response") is not None
            and self.config.fault("fail-append-every") is None
        )

    def _append_failed(self, cmd: translate.Command, created: Response | None) -> None:
        """An injected runtime append failure (``fail-append-every``, or ``orphan-response``).

        By default a response created for the failed append is ended with a failed
        response.done so the next utterance can be answered; with ``orphan-response`` it
        is left open for ever (the server bug being simulated).
        """
        self._err(
            "runtime_append_failed",
            "runtime append failed (injected fault)",
            cmd.event_id,
            retryable=False,
        )
        if created is None or created.finished:
            return
        if self.config.fault("orphan-response") is not None:
            if created.task is not None:
                created.task.cancel()
            return
        self._fail(created, "runtime_append_failed")

    def _speechy(self, raw: np.ndarray, hints: dict[str, Any], verdict: VadVerdict | None) -> bool:
        if hints.get("is_speech") is not None:
            return bool(hints["is_speech"])
        if verdict is not None:
            return verdict.is_speech
        return pcm.rms(raw) >= self.settings.overlap_silence_rms

    def _speech_started(self, audio_start_ms: float) -> None:
        self._utterance_item = ids.user_item_id()
        self._utterance_stopped = False
        self.turn_state = "user_speaking"
        self._ev(
            "input_audio_buffer.speech_started",
            audio_start_ms=int(audio_start_ms),
            item_id=self._utterance_item,
        )

    def _turn_append(
        self, raw: np.ndarray, samples: np.ndarray, hints: dict[str, Any], duration_ms: float
    ) -> None:
        """Turn lane: buffer speech, beat on silence, overlap policy while the model talks."""
        verdict = self._vad.feed(samples) if self._vad is not None else None
        if self._owns_turn():
            self._turn_overlap(raw, samples, hints, verdict, duration_ms)
            return
        self._overlap_speech_ms = 0.0
        if verdict is not None:
            if verdict.started is not None:
                self._speech_started(verdict.started.ms)
            if verdict.is_speech and self._utterance_item is not None:
                self._buf.append(samples)
                if verdict.stopped is not None:
                    self._vad_commit(_decided(verdict.stopped))
                return
            self._silence_since_commit = True
            self._listen("silence_or_noise")
            return
        if not self._speechy(raw, hints, None):
            self._silence_since_commit = True
            self._listen("silence_or_noise")
            return
        if self._utterance_item is None:
            hint = hints.get("audio_start_ms")
            self._speech_started(hint if hint is not None else 0)
        self._buf.append(samples)

    def _decision(
        self,
        action: str,
        reason: str,
        duration_ms: float,
        speech: bool,
        *,
        buffer_audio: bool,
        cancel_reason: str | None = None,
        defer: bool = False,
    ) -> None:
        if speech:
            self._overlap_speech_ms += duration_ms
        policy = self.settings.overlap_policy
        meta: dict[str, Any] = {
            "type": "overlap.decision",
            "session_id": self.id,
            "epoch": self.epoch,
            "policy": policy,
            "action": action,
            "reason": reason,
        }
        if cancel_reason is not None:
            meta["cancel_reason"] = cancel_reason
        meta["duration_ms"] = round(duration_ms)
        meta["overlap_speech_ms"] = round(self._overlap_speech_ms)
        meta["buffer_audio"] = buffer_audio
        if defer:
            meta["defer_runtime_append"] = True
        self._ev(
            "overlap.decision",
            session_id=self.id,
            epoch=self.epoch,
            policy=policy,
            action=action,
            reason=reason,
            metadata=meta,
        )

    def _turn_overlap(
        self,
        raw: np.ndarray,
        samples: np.ndarray,
        hints: dict[str, Any],
        verdict: VadVerdict | None,
        duration_ms: float,
    ) -> None:
        """§6.3, turn lane: one overlap.decision per append while the model owns the turn."""
        speech = self._speechy(raw, hints, verdict)
        forced = hints.get("overlap_action")
        if hints.get("force_barge_in") or forced == "barge_in":
            reason = (
                "client_force_barge_in" if hints.get("force_barge_in") else "client_overlap_action"
            )
            self._decision(
                "barge_in", reason, duration_ms, speech, buffer_audio=True, cancel_reason="barge_in"
            )
            self._barge_in_owned("barge_in")
            self._keep_interruption(samples, hints)
            return
        if hints.get("force_listen") or forced == "listen":
            reason = "client_force_listen" if hints.get("force_listen") else "client_overlap_action"
            self._decision("listen", reason, duration_ms, speech, buffer_audio=speech)
            if speech:
                self._keep_interruption(samples, hints)
            return
        if forced == "drop":
            self._decision("drop", "client_overlap_action", duration_ms, speech, buffer_audio=False)
            return
        if verdict is not None:
            if verdict.started is not None:
                self._speech_started(verdict.started.ms)
                self._vad_barge_in(duration_ms)
                self._buf.append(samples)
                if verdict.stopped is not None:
                    self._vad_commit(_decided(verdict.stopped))
                return
            if verdict.is_speech and self._utterance_item is not None:
                self._decision(
                    "listen", "server_vad_utterance_active", duration_ms, True, buffer_audio=True
                )
                self._buf.append(samples)
                if verdict.stopped is not None:
                    self._vad_commit(_decided(verdict.stopped))
                return
            self._decision("drop", "silence_or_noise", duration_ms, False, buffer_audio=False)
            return
        if not speech:
            self._decision("drop", "silence_or_noise", duration_ms, False, buffer_audio=False)
            return
        if self.settings.overlap_policy == BARGE_IN_ON_SPEECH:
            self._decision(
                "barge_in",
                "policy_barge_in_on_speech",
                duration_ms,
                True,
                buffer_audio=True,
                cancel_reason="barge_in",
            )
            self._barge_in_owned("barge_in")
            self._keep_interruption(samples, hints)
            return
        if self._utterance_item is None:
            hint = hints.get("audio_start_ms")
            self._speech_started(hint if hint is not None else 0)
        self._decision(
            "listen", "policy_listen_only", duration_ms, True, buffer_audio=True, defer=True
        )
        self._buf.append(samples)

    def _keep_interruption(self, samples: np.ndarray, hints: dict[str, Any]) -> None:
        if self._utterance_item is None:
            hint = hints.get("audio_start_ms")
            self._speech_started(hint if hint is not None else 0)
        self._buf.append(samples)

    def _vad_barge_in(self, duration_ms: float) -> None:
        """Server VAD heard an onset over an answer that owns the turn: announce the barge-in
        decision and cancel the answer with reason ``turn_detected`` (both lanes, §6.3)."""
        self._decision(
            "barge_in",
            "server_vad_speech_started",
            duration_ms,
            True,
            buffer_audio=True,
            cancel_reason="turn_detected",
        )
        self._barge_in_owned("turn_detected")

    def _vad_commit(self, audio_end_ms: float) -> None:
        """Server VAD ended an utterance (turn lane): speech_stopped, auto-commit, response."""
        deferred = self._owns_turn()
        turn = self._commit_buffer(
            audio_end_ms=audio_end_ms,
            deferred=deferred,
            response_create=bool((self.settings.turn_detection or {}).get("create_response", True)),
        )
        if self._vad is not None:
            self._vad.reset()
        if deferred:
            self._deferred.append(turn)
        elif (self.settings.turn_detection or {}).get("create_response", True):
            self._start_response(turn)
        else:
            self._pending_turns.append(turn)

    def _native_append(
        self, raw: np.ndarray, samples: np.ndarray, hints: dict[str, Any], duration_ms: float
    ) -> Response | None:
        """Model-native lane: speech events, VAD barge-in, then 1 s model units."""
        before = self._active
        verdict = self._vad.feed(samples) if self._vad is not None else None
        speech = self._speechy(raw, hints, verdict)
        owned = self._owns_turn() and self.settings.overlap_policy == BARGE_IN_ON_SPEECH
        if verdict is not None:
            if verdict.started is not None:
                self._speech_started(verdict.started.ms)
                if owned:
                    self._vad_barge_in(duration_ms)
                    owned = False
            if verdict.stopped is not None and self._utterance_item is not None:
                self._ev(
                    "input_audio_buffer.speech_stopped",
                    audio_end_ms=int(_decided(verdict.stopped)),
                    item_id=self._utterance_item,
                )
                self._utterance_stopped = True
        elif speech and self._utterance_item is None and self._active is None:
            hint = hints.get("audio_start_ms")
            self._speech_started(hint if hint is not None else 0)
        if owned:
            if hints.get("force_barge_in") or hints.get("overlap_action") == "barge_in":
                self._decision(
                    "barge_in",
                    "client_force_barge_in",
                    duration_ms,
                    speech,
                    buffer_audio=True,
                    cancel_reason="barge_in",
                )
                self._barge_in_owned("barge_in")
            else:
                self._decision(
                    "listen", "auto_response_continuous", duration_ms, speech, buffer_audio=True
                )
        if speech:
            self._buf.append(samples)
        self._unit_speech = self._unit_speech or speech
        self._unit_fill += samples.size
        while self._unit_fill >= self._unit_target:
            self._unit_fill -= self._unit_target
            self._unit_target = UNIT_SAMPLES
            unit_speech = self._unit_speech
            self._unit_speech = speech and self._unit_fill > 0
            self._model_unit(unit_speech)
        created = self._active
        return created if created is not None and created is not before else None

    def _model_unit(self, has_speech: bool) -> None:
        """The simulated MiniCPM-o decides per 1 s unit: listen, speak, or yield."""
        active = self._active
        if active is not None:
            if has_speech and self._vad is None:
                # the user talks over the answer: the model stops; the reply ends completed
                self._complete(active, early=True)
                self._heard_speech, self._silent_units = True, 0
                self._listen("model_listen", model_listen=True)
            return
        if has_speech:
            self._heard_speech, self._silent_units = True, 0
            self._listen("model_listen", model_listen=True)
            return
        if self._heard_speech:
            self._silent_units += 1
            if self._silent_units >= max(1, self.config.silence_units):
                self._heard_speech, self._silent_units = False, 0
                audio = np.concatenate(self._buf) if self._buf else None
                self._buf = []
                self._start_response(Turn(self._utterance_item, audio))
                self._utterance_item = None
                return
        self._listen("model_listen", model_listen=True)

    def _on_input_audio_buffer_commit(self, cmd: translate.Command) -> None:
        a = cmd.args
        if not a["is_speech"]:
            self._drop_input()
            self._empty_commit()
            return
        if not self._buf and self._utterance_item is None:
            if self._silence_since_commit:
                self._empty_commit()
                return
            self._err(
                "input_audio_buffer_empty",
                "input_audio_buffer.commit requires a non-empty input audio buffer",
                cmd.event_id,
            )
            return
        if len(self._pending_turns) + len(self._deferred) >= self.config.max_pending_turns:
            self._err(
                "input_backpressure", "Duplex session has too many pending turns", cmd.event_id
            )
            return
        deferred = self._owns_turn()
        turn = self._commit_buffer(
            audio_end_ms=0, deferred=deferred, response_create=a["response_create"]
        )
        if self._vad is not None:
            self._vad.reset()
        if self._native:
            self._heard_speech, self._silent_units = False, 0
            if a["response_create"] and not deferred:
                self._start_response(turn)
            return
        if deferred:
            self._deferred.append(turn)
        elif a["response_create"]:
            self._start_response(turn)
        else:
            self._pending_turns.append(turn)

    def _user_item(self, item_id: str) -> dict[str, Any]:
        return {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_audio", "transcript": ""}],
        }

    def _store(self, item: dict[str, Any], previous: str | None) -> None:
        self._items[item["id"]] = item
        self._prev_of[item["id"]] = previous
        self._last_item_id = item["id"]

    def _commit_buffer(self, *, audio_end_ms: float, deferred: bool, response_create: bool) -> Turn:
        """The commit fan-out (§4.2) for the buffered utterance; returns the sealed turn."""
        item_id = self._utterance_item or ids.user_item_id()
        if self._utterance_item is not None and not self._utterance_stopped:
            self._ev(
                "input_audio_buffer.speech_stopped", audio_end_ms=int(audio_end_ms), item_id=item_id
            )
        previous = self._last_item_id
        item = self._user_item(item_id)
        self._store(item, previous)
        self._ev("conversation.item.added", previous_item_id=previous, item=copy.deepcopy(item))
        self._ev("conversation.item.created", previous_item_id=previous, item=copy.deepcopy(item))
        record: dict[str, Any] = {
            "type": "input.committed",
            "session_id": self.id,
            "turn_id": self.turn_id,
            "epoch": self.epoch,
            "history_len": len(self._items),
            "native_audio": True,
            "message": {
                "role": "user",
                "content": [
                    {"type": "audio_url", "audio_url": {"url": "native-duplex:input-audio"}}
                ],
            },
            "realtime_item_id": item_id,
        }
        if deferred:
            record["overlap_deferred"] = True
            record["response_create_deferred"] = response_create
        self._ev(
            "input_audio_buffer.committed", previous_item_id=previous, item_id=item_id, event=record
        )
        self._ev("conversation.item.done", previous_item_id=previous, item=copy.deepcopy(item))
        audio = np.concatenate(self._buf) if self._buf else None
        self._buf = []
        self._utterance_item = None
        self._utterance_stopped = False
        self._silence_since_commit = False
        self._last_user_item = item_id
        self.turn_state = "user_committed"
        if not deferred:
            for record_response in self._playback.values():
                if record_response.finished:
                    record_response.superseded = True
        return Turn(item_id, audio)

    def _empty_commit(self) -> None:
        """Silence-only commit: the 0.30.0 quirk reports the *previous* user item."""
        previous_user = self._last_user_item
        if previous_user is not None and previous_user in self._items:
            item_id = previous_user
            previous = self._prev_of.get(item_id)
            item = copy.deepcopy(self._items[item_id])
        else:
            item_id = ids.user_item_id()
            previous = self._last_item_id
            item = self._user_item(item_id)
        record = {
            "type": "input.committed",
            "session_id": self.id,
            "turn_id": self.turn_id,
            "epoch": self.epoch,
            "empty": True,
            "is_speech": False,
            "no_response": True,
        }
        self._ev(
            "input_audio_buffer.committed", previous_item_id=previous, item_id=item_id, event=record
        )
        self._ev("conversation.item.done", previous_item_id=previous, item=item)
        self._listen("silence_or_noise")
        self._silence_since_commit = False

    def _drop_input(self) -> None:
        self._buf = []
        self._utterance_item = None
        self._utterance_stopped = False
        if self._vad is not None:
            self._vad.reset()

    def _on_input_audio_buffer_clear(self, cmd: translate.Command) -> None:
        self._drop_input()
        self._silence_since_commit = False
        self._ev("input_audio_buffer.cleared")

    def _on_input_cancel(self, cmd: translate.Command) -> None:
        self._interrupt("barge_in")

    def _on_barge_in(self, cmd: translate.Command) -> None:
        if not self.capabilities.get("supports_barge_in"):
            self._err("barge_in_unsupported", "This duplex model does not support barge_in")
            return
        self._interrupt("barge_in")

    def _interrupt(self, reason: str) -> None:
        """input.cancel / barge_in: drop input, cancel the reply, always advance the epoch."""
        self._drop_input()
        self._deferred.clear()
        self._pending_turns.clear()
        if not self._stop_what_plays(reason):
            self._ev("input_audio_buffer.cleared")
        self._close_gate_if_faulty()

    def _on_input_text_append(self, cmd: translate.Command) -> None:
        self._err(
            "native_text_append_unsupported",
            "input.text.append is not supported by this duplex runtime; "
            "send a conversation.item.create user text item instead",
            cmd.event_id,
        )

    # --- conversation items ----------------------------------------------------------------

    def _on_conversation_item_create(self, cmd: translate.Command) -> None:
        item = copy.deepcopy(cmd.args["item"])
        for part in item.get("content", []):
            ptype = part.get("type")
            if ptype == "input_image":
                url = part.get("image_url")
                if not isinstance(url, str) or not url.startswith(
                    ("data:image/jpeg;base64,", "data:image/png;base64,")
                ):
                    self._err(
                        "invalid_image",
                        "input_image must be a data:image/jpeg or data:image/png base64 URL",
                    )
                    return
        if item.get("type") == "function_call_output":
            self._err(
                "invalid_function_call_output",
                "function_call_output must answer an earlier function call",
                param="item.call_id",
            )
            return
        item.setdefault("type", "message")
        item.setdefault("role", "user")
        if not isinstance(item.get("id"), str) or not item["id"]:
            item["id"] = ids.user_item_id()
        item.setdefault("object", "realtime.item")
        item.setdefault("status", "completed")
        previous = cmd.args["previous_item_id"]
        if previous is None or previous not in self._items:
            previous = self._last_item_id
        self._store(item, previous)
        for etype in (
            "conversation.item.added",
            "conversation.item.created",
            "conversation.item.done",
        ):
            self._ev(etype, previous_item_id=previous, item=copy.deepcopy(item))
        if item.get("role") != "user":
            return
        audio_parts = cmd.args["audio"]
        if audio_parts:
            chunks = []
            for data, fmt, rate in audio_parts:
                try:
                    chunks.append(
                        StreamResampler(rate, INTERNAL_RATE).process(
                            pcm.decode(data, fmt), last=True
                        )
                    )
                except pcm.AudioDecodeError:
                    self._err(
                        "bad_audio", f"conversation.item.create {fmt} audio could not be decoded"
                    )
                    return
            self._pending_turns.append(Turn(item["id"], np.concatenate(chunks)))
            self._last_user_item = item["id"]
        elif any(p.get("type") in ("input_text", "text") for p in item.get("content", [])):
            self._text_turn = item["id"]

    def _on_conversation_item_retrieve(self, cmd: translate.Command) -> None:
        item = self._items.get(cmd.args["item_id"])
        if item is None:
            self._err(
                "item_not_found",
                f"Conversation item not found: {cmd.args['item_id']}",
                cmd.event_id,
            )
            return
        self._ev("conversation.item.retrieved", item=copy.deepcopy(item))

    def _on_conversation_item_delete(self, cmd: translate.Command) -> None:
        item_id = cmd.args["item_id"]
        if item_id not in self._items:
            self._err("item_not_found", f"Conversation item not found: {item_id}", cmd.event_id)
            return
        del self._items[item_id]
        if self._last_item_id == item_id:
            self._last_item_id = self._prev_of.get(item_id)
        self._ev(
            "conversation.item.deleted",
            item_id=item_id,
            event={
                "type": "conversation.item.deleted",
                "session_id": self.id,
                "item_id": item_id,
                "deleted": True,
            },
        )

    def _on_conversation_item_truncate(self, cmd: translate.Command) -> None:
        item_id = cmd.args["item_id"]
        end_ms = cmd.args["audio_end_ms"]
        index = cmd.args["content_index"]
        item = self._items.get(item_id)
        if item is None:
            self._err("item_not_found", f"Conversation item not found: {item_id}", cmd.event_id)
            return
        content = item.get("content") or []
        part = content[index] if index < len(content) else None
        assistant = (
            item.get("role") == "assistant"
            and part is not None
            and part.get("type") == "output_audio"
        )
        if assistant:
            # a client-made assistant item carries what the client wrote: a duration that is
            # not a position counts as unknown (0), a transcript that is not text as empty
            stated = part.get("audio_duration_ms", 0)
            duration = int(stated) if is_position(stated) and stated > 0 else 0
            if end_ms > duration:
                self._err(
                    "bad_event",
                    "conversation.item.truncate audio_end_ms exceeds item audio duration",
                    cmd.event_id,
                )
                return
            full = (
                self._responses[item_id[5:]].emitted_text
                if item_id[5:] in self._responses
                else part.get("transcript", "")
            )
            full = full if isinstance(full, str) else ""
            part["transcript"] = cut_transcript(full, end_ms, duration)
        self._ev(
            "conversation.item.truncated",
            item_id=item_id,
            content_index=index,
            audio_end_ms=end_ms,
            event={
                "type": "conversation.item.truncated",
                "session_id": self.id,
                "item_id": item_id,
                "content_index": index,
                "audio_end_ms": end_ms,
                "truncated": assistant,
            },
        )
        if not assistant:
            return
        rid = item_id[5:]
        record = self._addressable(rid)
        if record is None:
            self._err(
                "playback_item_not_found", f"No assistant response item is registered for {rid}."
            )
            return
        record.ledger.played_ms = end_ms
        record.ledger.committed_ms = end_ms
        record.released = True
        self._playback.pop(rid, None)
        self._cancelled_playback.pop(rid, None)
        self._acknowledged(record, truncate=True, history_committed=True)

    # --- responses -------------------------------------------------------------------------

    def _on_response_create(self, cmd: translate.Command) -> None:
        a = cmd.args
        if a["forbidden"]:
            self._err(
                "unsupported_native_response_options",
                "The selected native duplex runtime does not support generation overrides for "
                "instructions, voice, temperature, max tokens, tools, or tool_choice.",
                cmd.event_id,
            )
            return
        if self._active is not None:
            if a["has_options"]:
                self._err(
                    "response_already_active",
                    "response.create cannot reserve options while another response is active.",
                    cmd.event_id,
                )
            else:
                self._err("response_already_active", "A duplex response is already active.")
            return
        options = {
            "output_format": a["output_format"],
            "metadata": a["metadata"],
            "conversation": a["conversation"],
        }
        if self._pending_turns:
            self._start_response(self._pending_turns.pop(0), options=options)
        elif self._text_turn is not None:
            if not self.capabilities.get("supports_text_only_turn"):
                self._err(
                    "text_only_turn_unsupported",
                    "This duplex model cannot answer a text-only turn.",
                )
                return
            item_id, self._text_turn = self._text_turn, None
            self._start_response(Turn(item_id, None), options=options)
        else:
            self._err(
                "response_create_without_input",
                "Duplex response.create requires committed audio to answer.",
            )

    def _start_response(
        self, turn: Turn, *, promoted: bool = False, options: dict[str, Any] | None = None
    ) -> None:
        """Submit a turn to the model; the start fan-out goes out now (or, for a promoted
        deferred turn, together with its first output, as 0.30.0 does)."""
        if self._gate_stuck:
            return  # fault stuck-gate: committed, never answered
        options = options or {}
        self._text_turn = None
        response = Response(
            id=ids.response_id(self.id, self.epoch),
            epoch=self.epoch,
            turn_id=self.turn_id,
            previous_item_id=self._last_item_id,
            output_format=options.get("output_format") or self.settings.output_format,
            output_rate=self.settings.output_rate,
            metadata=options.get("metadata"),
            promoted=promoted,
            in_history=options.get("conversation") != "none",
        )
        response.text = reply_text(self.turn_id, self.epoch)
        self._active = response
        self._last_response = response
        self._responses[response.id] = response
        self._playback[response.id] = response
        self.turn_state = "assistant_generating"
        if response.in_history:
            self._store(
                self._assistant_item(response, "in_progress", []), response.previous_item_id
            )
        if not promoted:
            self._announce(response, content=[])
        response.task = asyncio.get_running_loop().create_task(self._generate(response, turn))

    def _assistant_item(
        self, r: Response, status: str, content: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {
            "id": r.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def _announce(self, r: Response, *, content: list[dict[str, Any]]) -> None:
        r.announced = True
        duplex_event = {
            "type": "response.created",
            "session_id": self.id,
            "response_id": r.id,
            "epoch": r.epoch,
            "modalities": list(self.settings.modalities),
        }
        metadata = {**(r.metadata or {}), "duplex_event": duplex_event}
        self._ev(
            "response.created",
            response={
                "id": r.id,
                "object": "realtime.response",
                "status": "in_progress",
                "status_details": None,
                "output": [],
                "modalities": list(self.settings.modalities),
                "metadata": metadata,
            },
            response_id=r.id,
        )
        item = self._assistant_item(r, "in_progress", content)
        self._ev(
            "conversation.item.added", previous_item_id=r.previous_item_id, item=copy.deepcopy(item)
        )
        self._ev(
            "conversation.item.created",
            previous_item_id=r.previous_item_id,
            item=copy.deepcopy(item),
        )
        self._ev(
            "response.output_item.added", response_id=r.id, output_index=0, item=copy.deepcopy(item)
        )
        self._ev(
            "response.content_part.added",
            response_id=r.id,
            item_id=r.item_id,
            output_index=0,
            content_index=0,
            part={"type": "audio", "transcript": ""},
        )

    def _live(self, r: Response) -> bool:
        return not r.finished and not self.closed and r.epoch == self.epoch

    def _part_ids(self, r: Response) -> dict[str, Any]:
        return {"response_id": r.id, "item_id": r.item_id, "output_index": 0, "content_index": 0}

    async def _generate(self, r: Response, turn: Turn) -> None:
        """Stream the reply; every emission is fenced by the response's epoch."""
        try:
            audio = self._model.reply_audio(turn.audio)
            native = self.config.model_profile == "native"
            speak_meta = {"session_id": self.id, "epoch": r.epoch, "model_speak": True}
            stream = self._model.stream(audio, self._gpu, submitted_at=time.monotonic())
            n_units = max(1, -(-audio.size // max(1, int(24000 * self.config.chunk_ms / 1000))))
            async for chunk in stream:
                if not self._live(r):
                    return
                self.last_activity = time.monotonic()
                b64, fmt, rate = encode_chunk(chunk.samples, r.output_format, r.output_rate)
                if chunk.index == 0:
                    if r.promoted:
                        first = [
                            {
                                "type": "output_audio",
                                "transcript": r.text,
                                "audio_duration_ms": chunk.end_ms,
                            }
                        ]
                        self._announce(r, content=first)
                        self._ev("response.speak", **self._part_ids(r), metadata=dict(speak_meta))
                        if not native:
                            self._text_delta(r, r.text, speak_meta)
                    elif native:
                        self._ev("response.speak", **self._part_ids(r), metadata=dict(speak_meta))
                    else:
                        self._text_delta(r, r.text, speak_meta)
                        self._ev("response.speak", **self._part_ids(r), metadata=dict(speak_meta))
                    self._output_started = True
                r.ledger.generated_ms = r.ledger.sent_ms = chunk.end_ms
                r.chunks += 1
                r.last_b64 = b64
                self._ev(
                    names.AUDIO_DELTA,
                    **self._part_ids(r),
                    delta=b64,
                    format=fmt,
                    sample_rate_hz=rate,
                    metadata={
                        "session_id": self.id,
                        "epoch": r.epoch,
                        "model_speak": True,
                        "end_of_turn": chunk.last,
                        "playback": r.ledger.as_dict(),
                        "audio_duration_ms": chunk.end_ms,
                    },
                )
                piece = ""
                if native:
                    upto = len(r.text) * (chunk.index + 1) // n_units
                    piece = r.text[len(r.emitted_text) : upto]
                    r.emitted_text += piece
                self._ev(names.TRANSCRIPT_DELTA, **self._part_ids(r), delta=piece)
            if self._live(r):
                self._complete(r)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("response generation failed")
            if self._live(r):
                self._fail(r, "internal_error")

    def _text_delta(self, r: Response, text: str, meta: dict[str, Any]) -> None:
        r.emitted_text += text
        self._ev(names.TRANSCRIPT_DELTA, **self._part_ids(r), delta=text, metadata=dict(meta))

    def _final_parts(self, r: Response) -> None:
        """output_audio.done / transcript.done / content_part.done (full transcript)."""
        if r.chunks:
            self._ev(names.AUDIO_DONE, **self._part_ids(r))
        if r.emitted_text:
            self._ev(names.TRANSCRIPT_DONE, **self._part_ids(r), transcript=r.emitted_text)
        self._ev(
            "response.content_part.done",
            **self._part_ids(r),
            part={"type": "audio", "transcript": r.emitted_text},
        )

    def _item_done(self, r: Response, status: str, transcript: str) -> dict[str, Any]:
        content = [
            {
                "type": "output_audio",
                "transcript": transcript,
                "audio_duration_ms": r.ledger.generated_ms,
            }
        ]
        item = self._assistant_item(r, status, content)
        if r.in_history and r.item_id in self._items:
            self._items[r.item_id] = copy.deepcopy(item)
        self._ev(
            "response.output_item.done", response_id=r.id, output_index=0, item=copy.deepcopy(item)
        )
        self._ev(
            "conversation.item.done", previous_item_id=r.previous_item_id, item=copy.deepcopy(item)
        )
        return item

    def _finish(self, r: Response, status: str) -> None:
        r.finished = True
        r.status = status
        if self._active is r:
            self._active = None
        if r.task is not None and r.task is not asyncio.current_task() and not r.task.done():
            r.task.cancel()

    def _complete(self, r: Response, *, early: bool = False) -> None:
        """Natural end of turn (or the native model yielding to the user, ``early``)."""
        self._finish(r, "completed")
        self._final_parts(r)
        item = self._item_done(r, "completed", r.emitted_text)
        metadata = {
            "type": names.AUDIO_DELTA,
            "session_id": self.id,
            "response_id": r.id,
            "epoch": r.epoch,
            "text": "",
            "audio": r.last_b64,
            "format": "pcm",
            "end_of_turn": True,
            "model_speak": True,
            "audio_duration_ms": r.ledger.generated_ms,
            "playback": r.ledger.as_dict(),
            "sample_rate_hz": 24000,
        }
        self._ev(
            "response.done",
            response={
                "id": r.id,
                "object": "realtime.response",
                "status": "completed",
                "status_details": {"type": "completed", "reason": "stop"},
                "output": [item],
                "metadata": metadata,
            },
            response_id=r.id,
        )
        self._ev("rate_limits.updated", rate_limits=[])
        self.turn_id += 1
        if r.ledger.sent_ms == 0 or r.ledger.committed_ms >= r.ledger.sent_ms:
            self._release(r)
        self.turn_state = "idle" if r.released else "assistant_playing"
        del early
        if self._deferred and self._active is None:
            self._start_response(self._deferred.pop(0), promoted=True)

    def _release(self, r: Response) -> None:
        r.released = True
        self._playback.pop(r.id, None)

    def _cancel(self, r: Response, reason: str) -> None:
        """The cancelled fan-out (§4.2): full text in transcript/content_part.done, the
        item cut at the acknowledged position; epoch + 1 before anything else can run."""
        cancelled_epoch = r.epoch
        self.epoch += 1
        self._finish(r, "cancelled")
        if not r.announced:
            self._announce(r, content=[])
        self._final_parts(r)
        committed = min(r.ledger.committed_ms, r.ledger.generated_ms)
        item = self._item_done(
            r, "cancelled", cut_transcript(r.emitted_text, committed, r.ledger.generated_ms)
        )
        self._ev(
            "response.done",
            response={
                "id": r.id,
                "object": "realtime.response",
                "status": "cancelled",
                "status_details": {"type": "cancelled", "reason": reason},
                "output": [item],
                "metadata": {
                    "type": "audio.cancelled",
                    "session_id": self.id,
                    "response_id": r.id,
                    "reason": reason,
                    "cancelled_epoch": cancelled_epoch,
                    "epoch": self.epoch,
                    "committed_ms": committed,
                    "playback": r.ledger.as_dict(),
                },
            },
            response_id=r.id,
        )
        self._ev("rate_limits.updated", rate_limits=[])
        self._release(r)
        if r.ledger.committed_ms < r.ledger.sent_ms:
            self._cancelled_playback[r.id] = r
        self._deferred.clear()
        self.turn_state = "idle"

    def _fail(self, r: Response, code: str) -> None:
        """A failed response: an error, then response.done status failed (§4.2)."""
        self._finish(r, "failed")
        if code == "internal_error":
            self._err(code, "response generation failed")
        if not r.announced:
            self._announce(r, content=[])
        item = self._assistant_item(r, "failed", [])
        self._ev(
            "response.done",
            response={
                "id": r.id,
                "object": "realtime.response",
                "status": "failed",
                "status_details": {"type": "failed", "reason": code},
                "output": [item],
                "metadata": {
                    "type": "response.done",
                    "session_id": self.id,
                    "response_id": r.id,
                    "epoch": r.epoch,
                    "status": "failed",
                    "committed": False,
                    "playback": r.ledger.as_dict(),
                },
            },
            response_id=r.id,
        )
        self._ev("rate_limits.updated", rate_limits=[])
        self._release(r)
        self.turn_state = "idle"

    def _cut_playback(self, r: Response, *, bump: bool) -> None:
        """Truncate a completed reply's unacknowledged playback in history and release it."""
        committed = min(r.ledger.committed_ms, r.ledger.generated_ms)
        if r.item_id in self._items:
            part = {
                "type": "output_audio",
                "transcript": cut_transcript(r.emitted_text, committed, r.ledger.generated_ms),
                "audio_duration_ms": r.ledger.generated_ms,
            }
            self._items[r.item_id]["content"] = [part]
        self._release(r)
        if bump:
            self.epoch += 1

    def _barge_in_owned(self, reason: str) -> None:
        """Overlap barge-in: cancel the running reply, or cut unacknowledged playback."""
        self._deferred.clear()
        self._stop_what_plays(reason)
        self._close_gate_if_faulty()

    def _stop_what_plays(self, reason: str) -> bool:
        """Cancel the running reply; with none, cut every completed reply's unacknowledged
        playback and advance the epoch anyway. True when a reply was cancelled."""
        if self._active is not None:
            self._cancel(self._active, reason)
            return True
        for record in list(self._playback.values()):
            if not record.released:
                self._cut_playback(record, bump=False)
        self.epoch += 1
        return False

    def _close_gate_if_faulty(self) -> None:
        if self.config.fault("stuck-gate") is not None:
            self._gate_stuck = True

    def _on_response_cancel(self, cmd: translate.Command) -> None:
        rid = cmd.args["response_id"]
        if rid is not None:
            target = self._responses.get(rid)
            if target is None:
                if self._active is None:
                    return  # a name that matches nothing while idle: no reply at all (0.30.0)
                self._err("response_not_active", f"Response is not active: {rid}", cmd.event_id)
                return
        else:
            target = self._active or self._last_response
            if target is None:
                self._err(
                    "response_not_active",
                    "response.cancel requires an active response",
                    cmd.event_id,
                )
                return
        if target.finished:
            self._err(
                "response_not_active", f"Response is already complete: {target.id}", cmd.event_id
            )
            return
        self._pending_turns.clear()
        self._cancel(target, "client_cancelled")

    def _on_output_audio_buffer_clear(self, cmd: translate.Command) -> None:
        rid = cmd.args["response_id"]
        active = self._active
        if active is not None and rid in (None, active.id):
            self._ev("output_audio_buffer.cleared", response_id=active.id)
            self._cancel(active, "output_audio_buffer_clear")
            return
        target = self._responses.get(rid) if rid is not None else self._last_response
        if target is not None and target.finished and not target.released:
            self._ev("output_audio_buffer.cleared", response_id=target.id)
            self._cut_playback(target, bump=True)
            return
        shown = (
            rid if rid is not None else (self._last_response.id if self._last_response else None)
        )
        self._ev("output_audio_buffer.cleared", response_id=shown)

    def _on_turn_signal(self, cmd: translate.Command) -> None:
        name = cmd.args["event"]
        self.turn_state = _TURN_EVENT_STATES.get(name, self.turn_state)
        self._ev(
            "turn.event",
            session_id=self.id,
            event=name,
            turn_state=self.turn_state,
            epoch=self.epoch,
        )

    # --- playback ------------------------------------------------------------------------

    def _on_playback_ack(self, cmd: translate.Command) -> None:
        a = cmd.args
        rid, item_id = a["response_id"], a["item_id"]
        if rid is not None and item_id is not None and item_id != ids.assistant_item_id(rid):
            self._err(
                "playback_item_mismatch", f"playback.ack item_id {item_id} does not belong to {rid}"
            )
            return
        if rid is None and item_id is not None:
            rid = item_id[5:] if item_id.startswith("item_") else item_id
        if rid is None:
            open_records = [r for r in self._playback.values() if not r.released]
            if len(open_records) != 1:
                self._err(
                    "playback_item_not_found", "No single assistant response is pending playback."
                )
                return
            rid = open_records[0].id
        record = self._addressable(rid)
        if record is None:
            self._err(
                "playback_item_not_found", f"No assistant response item is registered for {rid}."
            )
            return
        if rid in self._cancelled_playback:
            self._ack_cancelled(record, a["played_ms"], a["committed_ms"])
            return
        if record.superseded:
            self._err(
                "playback_ack_too_late", f"A later user input was already committed after {rid}."
            )
            return
        ledger = record.ledger
        ledger.played_ms = max(ledger.played_ms, a["played_ms"])
        ledger.committed_ms = max(ledger.committed_ms, a["committed_ms"])
        done = record.finished and ledger.committed_ms >= ledger.sent_ms
        if done:
            self._release(record)
            if self._active is None and self.turn_state == "assistant_playing":
                self.turn_state = "idle"
        self._acknowledged(record, truncate=False, history_committed=done)

    def _addressable(self, rid: str) -> Response | None:
        """The playback record an ack or truncate may name: an unreleased reply, or a
        cancelled one whose audio was not fully acknowledged."""
        record = self._playback.get(rid)
        if record is not None and not record.released:
            return record
        return self._cancelled_playback.get(rid)

    def _ack_cancelled(self, r: Response, played_ms: float, committed_ms: float) -> None:
        """A plain ack for a cancelled reply: monotonic, and the record goes once everything
        sent is acknowledged. It never touches the turn (the reply no longer owns it)."""
        ledger = r.ledger
        ledger.played_ms = max(ledger.played_ms, played_ms)
        ledger.committed_ms = max(ledger.committed_ms, committed_ms)
        done = ledger.committed_ms >= ledger.sent_ms
        if done:
            self._cancelled_playback.pop(r.id, None)
        self._acknowledged(r, truncate=False, history_committed=done)

    def _acknowledged(self, r: Response, *, truncate: bool, history_committed: bool) -> None:
        ledger = r.ledger
        self._ev(
            "playback.acknowledged",
            event={
                "type": "playback.acknowledged",
                "session_id": self.id,
                "epoch": self.epoch,
                "item_id": r.item_id,
                "played_ms": ledger.played_ms,
                "committed_ms": ledger.committed_ms,
                "truncate": truncate,
                "playback": ledger.as_dict(),
                "history_committed": history_committed,
            },
        )


def _decided(stop: VadEvent) -> float:
    """Where server VAD reports a stop: the position at which it decided (vLLM-Omni 0.30.0
    reports ``audio_end_ms`` ≈ speech end + silence duration, e.g. 5216 for hello_16k.wav
    with 800 ms), not the end of the last loud frame."""
    return stop.decided_ms if stop.decided_ms is not None else stop.ms
