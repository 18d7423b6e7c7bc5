"""The cancel family (docs/protocol.md §3.4, §6.4): ``response.cancel``,
``output_audio_buffer.clear`` and barge-in, and what each does to the epoch.

Every cut advances the epoch before anything else can run, so nothing of the old epoch is
emitted after it (responses._live). What a cut stops is either the running reply (cancelled
fan-out) or, with none running, the unacknowledged playback of replies that already ended
(truncated in history at the acknowledged position).
"""

from __future__ import annotations

from duplexctl.server.engine.context import SessionContext
from duplexctl.server.engine.playback import PlaybackLedger
from duplexctl.server.engine.responses import Responses
from duplexctl.server.engine.turns import TurnQueue
from duplexctl.server.translate import Command


class Interruptions:
    """Cuts: client cancels, buffer clears, and barge-ins decided by the input lane."""

    def __init__(
        self,
        ctx: SessionContext,
        *,
        responses: Responses,
        playback: PlaybackLedger,
        turns: TurnQueue,
    ) -> None:
        self._ctx = ctx
        self._responses = responses
        self._playback = playback
        self._turns = turns

    def stop_what_plays(self, reason: str) -> bool:
        """Cancel the running reply; with none, cut every completed reply's unacknowledged
        playback and advance the epoch anyway. True when a reply was cancelled."""
        active = self._responses.active
        if active is not None:
            self._responses.cancel(active, reason)
            return True
        self._playback.cut_unheard()
        self._ctx.epoch += 1
        return False

    def barge_in(self, reason: str) -> None:
        """Overlap barge-in: cancel the running reply, or cut unacknowledged playback."""
        self._turns.deferred.clear()
        self.stop_what_plays(reason)
        self.close_gate_if_faulty()

    def close_gate_if_faulty(self) -> None:
        if self._ctx.fault("stuck-gate") is not None:
            self._responses.gate_stuck = True

    # --- commands -----------------------------------------------------------------------------

    def on_response_cancel(self, cmd: Command) -> None:
        ctx = self._ctx
        records = self._responses.records
        rid = cmd.args["response_id"]
        if rid is not None:
            target = records.get(rid)
            if target is None:
                if records.active is None:
                    return  # a name that matches nothing while idle: no reply at all (0.30.0)
                ctx.err("response_not_active", f"Response is not active: {rid}", cmd.event_id)
                return
        else:
            target = records.active or records.last
            if target is None:
                ctx.err(
                    "response_not_active",
                    "response.cancel requires an active response",
                    cmd.event_id,
                )
                return
        if target.finished:
            ctx.err(
                "response_not_active", f"Response is already complete: {target.id}", cmd.event_id
            )
            return
        self._turns.pending.clear()
        self._responses.cancel(target, "client_cancelled")

    def on_output_audio_buffer_clear(self, cmd: Command) -> None:
        ctx = self._ctx
        records = self._responses.records
        rid = cmd.args["response_id"]
        active = records.active
        if active is not None and rid in (None, active.id):
            ctx.ev("output_audio_buffer.cleared", response_id=active.id)
            self._responses.cancel(active, "output_audio_buffer_clear")
            return
        target = records.get(rid) if rid is not None else records.last
        if target is not None and target.finished and not target.released:
            ctx.ev("output_audio_buffer.cleared", response_id=target.id)
            self._playback.cut(target, bump=True)
            return
        shown = rid if rid is not None else (records.last.id if records.last else None)
        ctx.ev("output_audio_buffer.cleared", response_id=shown)
