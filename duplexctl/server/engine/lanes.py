"""What one decoded append means, in each operating lane (docs/protocol.md §6.1-§6.3).

* The turn lane (commit or server VAD decides when a turn ends): speech is buffered, silence
  answered by ``response.listen``; while a reply owns the turn every append gets one
  ``overlap.decision`` — listen, drop or barge in — by the client's hints, server VAD or the
  session's overlap policy.
* The model-native lane (``auto_response``): the simulated MiniCPM-o hears the input in 1 s
  units and decides per unit to listen, speak, or yield to the user.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

import numpy as np

from duplexctl.audio import pcm
from duplexctl.audio.vad import VadEvent
from duplexctl.server.engine.context import SessionContext
from duplexctl.server.engine.interruptions import Interruptions
from duplexctl.server.engine.records import Response
from duplexctl.server.engine.responses import Responses
from duplexctl.server.engine.turns import Turn, TurnQueue
from duplexctl.server.engine.utterance import Utterance
from duplexctl.server.model import SimulatedGpu
from duplexctl.server.session_object import BARGE_IN_ON_SPEECH
from duplexctl.server.vadgate import VadVerdict

FIRST_UNIT_SAMPLES: Final = 16480  # MiniCPM-o: the first 1 s unit closes after ≈1030 ms
UNIT_SAMPLES: Final = 16000


def decided(stop: VadEvent) -> float:
    """Where server VAD reports a stop: the position at which it decided (vLLM-Omni 0.30.0
    reports ``audio_end_ms`` ≈ speech end + silence duration, e.g. 5216 for hello_16k.wav
    with 800 ms), not the end of the last loud frame."""
    return stop.decided_ms if stop.decided_ms is not None else stop.ms


class Overlap:
    """``overlap.decision`` events, and the speech heard over a reply while it owns the turn."""

    def __init__(
        self, ctx: SessionContext, interruptions: Interruptions, gpu: SimulatedGpu
    ) -> None:
        self._ctx = ctx
        self._interruptions = interruptions
        self._gpu = gpu
        self._stopping: set[asyncio.Task[None]] = set()  # noticing units in flight
        self._noticing: tuple[int, int] | None = None  # (epoch, turn) a unit is noticing
        self.speech_ms = 0.0

    def speechy(self, raw: np.ndarray, hints: dict[str, Any], verdict: VadVerdict | None) -> bool:
        """The append counts as speech: the client's hint, else server VAD, else its RMS."""
        if hints.get("is_speech") is not None:
            return bool(hints["is_speech"])
        if verdict is not None:
            return verdict.is_speech
        return pcm.rms(raw) >= self._ctx.settings.overlap_silence_rms

    def decide(
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
        ctx = self._ctx
        if speech:
            self.speech_ms += duration_ms
        policy = ctx.settings.overlap_policy
        meta: dict[str, Any] = {
            "type": "overlap.decision",
            "session_id": ctx.id,
            "epoch": ctx.epoch,
            "policy": policy,
            "action": action,
            "reason": reason,
        }
        if cancel_reason is not None:
            meta["cancel_reason"] = cancel_reason
        meta["duration_ms"] = round(duration_ms)
        meta["overlap_speech_ms"] = round(self.speech_ms)
        meta["buffer_audio"] = buffer_audio
        if defer:
            meta["defer_runtime_append"] = True
        ctx.ev(
            "overlap.decision",
            session_id=ctx.id,
            epoch=ctx.epoch,
            policy=policy,
            action=action,
            reason=reason,
            metadata=meta,
        )

    def vad_barge_in(self, duration_ms: float, onset_ms: float | None = None) -> None:
        """Server VAD heard an onset over an answer that owns the turn: announce the barge-in
        decision and cancel the answer with reason ``turn_detected`` (both lanes, §6.3).
        With the ``stop-latency-ms`` behaviour the model keeps speaking until that long
        after the onset (``onset_ms`` on the input clock) and is cut then, if the answer it
        interrupted is still running (same epoch, no answer completed since: a later answer
        is never cut for an earlier onset). Noticing and stopping is one unit on the
        simulated GPU timed to finish at that instant (``SimulatedGpu.finish_by``): when the
        batch slots are saturated it waits for one, and the model keeps speaking longer;
        one unit per interrupted answer (the user's further onsets over it add none)."""
        ctx = self._ctx
        cut_at = ctx.behaviour.cut_at(onset_ms) if onset_ms is not None else None
        gpu = self._gpu
        if cut_at is None or (cut_at <= time.monotonic() and gpu.unit_compute_ms <= 0):
            self._barge_in_now(duration_ms)
            return
        epoch, turn_id = ctx.epoch, ctx.turn_id
        if self._noticing == (epoch, turn_id):
            return  # the answer is already being stopped: later onsets change nothing
        self._noticing = (epoch, turn_id)

        async def notice_and_stop() -> None:
            await gpu.finish_by(cut_at)
            self._noticing = None
            if not ctx.closed and ctx.epoch == epoch and ctx.turn_id == turn_id:
                self._barge_in_now(duration_ms)

        task = asyncio.get_running_loop().create_task(notice_and_stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def stop_all(self) -> None:
        """The session is over: noticing units still waiting give their slot back."""
        for task in list(self._stopping):
            task.cancel()

    def _barge_in_now(self, duration_ms: float) -> None:
        self.decide(
            "barge_in",
            "server_vad_speech_started",
            duration_ms,
            True,
            buffer_audio=True,
            cancel_reason="turn_detected",
        )
        self._interruptions.barge_in("turn_detected")


class _Lane:
    """What both lanes act on: the utterance, overlap decisions, replies, interruptions."""

    def __init__(
        self,
        ctx: SessionContext,
        *,
        utterance: Utterance,
        overlap: Overlap,
        responses: Responses,
        interruptions: Interruptions,
    ) -> None:
        self._ctx = ctx
        self._utterance = utterance
        self._overlap = overlap
        self._responses = responses
        self._interruptions = interruptions


class TurnLane(_Lane):
    """Turn lane: buffer speech, beat on silence, overlap policy while the model talks."""

    def __init__(self, ctx: SessionContext, *, turns: TurnQueue, **parts: Any) -> None:
        super().__init__(ctx, **parts)
        self._turns = turns

    def append(
        self, raw: np.ndarray, samples: np.ndarray, hints: dict[str, Any], duration_ms: float
    ) -> None:
        utterance = self._utterance
        vad = utterance.vad
        verdict = vad.feed(samples) if vad is not None else None
        behaviour = self._ctx.behaviour
        position_ms = behaviour.heard(time.monotonic(), samples.size)
        if verdict is not None and verdict.is_speech and vad is not None:
            behaviour.speech_ended(vad.speech_end_ms)
        if self._responses.owns_turn():
            self._over_reply(raw, samples, hints, verdict, duration_ms)
            return
        self._overlap.speech_ms = 0.0
        if verdict is not None and vad is not None:
            if verdict.started is not None:
                utterance.start(verdict.started.ms)
            if verdict.is_speech and utterance.item_id is not None:
                utterance.keep(samples)
                if verdict.stopped is not None:
                    self._vad_commit(decided(verdict.stopped))
                elif behaviour.takes_over(vad.speech_end_ms, position_ms):
                    self._vad_commit(vad.speech_end_ms)  # the model takes the turn: a pause
                elif position_ms - vad.speech_end_ms < 40 and behaviour.backchannels(duration_ms):
                    self._responses.start(  # "mm-hm" while the user still speaks
                        Turn(None, None, backchannel=True),
                        options={"metadata": {"backchannel": True}, "conversation": "none"},
                    )
                return
            utterance.silence_since_commit = True
            self._ctx.listen("silence_or_noise")
            return
        if not self._overlap.speechy(raw, hints, None):
            utterance.silence_since_commit = True
            self._ctx.listen("silence_or_noise")
            return
        if utterance.item_id is None:
            utterance.start_at_hint(hints)
        utterance.keep(samples)

    def _over_reply(
        self,
        raw: np.ndarray,
        samples: np.ndarray,
        hints: dict[str, Any],
        verdict: VadVerdict | None,
        duration_ms: float,
    ) -> None:
        """§6.3, turn lane: one overlap.decision per append while the model owns the turn."""
        overlap = self._overlap
        utterance = self._utterance
        speech = overlap.speechy(raw, hints, verdict)
        forced = hints.get("overlap_action")
        if hints.get("force_barge_in") or forced == "barge_in":
            reason = (
                "client_force_barge_in" if hints.get("force_barge_in") else "client_overlap_action"
            )
            overlap.decide(
                "barge_in", reason, duration_ms, speech, buffer_audio=True, cancel_reason="barge_in"
            )
            self._interruptions.barge_in("barge_in")
            self._keep_interruption(samples, hints)
            return
        if hints.get("force_listen") or forced == "listen":
            reason = "client_force_listen" if hints.get("force_listen") else "client_overlap_action"
            overlap.decide("listen", reason, duration_ms, speech, buffer_audio=speech)
            if speech:
                self._keep_interruption(samples, hints)
            return
        if forced == "drop":
            overlap.decide("drop", "client_overlap_action", duration_ms, speech, buffer_audio=False)
            return
        if verdict is not None:
            if verdict.started is not None:
                utterance.start(verdict.started.ms)
                overlap.vad_barge_in(duration_ms, verdict.started.onset_ms)
                utterance.keep(samples)
                if verdict.stopped is not None:
                    self._vad_commit(decided(verdict.stopped))
                return
            if verdict.is_speech and utterance.item_id is not None:
                overlap.decide(
                    "listen", "server_vad_utterance_active", duration_ms, True, buffer_audio=True
                )
                utterance.keep(samples)
                if verdict.stopped is not None:
                    self._vad_commit(decided(verdict.stopped))
                return
            overlap.decide("drop", "silence_or_noise", duration_ms, False, buffer_audio=False)
            return
        if not speech:
            overlap.decide("drop", "silence_or_noise", duration_ms, False, buffer_audio=False)
            return
        if self._ctx.settings.overlap_policy == BARGE_IN_ON_SPEECH:
            overlap.decide(
                "barge_in",
                "policy_barge_in_on_speech",
                duration_ms,
                True,
                buffer_audio=True,
                cancel_reason="barge_in",
            )
            self._interruptions.barge_in("barge_in")
            self._keep_interruption(samples, hints)
            return
        if utterance.item_id is None:
            utterance.start_at_hint(hints)
        overlap.decide(
            "listen", "policy_listen_only", duration_ms, True, buffer_audio=True, defer=True
        )
        utterance.keep(samples)

    def _keep_interruption(self, samples: np.ndarray, hints: dict[str, Any]) -> None:
        if self._utterance.item_id is None:
            self._utterance.start_at_hint(hints)
        self._utterance.keep(samples)

    def _vad_commit(self, audio_end_ms: float) -> None:
        """Server VAD ended an utterance: speech_stopped, auto-commit, response."""
        deferred = self._responses.owns_turn()
        respond = bool((self._ctx.settings.turn_detection or {}).get("create_response", True))
        turn = self._utterance.commit(
            audio_end_ms=audio_end_ms, deferred=deferred, response_create=respond
        )
        self.submit(turn, deferred=deferred, respond=respond)

    def submit(self, turn: Turn, *, deferred: bool, respond: bool) -> None:
        """A sealed turn: deferred behind the reply that owns the turn, answered now, or
        left pending for response.create."""
        if deferred:
            self._turns.deferred.append(turn)
        elif respond:
            self._responses.start(turn)
        else:
            self._turns.pending.append(turn)


class NativeLane(_Lane):
    """Model-native lane: speech events, VAD barge-in, then 1 s model units."""

    def __init__(self, ctx: SessionContext, **parts: Any) -> None:
        super().__init__(ctx, **parts)
        self._unit_fill = 0
        self._unit_target = FIRST_UNIT_SAMPLES
        self._unit_speech = False
        self._heard_speech = False  # the user spoke since the model last answered
        self._silent_units = 0

    def forget_speech(self) -> None:
        """A commit sealed what was heard: the model waits for new speech."""
        self._heard_speech, self._silent_units = False, 0

    def append(
        self, raw: np.ndarray, samples: np.ndarray, hints: dict[str, Any], duration_ms: float
    ) -> Response | None:
        """Feed one append; returns the reply it made the model start, if any."""
        utterance = self._utterance
        overlap = self._overlap
        before = self._responses.active
        verdict = utterance.vad.feed(samples) if utterance.vad is not None else None
        speech = overlap.speechy(raw, hints, verdict)
        owned = (
            self._responses.owns_turn() and self._ctx.settings.overlap_policy == BARGE_IN_ON_SPEECH
        )
        if verdict is not None:
            if verdict.started is not None:
                utterance.start(verdict.started.ms)
                if owned:
                    overlap.vad_barge_in(duration_ms)
                    owned = False
            if verdict.stopped is not None:
                utterance.stop(decided(verdict.stopped))
        elif speech and utterance.item_id is None and self._responses.active is None:
            utterance.start_at_hint(hints)
        if owned:
            if hints.get("force_barge_in") or hints.get("overlap_action") == "barge_in":
                overlap.decide(
                    "barge_in",
                    "client_force_barge_in",
                    duration_ms,
                    speech,
                    buffer_audio=True,
                    cancel_reason="barge_in",
                )
                self._interruptions.barge_in("barge_in")
            else:
                overlap.decide(
                    "listen", "auto_response_continuous", duration_ms, speech, buffer_audio=True
                )
        if speech:
            utterance.keep(samples)
        self._unit_speech = self._unit_speech or speech
        self._unit_fill += samples.size
        while self._unit_fill >= self._unit_target:
            self._unit_fill -= self._unit_target
            self._unit_target = UNIT_SAMPLES
            unit_speech = self._unit_speech
            self._unit_speech = speech and self._unit_fill > 0
            self._model_unit(unit_speech)
        created = self._responses.active
        return created if created is not None and created is not before else None

    def _model_unit(self, has_speech: bool) -> None:
        """The simulated MiniCPM-o decides per 1 s unit: listen, speak, or yield."""
        ctx = self._ctx
        active = self._responses.active
        if active is not None:
            if has_speech and self._utterance.vad is None:
                # the user talks over the answer: the model stops; the reply ends completed
                self._responses.complete(active)
                self._heard_speech, self._silent_units = True, 0
                ctx.listen("model_listen", model_listen=True)
            return
        if has_speech:
            self._heard_speech, self._silent_units = True, 0
            ctx.listen("model_listen", model_listen=True)
            return
        if self._heard_speech:
            self._silent_units += 1
            if self._silent_units >= max(1, ctx.config.silence_units):
                self._heard_speech, self._silent_units = False, 0
                item_id = self._utterance.item_id
                audio = self._utterance.take_audio()
                self._responses.start(Turn(item_id, audio))
                self._utterance.item_id = None
                return
        ctx.listen("model_listen", model_listen=True)
