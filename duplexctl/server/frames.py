"""What a websocket message must be before anything reads it as a client event.

docs/protocol.md §1.3: one JSON object per **text** frame, at most 15 MiB. The transport
answers every other message itself, unsequenced, before the engine sees anything, so the
engine only ever receives objects it can walk, copy and echo:

* a binary frame → ``bad_event`` (binary frames are not part of the protocol; vLLM-Omni 0.30.0
  drops the connection without an answer, so the nearest documented code answers here);
* over the size limit → ``event_too_large``; not JSON (``NaN``/``Infinity`` included, which the
  protocol's JSON does not have) → ``invalid_json``;
* not an object with a string ``type`` → ``bad_event``;
* nested deeper than :data:`MAX_DEPTH` levels → ``bad_event``. 0.30.0 has no such check and
  drops the connection on its own recursion limit; here the engine deep-copies and the wire
  encoder re-encodes what a client sent (echoed session keys, items, metadata), and the
  encoder stops at 255 levels. No documented event nests beyond 6.

The first message of a connection is judged by the same rules with the handshake's wording
(§1.4); the caller then ends the connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from duplexctl.protocol import codec

MAX_DEPTH: Final = 32


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a message is not an event: the error code and message to answer."""

    code: str
    message: str


def read_event(
    raw: str | bytes, *, max_bytes: int, first: bool = False
) -> dict[str, Any] | Refusal:
    """The client event in one websocket message, or why there is none."""
    if isinstance(raw, bytes):
        return Refusal("bad_event", "Duplex events must be JSON text frames")
    size = len(raw) if raw.isascii() else len(raw.encode())
    if size > max_bytes:
        return Refusal("event_too_large", "Duplex event too large")
    try:
        event = codec.loads(raw)
    except codec.FrameDecodeError:
        message = "Invalid JSON in session.update" if first else "Invalid JSON event"
        return Refusal("invalid_json", message)
    if first and not isinstance(event, dict):
        return Refusal("bad_event", "Realtime event must be a JSON object")
    if not first and not (isinstance(event, dict) and isinstance(event.get("type"), str)):
        return Refusal("bad_event", "Duplex event must be a JSON object with a type")
    if nests_deeper_than(event, MAX_DEPTH):
        return Refusal("bad_event", f"Duplex event nests deeper than {MAX_DEPTH} levels")
    return event  # type: ignore[no-any-return]


def nests_deeper_than(value: Any, limit: int) -> bool:
    """True when ``value`` has objects/arrays more than ``limit`` levels deep.

    Iterative and touching only containers, so a flat append costs a few dictionary lookups
    and a hostile 15 MiB array is walked once, without recursion.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False
