"""EngineSession: one duplex session's meaning, behind the transport contract.

The transport owns sockets, journals and timers; this module owns everything a session
*means* (docs/architecture.md, "Contract between the server transport and the session
engine"). Client events are validated by :mod:`duplexctl.server.translate` in
:meth:`EngineSession.receive` (translator rejections are raised at once, for the transport
to send unsequenced) and then applied one at a time by a mailbox task, so every reply —
sequenced errors included — comes out through ``emit`` in arrival order (§6.9).

The work itself is done by the parts in :mod:`duplexctl.server.engine`, one job each: the
input lane (appends, server VAD, commits), the conversation items, replies and their
terminal fan-outs, the cancel family (epoch fencing) and the playback ledger. Each command
type goes to its part through one explicit table (:meth:`EngineSession._handlers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from duplexctl.protocol.errors import ProtocolError
from duplexctl.server import session_object, translate
from duplexctl.server.config import ServerConfig
from duplexctl.server.engine.context import Emit, SessionContext
from duplexctl.server.engine.conversation import Conversation
from duplexctl.server.engine.frame_lane import FrameLane
from duplexctl.server.engine.input_lane import InputLane
from duplexctl.server.engine.interruptions import Interruptions
from duplexctl.server.engine.lanes import NativeLane, Overlap, TurnLane
from duplexctl.server.engine.playback import PlaybackLedger, cut_transcript
from duplexctl.server.engine.records import ResponseRecords
from duplexctl.server.engine.responses import Responses
from duplexctl.server.engine.turns import TurnQueue
from duplexctl.server.engine.utterance import Utterance
from duplexctl.server.model import SimulatedGpu, SimulatedModel
from duplexctl.server.session_object import NegotiatedSettings

__all__ = ["Emit", "EngineSession", "cut_transcript", "validate_open"]

log = logging.getLogger(__name__)

Handler = Callable[[translate.Command], Awaitable[None] | None]


def validate_open(session_obj: dict[str, Any] | None, config: ServerConfig) -> None:
    """Check an opening session object; raises the unsequenced open-time ProtocolError."""
    session_object.parse_open(session_obj, config)


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
        settings = session_object.parse_open(session_obj, config)
        self.capabilities: dict[str, Any] = session_object.capabilities(config)
        self.receive_timeout_s: float = settings.idle_timeout_s
        ctx = SessionContext(
            session_id=session_id,
            config=config,
            settings=settings,
            capabilities=self.capabilities,
            emit=emit,
        )
        self._ctx = ctx
        turns = TurnQueue()
        records = ResponseRecords()
        self._conversation = Conversation(ctx, turns)
        self._playback = PlaybackLedger(ctx, self._conversation, records)
        self._responses = Responses(
            ctx,
            records=records,
            turns=turns,
            conversation=self._conversation,
            playback=self._playback,
            model=SimulatedModel(config),
            gpu=gpu,
        )
        self._interruptions = Interruptions(
            ctx, responses=self._responses, playback=self._playback, turns=turns
        )
        self._utterance = Utterance(ctx, self._conversation, self._playback)
        self._overlap = overlap = Overlap(ctx, self._interruptions, gpu)
        self._frames = (
            FrameLane(
                ctx,
                utterance=self._utterance,
                responses=self._responses,
                conversation=self._conversation,
            )
            if config.model_profile == "frame"
            else None
        )
        self._input = InputLane(
            ctx,
            utterance=self._utterance,
            turn_lane=TurnLane(
                ctx,
                utterance=self._utterance,
                overlap=overlap,
                responses=self._responses,
                interruptions=self._interruptions,
                turns=turns,
            ),
            native_lane=NativeLane(
                ctx,
                utterance=self._utterance,
                overlap=overlap,
                responses=self._responses,
                interruptions=self._interruptions,
            ),
            frame_lane=self._frames,
            responses=self._responses,
            interruptions=self._interruptions,
            turns=turns,
        )
        self._handlers: dict[str, Handler] = {
            "session.heartbeat": self._on_heartbeat,
            "session.close": self._on_close,
            "session.update": self._on_update,
            "turn.signal": self._on_turn_signal,
            "input_audio_buffer.append": self._input.on_append,
            "input_audio_buffer.commit": self._input.on_commit,
            "input_audio_buffer.clear": self._input.on_clear,
            "input.cancel": self._input.on_cancel,
            "barge_in": self._input.on_barge_in,
            "input.text.append": self._input.on_text_append,
            "conversation.item.create": self._on_item_create,
            "conversation.item.retrieve": self._conversation.on_retrieve,
            "conversation.item.delete": self._conversation.on_delete,
            "conversation.item.truncate": self._playback.on_truncate,
            "response.create": self._responses.on_create,
            "response.cancel": self._interruptions.on_response_cancel,
            "output_audio_buffer.clear": self._interruptions.on_output_audio_buffer_clear,
            "playback.ack": self._playback.on_ack,
        }
        self._queue: asyncio.Queue[translate.Command] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None

    # --- contract -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._ctx.closed

    @property
    def last_activity(self) -> float:
        """time.monotonic() of the last lease-refreshing activity (a command, an output unit)."""
        return self._ctx.last_activity

    @property
    def settings(self) -> NegotiatedSettings:
        return self._ctx.settings

    @property
    def epoch(self) -> int:
        return self._ctx.epoch

    def session_object(self) -> dict[str, Any]:
        """The full wire session object (session.created / .updated / .resumed)."""
        ctx = self._ctx
        records = self._responses.records
        active, last = records.active, records.last
        state: dict[str, Any] = {
            "state": "closed" if ctx.closed else "open",
            "turn_state": ctx.turn.state.value,
            "epoch": ctx.epoch,
            "turn_id": ctx.turn_id,
            "active_request_id": active.id if active else None,
            "active_response_id": active.id if active else None,
            "active_response_turn_id": active.turn_id if active else None,
        }
        if last is not None and not last.released:
            state["playback"] = last.ledger.as_dict()
        return session_object.build(
            ctx.settings, session_id=self.id, state=state, caps=self.capabilities
        )

    def start(self) -> None:
        """Emit session.updated (journal entry #1) and start the mailbox."""
        self._ctx.ev("session.updated", session=self.session_object())
        self._worker = asyncio.get_running_loop().create_task(self._run())
        self._worker.add_done_callback(self._worker_done)

    def receive(self, event: dict[str, Any]) -> None:
        """Translate one client event and queue it; translator rejections raise at once."""
        ctx = self._ctx
        if ctx.closed:
            raise ProtocolError("session_closed", "Duplex session is closed")
        ctx.last_activity = time.monotonic()
        try:
            command = translate.translate(
                event,
                input_format=ctx.settings.input_format,
                input_rate=ctx.settings.input_rate,
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
        if self._ctx.closed:
            return
        self._stop()
        self._ctx.ev("session.closed", session_id=self.id, reason=reason, event={})
        self._ctx.disconnect()

    async def expire(self, reason: str) -> None:
        """Lease expiry: session.expired, then nothing more."""
        if self._ctx.closed:
            return
        self._stop()
        self._ctx.ev("session.expired", session_id=self.id, reason=reason)
        self._ctx.disconnect()

    async def abort(self) -> None:
        """Stop everything and emit nothing (failed open, server shutdown)."""
        self._stop()
        self._ctx.disconnect()

    # --- mailbox --------------------------------------------------------------------------

    def _stop(self) -> None:
        self._responses.stop_all()
        self._overlap.stop_all()
        worker = self._worker
        if worker is not None and worker is not asyncio.current_task() and not worker.done():
            worker.cancel()
        while not self._queue.empty():
            with contextlib.suppress(asyncio.QueueEmpty, ValueError):
                self._queue.get_nowait()
                self._queue.task_done()
        self._ctx.closed = True
        # the table holds bound methods of this session (a cycle); a closed session
        # dispatches nothing, so it goes, and the session is freed when its holders let go
        self._handlers.clear()

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if self._worker is task:
            self._worker = None

    async def _run(self) -> None:
        while True:
            command = await self._queue.get()
            try:
                if not self._ctx.closed:
                    result = self._handlers[command.type](command)
                    if result is not None:
                        await result
            except ProtocolError as exc:
                self._ctx.err(
                    exc.code, exc.message, command.event_id if exc.echo_event_id else None
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("engine failed on %s", command.type)
                self._ctx.err("internal_error", f"internal error while handling {command.type}")
            finally:
                self._queue.task_done()
            if self._ctx.closed:
                return

    # --- session-level commands -------------------------------------------------------------

    def _on_heartbeat(self, cmd: translate.Command) -> None:
        self._ctx.ev("session.heartbeat_ack", session_id=self.id)

    async def _on_close(self, cmd: translate.Command) -> None:
        await self.close(cmd.args["reason"])

    def _on_update(self, cmd: translate.Command) -> None:
        ctx = self._ctx
        old_td = ctx.settings.turn_detection
        try:
            updated = session_object.apply_update(
                ctx.settings,
                cmd.args["session"],
                ctx.config,
                audio_started=self._input.audio_seen,
                output_started=ctx.output_started,
            )
        except ProtocolError as exc:
            ctx.err(exc.code, exc.message, cmd.event_id)
            return
        if updated.turn_detection != old_td:
            self._utterance.retune(updated.turn_detection)
        ctx.settings = updated
        ctx.ev("session.updated", session=self.session_object())

    def _on_item_create(self, cmd: translate.Command) -> None:
        """A tool's result goes to the frame-locked lane that made the call (§13.4); every
        other item (and a result anywhere else) to the conversation."""
        item = cmd.args["item"]
        if self._frames is not None and item.get("type") == "function_call_output":
            self._frames.function_output(item, cmd.event_id)
            return
        self._conversation.on_create(cmd)

    def _on_turn_signal(self, cmd: translate.Command) -> None:
        ctx = self._ctx
        name = cmd.args["event"]
        ctx.turn.signal(name)
        ctx.ev(
            "turn.event",
            session_id=self.id,
            event=name,
            turn_state=ctx.turn.state.value,
            epoch=ctx.epoch,
        )
