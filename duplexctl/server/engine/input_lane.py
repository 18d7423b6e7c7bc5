"""The input lane: the client's input commands (docs/protocol.md §3.2).

An append is admitted against the pending-input budget (float32 at 16 kHz, §5), decoded,
resampled to 16 kHz and handed to the session's operating lane (lanes.TurnLane or
lanes.NativeLane). Commits seal the utterance into a turn; clear, ``input.cancel`` and
``barge_in`` drop it (the last two also cut what plays).
"""

from __future__ import annotations

from typing import Final

from duplexctl.audio import pcm
from duplexctl.audio.resample import StreamResampler
from duplexctl.server.engine.context import SessionContext
from duplexctl.server.engine.frame_lane import FrameLane
from duplexctl.server.engine.interruptions import Interruptions
from duplexctl.server.engine.lanes import NativeLane, TurnLane
from duplexctl.server.engine.records import Response
from duplexctl.server.engine.responses import Responses
from duplexctl.server.engine.turns import TurnQueue
from duplexctl.server.engine.utterance import Utterance
from duplexctl.server.translate import Command

INTERNAL_RATE: Final = 16000
MAX_RESAMPLERS: Final = 4


class InputLane:
    """Appends, commits, clears and cancels of the client's input."""

    def __init__(
        self,
        ctx: SessionContext,
        *,
        utterance: Utterance,
        turn_lane: TurnLane,
        native_lane: NativeLane,
        frame_lane: FrameLane | None,
        responses: Responses,
        interruptions: Interruptions,
        turns: TurnQueue,
    ) -> None:
        self._ctx = ctx
        self._utterance = utterance
        self._turn_lane = turn_lane
        self._native_lane = native_lane
        self._frame_lane = frame_lane  # the frame profile's lane (None: another profile)
        self._responses = responses
        self._interruptions = interruptions
        self._turns = turns
        self._resamplers: dict[tuple[str, int], StreamResampler] = {}
        self._appends = 0
        self.audio_seen = False  # any audio arrived (instructions are fixed now, native)

    def pending_bytes(self) -> int:
        return self._utterance.nbytes + self._turns.nbytes

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

    # --- input_audio_buffer.append ------------------------------------------------------------

    def on_append(self, cmd: Command) -> None:
        ctx = self._ctx
        a = cmd.args
        data: bytes = a["data"]
        fmt: str = a["format"]
        rate: int = a["rate"]
        self._appends += 1
        width = pcm.BYTES_PER_SAMPLE.get(fmt, 2)
        incoming = int(len(data) // width * INTERNAL_RATE / rate) * 4
        if self.pending_bytes() + incoming > ctx.config.max_pending_input_bytes:
            ctx.err(
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
        frames = self._frame_lane
        if frames is not None:
            why = frames.refusal(fmt, rate, len(data) // width)
            if why is not None:
                ctx.err("bad_event", why)
                return
        try:
            raw = pcm.decode(data, fmt)
        except pcm.AudioDecodeError:
            ctx.err("bad_audio", f"input_audio_buffer.append {fmt} audio could not be decoded")
            return
        samples = self._resampler(fmt, rate).process(raw)
        self.audio_seen = True
        duration_ms = 1000.0 * raw.size / rate
        if failing and (not ctx.native or frames is not None):
            self._append_failed(cmd, None)
            return
        if frames is not None:
            frames.append(raw, samples)
            return
        if ctx.native:
            created = self._native_lane.append(raw, samples, a["hints"], duration_ms)
            if failing or (created is not None and self._orphan_on_its_own()):
                self._append_failed(cmd, created)
            return
        self._turn_lane.append(raw, samples, a["hints"], duration_ms)

    def _append_fails(self) -> bool:
        fault = self._ctx.fault("fail-append-every")
        if fault is None or not fault.value or fault.value < 1:
            return False
        return self._appends % int(fault.value) == 0

    def _orphan_on_its_own(self) -> bool:
        """``orphan-response`` without ``fail-append-every``: the append on which the model
        decides to speak fails, so the bug is observable with the one fault alone (model-native
        lane only: in the turn lane responses come from commits, not appends)."""
        return (
            self._ctx.fault("orphan-response") is not None
            and self._ctx.fault("fail-append-every") is None
        )

    def _append_failed(self, cmd: Command, created: Response | None) -> None:
        """An injected runtime append failure (``fail-append-every``, or ``orphan-response``).

        By default a response created for the failed append is ended with a failed
        response.done so the next utterance can be answered; with ``orphan-response`` it
        is left open for ever (the server bug being simulated).
        """
        self._ctx.err(
            "runtime_append_failed",
            "runtime append failed (injected fault)",
            cmd.event_id,
            retryable=False,
        )
        if created is None or created.finished:
            return
        if self._ctx.fault("orphan-response") is not None:
            if created.task is not None:
                created.task.cancel()
            return
        self._responses.fail(created, "runtime_append_failed")

    # --- commit, clear, cancel ----------------------------------------------------------------

    def on_commit(self, cmd: Command) -> None:
        ctx = self._ctx
        a = cmd.args
        utterance = self._utterance
        if not a["is_speech"]:
            utterance.drop()
            utterance.commit_empty()
            return
        if not utterance.samples and utterance.item_id is None:
            if utterance.silence_since_commit:
                utterance.commit_empty()
                return
            ctx.err(
                "input_audio_buffer_empty",
                "input_audio_buffer.commit requires a non-empty input audio buffer",
                cmd.event_id,
            )
            return
        if len(self._turns) >= ctx.config.max_pending_turns:
            ctx.err("input_backpressure", "Duplex session has too many pending turns", cmd.event_id)
            return
        deferred = self._responses.owns_turn()
        if deferred and not ctx.native and self._responses.records.active is None:
            # the previous answer has ended but its audio is not all acknowledged: it still
            # owns the turn, and 0.30.0 keeps the audio spoken over it out of the input buffer,
            # so the commit finds it empty (wire/commit_at_drop.jsonl: a final playback.ack
            # lost at a drop; the same without a drop). Deferring it instead left it
            # unanswered for good, and later commits ended in input_backpressure.
            utterance.drop()
            ctx.err(
                "input_audio_buffer_empty",
                "input_audio_buffer.commit requires a non-empty input audio buffer",
                cmd.event_id,
            )
            return
        turn = utterance.commit(
            audio_end_ms=0, deferred=deferred, response_create=a["response_create"]
        )
        if self._frame_lane is not None:  # pads the pending partial frame: the model's turn
            self._frame_lane.commit()
            return
        if ctx.native:
            self._native_lane.forget_speech()
            if a["response_create"] and not deferred:
                self._responses.start(turn)
            return
        self._turn_lane.submit(turn, deferred=deferred, respond=a["response_create"])

    def on_clear(self, cmd: Command) -> None:
        self._utterance.drop()
        self._utterance.silence_since_commit = False
        self._ctx.ev("input_audio_buffer.cleared")

    def on_cancel(self, cmd: Command) -> None:
        self._interrupt("barge_in")

    def on_barge_in(self, cmd: Command) -> None:
        if not self._ctx.capabilities.get("supports_barge_in"):
            self._ctx.err("barge_in_unsupported", "This duplex model does not support barge_in")
            return
        self._interrupt("barge_in")

    def _interrupt(self, reason: str) -> None:
        """input.cancel / barge_in: drop input, cancel the reply, always advance the epoch."""
        self._utterance.drop()
        self._turns.clear()
        if not self._interruptions.stop_what_plays(reason):
            self._ctx.ev("input_audio_buffer.cleared")
        self._interruptions.close_gate_if_faulty()

    def on_text_append(self, cmd: Command) -> None:
        self._ctx.err(
            "native_text_append_unsupported",
            "input.text.append is not supported by this duplex runtime; "
            "send a conversation.item.create user text item instead",
            cmd.event_id,
        )
