"""JSON encoding of wire frames.

orjson is used because every audio append and delta passes through here: at hundreds of
sessions the stdlib encoder's cost shows up in send lag. The output is compact UTF-8 text,
which is also what the server's 15 MiB frame limit and journal byte cap measure.
"""

from __future__ import annotations

from typing import Any

import orjson


class FrameDecodeError(ValueError):
    """A text frame that is not valid JSON."""


def dumps(obj: Any) -> str:
    """Encode one event as compact JSON text (one websocket text frame)."""
    return orjson.dumps(obj).decode()


def dumps_bytes(obj: Any) -> bytes:
    """Encode one event as compact UTF-8 JSON bytes (for byte accounting and files)."""
    return orjson.dumps(obj)


def loads(data: str | bytes) -> Any:
    """Decode one frame; raises FrameDecodeError for anything that is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise FrameDecodeError(str(exc)) from None
