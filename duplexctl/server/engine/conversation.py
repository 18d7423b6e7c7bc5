"""The session's conversation items (docs/protocol.md §3.3): stored in order, retrieved,
deleted, and created by the client.

Items come from three places: the input lane's commits (user audio items), replies
(assistant items) and ``conversation.item.create``. A created user item with audio becomes a
pending turn, one with text a text turn, for ``response.create`` to answer.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import numpy as np

from duplexctl.audio import pcm
from duplexctl.audio.resample import StreamResampler
from duplexctl.protocol import codec, ids
from duplexctl.server.engine.context import SessionContext
from duplexctl.server.engine.turns import Turn, TurnQueue
from duplexctl.server.translate import Command

INTERNAL_RATE: Final = 16000
_IMAGE_URL_PREFIXES: Final = ("data:image/jpeg;base64,", "data:image/png;base64,")


def user_item(item_id: str) -> dict[str, Any]:
    """The user item a commit creates (its transcript is never filled: no ASR runs)."""
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_audio", "transcript": ""}],
    }


class Conversation:
    """The item history: items by id, each one's predecessor, the last item, the last user item."""

    def __init__(self, ctx: SessionContext, turns: TurnQueue) -> None:
        self._ctx = ctx
        self._turns = turns
        self.items: dict[str, dict[str, Any]] = {}
        self.previous: dict[str, str | None] = {}
        self.last_item_id: str | None = None
        self.last_user_item: str | None = None
        self._client_sizes: dict[str, int] = {}  # encoded size of each client-made item
        self._client_bytes = 0  # their sum

    def __len__(self) -> int:
        return len(self.items)

    def get(self, item_id: str) -> dict[str, Any] | None:
        return self.items.get(item_id)

    def store(self, item: dict[str, Any], previous: str | None) -> None:
        self.items[item["id"]] = item
        self.previous[item["id"]] = previous
        self.last_item_id = item["id"]

    def _within_budget(self, item: dict[str, Any]) -> bool:
        """Client-made items count against ``max_history_bytes`` (refused with
        ``input_backpressure``, 0.30.0's code and hint for its image budget). Without it one
        client could keep 15 MiB per ``conversation.item.create`` for the session's life;
        commits and replies add well under a kilobyte per turn and are not counted."""
        budget = self._ctx.config.max_history_bytes
        size = len(codec.dumps_bytes(item))
        held = self._client_bytes - self._client_sizes.get(item["id"], 0)
        if held + size > budget:
            self._ctx.err(
                "input_backpressure",
                f"Conversation history exceeds {budget / (1024 * 1024):g} MiB; delete old items",
            )
            return False
        self._client_sizes[item["id"]] = size
        self._client_bytes = held + size
        return True

    # --- commands ---------------------------------------------------------------------------

    def on_create(self, cmd: Command) -> None:
        ctx = self._ctx
        item = copy.deepcopy(cmd.args["item"])
        for part in item.get("content", []):
            if part.get("type") == "input_image":
                url = part.get("image_url")
                if not isinstance(url, str) or not url.startswith(_IMAGE_URL_PREFIXES):
                    ctx.err(
                        "invalid_image",
                        "input_image must be a data:image/jpeg or data:image/png base64 URL",
                    )
                    return
        if item.get("type") == "function_call_output":
            ctx.err(
                "invalid_function_call_output",
                "function_call_output must answer an earlier function call",
                param="item.call_id",
            )
            return
        item.setdefault("type", "message")
        item.setdefault("role", "user")
        if not isinstance(item.get("id"), str) or not item["id"]:
            item["id"] = ids.user_item_id()
        if not self._within_budget(item):
            return
        item.setdefault("object", "realtime.item")
        item.setdefault("status", "completed")
        previous = cmd.args["previous_item_id"]
        if previous is None or previous not in self.items:
            previous = self.last_item_id
        self.store(item, previous)
        for etype in (
            "conversation.item.added",
            "conversation.item.created",
            "conversation.item.done",
        ):
            ctx.ev(etype, previous_item_id=previous, item=copy.deepcopy(item))
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
                    ctx.err(
                        "bad_audio", f"conversation.item.create {fmt} audio could not be decoded"
                    )
                    return
            self._turns.pending.append(Turn(item["id"], np.concatenate(chunks)))
            self.last_user_item = item["id"]
        elif any(p.get("type") in ("input_text", "text") for p in item.get("content", [])):
            self._turns.text_item = item["id"]

    def on_retrieve(self, cmd: Command) -> None:
        item = self.items.get(cmd.args["item_id"])
        if item is None:
            self._ctx.err(
                "item_not_found",
                f"Conversation item not found: {cmd.args['item_id']}",
                cmd.event_id,
            )
            return
        self._ctx.ev("conversation.item.retrieved", item=copy.deepcopy(item))

    def on_delete(self, cmd: Command) -> None:
        ctx = self._ctx
        item_id = cmd.args["item_id"]
        if item_id not in self.items:
            ctx.err("item_not_found", f"Conversation item not found: {item_id}", cmd.event_id)
            return
        del self.items[item_id]
        if self.last_item_id == item_id:
            self.last_item_id = self.previous.get(item_id)
        self.previous.pop(item_id, None)
        self._client_bytes -= self._client_sizes.pop(item_id, 0)
        ctx.ev(
            "conversation.item.deleted",
            item_id=item_id,
            event={
                "type": "conversation.item.deleted",
                "session_id": ctx.id,
                "item_id": item_id,
                "deleted": True,
            },
        )
