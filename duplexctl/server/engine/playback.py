"""The playback ledger (docs/protocol.md §3.5, §6.5): which replies' audio the client has not
yet acknowledged, acknowledgements, and truncation at the heard position.

A reply is *tracked* from its start until its audio is acknowledged in full (or cut): while
it is, it can be acknowledged and truncated, and under ``ack_only`` it keeps owning the turn.
A reply stopped before its audio was fully acknowledged — cancelled while running, or cut
after it ended (a barge-in or ``output_audio_buffer.clear`` with nothing running) — no longer
owns the turn but stays addressable: a truncate after it → truncated + truncating ack (seen on
vLLM-Omni 0.30.0 after a cancel), and acks of the audio still playing at the client are
answered (docs/protocol.md §3.5 releases a record only once its audio is fully
acknowledged; vLLM-Omni's ack handler, as read in its source, finds a reply by its assistant
item, which a cut keeps in history). At most
:data:`MAX_CANCELLED` of those are kept, the oldest forgotten first, so a client that never
acknowledges cannot grow the session with every barge-in.
"""

from __future__ import annotations

from typing import Any, Final

from duplexctl.protocol import ids
from duplexctl.server.engine.context import SessionContext
from duplexctl.server.engine.conversation import Conversation
from duplexctl.server.engine.records import Response, ResponseRecords
from duplexctl.server.translate import Command
from duplexctl.server.wire_numbers import is_position

MAX_CANCELLED: Final = 16


def cut_transcript(text: str, ms: int, total_ms: int) -> str:
    """The transcript proportionally cut at ``ms`` of ``total_ms`` (not word-aligned)."""
    if total_ms <= 0 or ms <= 0:
        return ""
    n = int(len(text) * min(ms, total_ms) / total_ms)
    return text[:n].rstrip()


