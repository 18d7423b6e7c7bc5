"""Replies: ``response.create``, generation, and the three terminal fan-outs (completed,
cancelled, failed) of docs/protocol.md §4.2.

Output generation runs in one task per reply. Every await in it is followed by an epoch
check before anything is emitted: once a reply's terminal event has gone out, nothing of its
epoch follows (§3.4, §6.4) — the cancellation is atomic at the session, not at the task.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from typing import Any

from duplexctl.protocol import ids, names
from duplexctl.server.behaviour import BACKCHANNEL_MS
from duplexctl.server.engine.context import SessionContext
from duplexctl.server.engine.conversation import Conversation
from duplexctl.server.engine.playback import PlaybackLedger, cut_transcript
from duplexctl.server.engine.records import Response, ResponseRecords
from duplexctl.server.engine.turns import Turn, TurnQueue
from duplexctl.server.model import SimulatedGpu, SimulatedModel, encode_chunk, reply_text, tone
from duplexctl.server.session_object import ACK_ONLY
from duplexctl.server.translate import Command

log = logging.getLogger("duplexctl.server.session")

_FORBIDDEN_OPTIONS_MESSAGE = (
    "The selected native duplex runtime does not support generation overrides for "
    "instructions, voice, temperature, max tokens, tools, or tool_choice."
)


class Responses:
    """Starts replies, streams them, and ends them with exactly one terminal fan-out."""

    def __init__(
        self,
        ctx: SessionContext,
        *,
        records: ResponseRecords,
        turns: TurnQueue,
        conversation: Conversation,
        playback: PlaybackLedger,
        model: SimulatedModel,
        gpu: SimulatedGpu,
    ) -> None:
        self._ctx = ctx
        self.records = records
        self._turns = turns
        self._conversation = conversation
        self._playback = playback
        self._model = model
        self._gpu = gpu
        self.gate_stuck = False  # fault stuck-gate: after a barge-in, turns go unanswered

    @property
    def active(self) -> Response | None:
        return self.records.active

    def owns_turn(self) -> bool:
        """The model owns the turn: a reply runs, or (ack_only) its audio is unacknowledged."""
        if self.records.active is not None:
            return True
        if self._ctx.settings.playback_commit_policy == ACK_ONLY:
            return self._playback.unheard()
        return False

    # --- response.create ----------------------------------------------------------------------

    def on_create(self, cmd: Command) -> None:
        ctx = self._ctx
        a = cmd.args
        if a["forbidden"]:
            ctx.err("unsupported_native_response_options", _FORBIDDEN_OPTIONS_MESSAGE, cmd.event_id)
            return
        if self.records.active is not None:
            if a["has_options"]:
                ctx.err(
                    "response_already_active",
                    "response.create cannot reserve options while another response is active.",
                    cmd.event_id,
                )
            else:
                ctx.err("response_already_active", "A duplex response is already active.")
            return
        options = {
            "output_format": a["output_format"],
            "metadata": a["metadata"],
            "conversation": a["conversation"],
        }
        turns = self._turns
        if turns.pending:
            self.start(turns.pending.pop(0), options=options)
        elif turns.text_item is not None:
            if not ctx.capabilities.get("supports_text_only_turn"):
                ctx.err(
                    "text_only_turn_unsupported",
                    "This duplex model cannot answer a text-only turn.",
                )
                return
            item_id, turns.text_item = turns.text_item, None
            self.start(Turn(item_id, None), options=options)
        else:
            ctx.err(
                "response_create_without_input",
                "Duplex response.create requires committed audio to answer.",
            )

    # --- start ------------------------------------------------------------------------------

    def start(
        self, turn: Turn, *, promoted: bool = False, options: dict[str, Any] | None = None
    ) -> None:
        """Submit a turn to the model; the start fan-out goes out now (or, for a promoted
        deferred turn, together with its first output, as 0.30.0 does)."""
        if self.gate_stuck:
            return  # fault stuck-gate: committed, never answered
        ctx = self._ctx
        options = options or {}
        self._turns.text_item = None
        response = Response(
            id=ids.response_id(ctx.id, ctx.epoch),
            epoch=ctx.epoch,
            turn_id=ctx.turn_id,
            previous_item_id=self._conversation.last_item_id,
            output_format=options.get("output_format") or ctx.settings.output_format,
            output_rate=ctx.settings.output_rate,
            metadata=options.get("metadata"),
            promoted=promoted,
            in_history=options.get("conversation") != "none",
        )
        response.text = reply_text(ctx.turn_id, ctx.epoch)
        self.records.add(response)
        self._playback.track(response)
        ctx.turn.observe("response_started")
        if response.in_history:
            self._conversation.store(
                assistant_item(response, "in_progress", []), response.previous_item_id
            )
        if not promoted:
            self._announce(response, content=[])
        task = asyncio.get_running_loop().create_task(self._generate(response, turn))
        response.task = task
        task.add_done_callback(_forget_task(response))

    def open_stream(self, *, output_format: str, output_rate: int) -> Response:
        """A reply with no generation task of its own: the frame-locked lane streams it,
        packet by packet (``frame_lane.py``). Its start fan-out goes out now."""
        ctx = self._ctx
        response = Response(
            id=ids.response_id(ctx.id, ctx.epoch),
            epoch=ctx.epoch,
            turn_id=ctx.turn_id,
            previous_item_id=self._conversation.last_item_id,
            output_format=output_format,
            output_rate=output_rate,
        )
        self.records.add(response)
        self._playback.track(response)
        # running on the model from now until it finishes, as a generated reply is from its
        # submission: the /metrics gauges count it (server/metrics.py)
        response.counted = True
        self._gpu.replies += 1
        ctx.turn.observe("response_started")
        self._conversation.store(
            assistant_item(response, "in_progress", []), response.previous_item_id
        )
        self._announce(response, content=[])
        return response

    def _announce(self, r: Response, *, content: list[dict[str, Any]]) -> None:
        ctx = self._ctx
        r.announced = True
        duplex_event = {
            "type": "response.created",
            "session_id": ctx.id,
            "response_id": r.id,
            "epoch": r.epoch,
            "modalities": list(ctx.settings.modalities),
        }
        metadata = {**(r.metadata or {}), "duplex_event": duplex_event}
        ctx.ev(
            "response.created",
            response={
                "id": r.id,
                "object": "realtime.response",
                "status": "in_progress",
                "status_details": None,
                "output": [],
                "modalities": list(ctx.settings.modalities),
                "metadata": metadata,
            },
            response_id=r.id,
        )
        item = assistant_item(r, "in_progress", content)
        ctx.ev(
            "conversation.item.added", previous_item_id=r.previous_item_id, item=copy.deepcopy(item)
        )
        ctx.ev(
            "conversation.item.created",
            previous_item_id=r.previous_item_id,
            item=copy.deepcopy(item),
        )
        ctx.ev(
            "response.output_item.added", response_id=r.id, output_index=0, item=copy.deepcopy(item)
        )
        ctx.ev(
            "response.content_part.added",
            response_id=r.id,
            item_id=r.item_id,
            output_index=0,
            content_index=0,
            part={"type": "audio", "transcript": ""},
        )

    # --- generation -------------------------------------------------------------------------

    def _live(self, r: Response) -> bool:
        ctx = self._ctx
        return not r.finished and not ctx.closed and r.epoch == ctx.epoch

    async def _generate(self, r: Response, turn: Turn) -> None:
        """Stream the reply; every emission is fenced by the response's epoch."""
        ctx = self._ctx
        try:
            audio = (
                tone(BACKCHANNEL_MS / 1000.0)
                if turn.backchannel
                else self._model.reply_audio(turn.audio)
            )
            native = ctx.config.model_profile == "native"
            speak_meta = {"session_id": ctx.id, "epoch": r.epoch, "model_speak": True}
            stream = self._model.stream(
                audio,
                self._gpu,
                submitted_at=time.monotonic(),
                first_audio_at=(
                    time.monotonic() if turn.backchannel else ctx.behaviour.first_audio_at()
                ),
            )
            n_units = max(1, -(-audio.size // max(1, int(24000 * ctx.config.chunk_ms / 1000))))
            async for chunk in stream:
                if not self._live(r):
                    return
                ctx.last_activity = time.monotonic()
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
                        ctx.ev("response.speak", **part_ids(r), metadata=dict(speak_meta))
                        if not native:
                            self._text_delta(r, r.text, speak_meta)
                    elif native:
                        ctx.ev("response.speak", **part_ids(r), metadata=dict(speak_meta))
                    else:
                        self._text_delta(r, r.text, speak_meta)
                        ctx.ev("response.speak", **part_ids(r), metadata=dict(speak_meta))
                    ctx.output_started = True
                r.ledger.generated_ms = r.ledger.sent_ms = chunk.end_ms
                r.chunks += 1
                r.last_b64 = b64
                ctx.ev(
                    names.AUDIO_DELTA,
                    **part_ids(r),
                    delta=b64,
                    format=fmt,
                    sample_rate_hz=rate,
                    metadata={
                        "session_id": ctx.id,
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
                ctx.ev(names.TRANSCRIPT_DELTA, **part_ids(r), delta=piece)
            if self._live(r):
                self.complete(r)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("response generation failed")
            if self._live(r):
                self.fail(r, "internal_error")

    def _text_delta(self, r: Response, text: str, meta: dict[str, Any]) -> None:
        r.emitted_text += text
        self._ctx.ev(names.TRANSCRIPT_DELTA, **part_ids(r), delta=text, metadata=dict(meta))

    # --- terminal fan-outs --------------------------------------------------------------------

    def _final_parts(self, r: Response) -> None:
        """output_audio.done / transcript.done / content_part.done (full transcript)."""
        ctx = self._ctx
        if r.chunks:
            ctx.ev(names.AUDIO_DONE, **part_ids(r))
        if r.emitted_text:
            ctx.ev(names.TRANSCRIPT_DONE, **part_ids(r), transcript=r.emitted_text)
        ctx.ev(
            "response.content_part.done",
            **part_ids(r),
            part={"type": "audio", "transcript": r.emitted_text},
        )

    def _item_done(self, r: Response, status: str, transcript: str) -> dict[str, Any]:
        ctx = self._ctx
        content = [
            {
                "type": "output_audio",
                "transcript": transcript,
                "audio_duration_ms": r.ledger.generated_ms,
            }
        ]
        item = assistant_item(r, status, content)
        if r.in_history and self._conversation.get(r.item_id) is not None:
            self._conversation.items[r.item_id] = copy.deepcopy(item)
        ctx.ev(
            "response.output_item.done", response_id=r.id, output_index=0, item=copy.deepcopy(item)
        )
        ctx.ev(
            "conversation.item.done", previous_item_id=r.previous_item_id, item=copy.deepcopy(item)
        )
        return item

    def _uncount(self, r: Response) -> None:
        if r.counted:
            r.counted = False
            self._gpu.replies -= 1

    def _finish(self, r: Response, status: str) -> None:
        r.finished = True
        r.status = status
        self._uncount(r)
        if self.records.active is r:
            self.records.active = None
        if r.task is not None and r.task is not asyncio.current_task() and not r.task.done():
            r.task.cancel()

    def complete(self, r: Response) -> None:
        """Natural end of turn (or the native model yielding to the user)."""
        ctx = self._ctx
        self._finish(r, "completed")
        self._final_parts(r)
        item = self._item_done(r, "completed", r.emitted_text)
        metadata = {
            "type": names.AUDIO_DELTA,
            "session_id": ctx.id,
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
        self._done(r, "completed", "stop", item, metadata)
        ctx.turn_id += 1
        if r.ledger.sent_ms == 0 or r.ledger.committed_ms >= r.ledger.sent_ms:
            self._playback.release(r)
        ctx.turn.observe("response_done_heard" if r.released else "response_done_unheard")
        if self._turns.deferred and self.records.active is None:
            self.start(self._turns.deferred.pop(0), promoted=True)

    def cancel(self, r: Response, reason: str) -> None:
        """The cancelled fan-out (§4.2): full text in transcript/content_part.done, the
        item cut at the acknowledged position; epoch + 1 before anything else can run."""
        ctx = self._ctx
        cancelled_epoch = r.epoch
        ctx.epoch += 1
        self._finish(r, "cancelled")
        if not r.announced:
            self._announce(r, content=[])
        self._final_parts(r)
        committed = min(r.ledger.committed_ms, r.ledger.generated_ms)
        item = self._item_done(
            r, "cancelled", cut_transcript(r.emitted_text, committed, r.ledger.generated_ms)
        )
        metadata = {
            "type": "audio.cancelled",
            "session_id": ctx.id,
            "response_id": r.id,
            "reason": reason,
            "cancelled_epoch": cancelled_epoch,
            "epoch": ctx.epoch,
            "committed_ms": committed,
            "playback": r.ledger.as_dict(),
        }
        self._done(r, "cancelled", reason, item, metadata)
        self._playback.release(r)
        self._playback.keep_cancelled(r)
        self._turns.deferred.clear()
        ctx.turn.observe("response_cancelled")

    def fail(self, r: Response, code: str) -> None:
        """A failed reply: an error, then response.done status failed (§4.2)."""
        ctx = self._ctx
        self._finish(r, "failed")
        if code == "internal_error":
            ctx.err(code, "response generation failed")
        if not r.announced:
            self._announce(r, content=[])
        metadata = {
            "type": "response.done",
            "session_id": ctx.id,
            "response_id": r.id,
            "epoch": r.epoch,
            "status": "failed",
            "committed": False,
            "playback": r.ledger.as_dict(),
        }
        self._done(r, "failed", code, assistant_item(r, "failed", []), metadata)
        self._playback.release(r)
        ctx.turn.observe("response_failed")

    def _done(
        self,
        r: Response,
        status: str,
        reason: str,
        item: dict[str, Any],
        metadata: dict[str, Any],
    ) -> None:
        """``response.done`` then ``rate_limits.updated``: the last two events of a reply."""
        self._ctx.ev(
            "response.done",
            response={
                "id": r.id,
                "object": "realtime.response",
                "status": status,
                "status_details": {"type": status, "reason": reason},
                "output": [item],
                "metadata": metadata,
            },
            response_id=r.id,
        )
        r.last_b64 = ""  # repeated in a completed reply's metadata above; never read again
        self._ctx.ev("rate_limits.updated", rate_limits=[])

    def stop_all(self) -> None:
        """The session ends: every reply is finished without a terminal event."""
        for r in list(self.records.by_id.values()):
            r.finished = True
            self._uncount(r)
            if r.task is not None and not r.task.done():
                r.task.cancel()
        self.records.active = None


def assistant_item(r: Response, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": r.item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def part_ids(r: Response) -> dict[str, Any]:
    return {"response_id": r.id, "item_id": r.item_id, "output_index": 0, "content_index": 0}


def _forget_task(r: Response) -> Any:
    """A done callback that drops the reply's reference to its finished task, so the pair
    is freed by reference counting (a cancelled task's traceback refers back to the reply)."""

    def forget(task: asyncio.Task[None]) -> None:
        if r.task is task:
            r.task = None

    return forget