class PlaybackLedger:
    """Replies awaiting acknowledgement, and the acks, truncations and cuts that end that."""

    def __init__(
        self, ctx: SessionContext, conversation: Conversation, records: ResponseRecords
    ) -> None:
        self._ctx = ctx
        self._conversation = conversation
        self._records = records
        self._tracked: dict[str, Response] = {}
        self._cancelled: dict[str, Response] = {}

    # --- what the other parts ask -------------------------------------------------------------

    def track(self, r: Response) -> None:
        self._tracked[r.id] = r

    def release(self, r: Response) -> None:
        r.released = True
        self._tracked.pop(r.id, None)

    def keep_cancelled(self, r: Response) -> None:
        """A cancelled or cut reply whose audio was not all acknowledged stays addressable."""
        if r.ledger.committed_ms < r.ledger.sent_ms:
            self._cancelled[r.id] = r
            while len(self._cancelled) > MAX_CANCELLED:
                self._cancelled.pop(next(iter(self._cancelled)))

    def unheard(self) -> bool:
        """Some reply's audio is not acknowledged yet (it owns the turn under ack_only)."""
        return any(not r.released for r in self._tracked.values())

    def supersede_finished(self) -> None:
        """A user turn was committed: acks for replies that already ended come too late."""
        for r in self._tracked.values():
            if r.finished:
                r.superseded = True

    def cut_unheard(self) -> None:
        """Cut every finished reply's unacknowledged playback (barge-in with nothing running)."""
        for r in list(self._tracked.values()):
            if not r.released:
                self.cut(r, bump=False)

    def cut(self, r: Response, *, bump: bool) -> None:
        """Truncate a completed reply's unacknowledged playback in history and release it
        from the turn. Its record stays addressable (``keep_cancelled``): the client learns
        of the cut only from ``overlap.decision`` / ``output_audio_buffer.cleared``, may still
        be acknowledging what it plays, and then owes the truncate at the heard position."""
        committed = min(r.ledger.committed_ms, r.ledger.generated_ms)
        item = self._conversation.get(r.item_id)
        if item is not None:
            part = {
                "type": "output_audio",
                "transcript": cut_transcript(r.emitted_text, committed, r.ledger.generated_ms),
                "audio_duration_ms": r.ledger.generated_ms,
            }
            item["content"] = [part]
        self.release(r)
        self.keep_cancelled(r)
        if bump:
            self._ctx.epoch += 1

    def addressable(self, rid: str) -> Response | None:
        """The record an ack or truncate may name: an unreleased reply, or a cancelled one
        whose audio was not fully acknowledged."""
        record = self._tracked.get(rid)
        if record is not None and not record.released:
            return record
        return self._cancelled.get(rid)

    # --- playback.ack -------------------------------------------------------------------------

    def on_ack(self, cmd: Command) -> None:
        ctx = self._ctx
        a = cmd.args
        rid, item_id = a["response_id"], a["item_id"]
        if rid is not None and item_id is not None and item_id != ids.assistant_item_id(rid):
            ctx.err(
                "playback_item_mismatch", f"playback.ack item_id {item_id} does not belong to {rid}"
            )
            return
        if rid is None and item_id is not None:
            rid = item_id[5:] if item_id.startswith("item_") else item_id
        if rid is None:
            open_records = [r for r in self._tracked.values() if not r.released]
            if len(open_records) != 1:
                ctx.err(
                    "playback_item_not_found", "No single assistant response is pending playback."
                )
                return
            rid = open_records[0].id
        record = self.addressable(rid)
        if record is None:
            ctx.err(
                "playback_item_not_found", f"No assistant response item is registered for {rid}."
            )
            return
        if rid in self._cancelled:
            self._ack_cancelled(record, a["played_ms"], a["committed_ms"])
            return
        if record.superseded:
            ctx.err(
                "playback_ack_too_late", f"A later user input was already committed after {rid}."
            )
            return
        ledger = record.ledger
        ledger.played_ms = max(ledger.played_ms, a["played_ms"])
        ledger.committed_ms = max(ledger.committed_ms, a["committed_ms"])
        done = record.finished and ledger.committed_ms >= ledger.sent_ms
        if done:
            self.release(record)
            if self._records.active is None:
                ctx.turn.observe("playback_released")
        self._acknowledged(record, truncate=False, history_committed=done)

    def _ack_cancelled(self, r: Response, played_ms: int, committed_ms: int) -> None:
        """A plain ack for a cancelled reply: monotonic, and the record goes once everything
        sent is acknowledged. It never touches the turn (the reply no longer owns it)."""
        ledger = r.ledger
        ledger.played_ms = max(ledger.played_ms, played_ms)
        ledger.committed_ms = max(ledger.committed_ms, committed_ms)
        done = ledger.committed_ms >= ledger.sent_ms
        if done:
            self._cancelled.pop(r.id, None)
        self._acknowledged(r, truncate=False, history_committed=done)

    def _acknowledged(self, r: Response, *, truncate: bool, history_committed: bool) -> None:
        ledger = r.ledger
        self._ctx.ev(
            "playback.acknowledged",
            event={
                "type": "playback.acknowledged",
                "session_id": self._ctx.id,
                "epoch": self._ctx.epoch,
                "item_id": r.item_id,
                "played_ms": ledger.played_ms,
                "committed_ms": ledger.committed_ms,
                "truncate": truncate,
                "playback": ledger.as_dict(),
                "history_committed": history_committed,
            },
        )

    # --- conversation.item.truncate: a truncating ack at the heard position -------------------

    def on_truncate(self, cmd: Command) -> None:
        ctx = self._ctx
        item_id = cmd.args["item_id"]
        end_ms = cmd.args["audio_end_ms"]
        index = cmd.args["content_index"]
        item = self._conversation.get(item_id)
        if item is None:
            ctx.err("item_not_found", f"Conversation item not found: {item_id}", cmd.event_id)
            return
        content = item.get("content") or []
        part = content[index] if index < len(content) else None
        assistant = (
            item.get("role") == "assistant"
            and part is not None
            and part.get("type") == "output_audio"
        )
        if assistant:
            assert part is not None
            duration = _stated_duration(part)
            if end_ms > duration:
                ctx.err(
                    "bad_event",
                    "conversation.item.truncate audio_end_ms exceeds item audio duration",
                    cmd.event_id,
                )
                return
            reply = self._records.get(item_id[5:])
            full = reply.emitted_text if reply is not None else part.get("transcript", "")
            part["transcript"] = cut_transcript(
                full if isinstance(full, str) else "", end_ms, duration
            )
        ctx.ev(
            "conversation.item.truncated",
            item_id=item_id,
            content_index=index,
            audio_end_ms=end_ms,
            event={
                "type": "conversation.item.truncated",
                "session_id": ctx.id,
                "item_id": item_id,
                "content_index": index,
                "audio_end_ms": end_ms,
                "truncated": assistant,
            },
        )
        if not assistant:
            return
        rid = item_id[5:]
        record = self.addressable(rid)
        if record is None:
            ctx.err(
                "playback_item_not_found", f"No assistant response item is registered for {rid}."
            )
            return
        record.ledger.played_ms = end_ms
        record.ledger.committed_ms = end_ms
        record.released = True
        self._tracked.pop(rid, None)
        self._cancelled.pop(rid, None)
        self._acknowledged(record, truncate=True, history_committed=True)


def _stated_duration(part: dict[str, Any]) -> int:
    """An output_audio part's duration. A client-made assistant item carries what the client
    wrote: a duration that is not a position counts as unknown (0)."""
    stated = part.get("audio_duration_ms", 0)
    return int(stated) if is_position(stated) and stated > 0 else 0
