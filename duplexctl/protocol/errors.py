"""Error envelopes: build and parse both shapes (docs/protocol.md §4.4, §4.5, §1.6).

Realtime shape (G2, every post-handshake error and G2 handshake errors)::

    {"type": "error", "event_id": "event_…",
     "error": {"type": <class>, "code": <code>, "message": <text>, "event_id": <client id>?}}

Flat shape (route-level refusals on every version; handshake errors on G1)::

    {"type": "error", "error": "<text>", "code": "<code>"}

A client reads ``code`` from ``error.code`` or the top-level ``code`` and the message from
``error.message`` or a string ``error``; :func:`parse_error` does exactly that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from duplexctl.protocol import ids

RATE_LIMIT: Final = "rate_limit_error"
SERVER_ERROR: Final = "server_error"
INVALID_REQUEST: Final = "invalid_request_error"

# REALTIME_ERROR_TYPES_BY_CODE of vLLM-Omni 0.30.0; unknown codes are invalid_request_error.
_TYPE_BY_CODE: Final[dict[str, str]] = {
    "resource_exhausted": RATE_LIMIT,
    "input_backpressure": RATE_LIMIT,
    "duplex_session_busy": RATE_LIMIT,
    "internal_error": SERVER_ERROR,
    "runtime_append_failed": SERVER_ERROR,
    "runtime_append_task_failed": SERVER_ERROR,
    "runtime_signal_failed": SERVER_ERROR,
    "runtime_abort_failed": SERVER_ERROR,
    "runtime_data_plane_stream_failed": SERVER_ERROR,
    "runtime_data_plane_text_without_audio": SERVER_ERROR,
    "runtime_touch_failed": SERVER_ERROR,
    "engine_error": SERVER_ERROR,
    "commit_aborted": SERVER_ERROR,
    "server_vad_unavailable": SERVER_ERROR,
}

#: Errors that answer the client's own bookkeeping — a playback ack or a truncate naming an
#: item the server no longer plays, an ack after the reply ended, a cancel that raced the
#: response's end — not a failure of the turn in flight: replay and load do not fail a turn
#: on them, talk does not show them (every one is still counted in the run's errors).
BOOKKEEPING_CODES: Final = frozenset(
    {
        "playback_item_not_found",
        "playback_item_mismatch",
        "playback_ack_too_late",
        "item_not_found",
        "response_not_active",
    }
)
#: The server cannot run server VAD for this session (it refuses the turn detection asked
#: for, or its VAD module is not there): talk's ``--turn-detection auto`` falls back to
#: push-to-talk on these codes, and on nothing else (a wrong VAD setting is the user's to fix).
VAD_REFUSAL_CODES: Final = frozenset({"unsupported_turn_detection", "server_vad_unavailable"})

_LIMIT_RE: Final = re.compile(r"limit\s*=\s*(\d+)|max_sessions\s*=\s*(\d+)")


def error_type(code: str) -> str:
    """The error class (``error.type``) the server uses for ``code``."""
    return _TYPE_BY_CODE.get(code, INVALID_REQUEST)


def realtime_error(
    code: str,
    message: str,
    *,
    client_event_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Realtime-shape ``error`` event (no ``server_event_seq``: the journal adds that)."""
    body: dict[str, Any] = {"type": error_type(code), "code": code, "message": message}
    if client_event_id is not None:
        body["event_id"] = client_event_id
    if extra:
        body.update(extra)
    return {"type": "error", "event_id": ids.server_event_id(), "error": body}


def flat_error(code: str, message: str) -> dict[str, Any]:
    """A flat-shape ``error`` event (route-level refusals; G1 handshake errors)."""
    return {"type": "error", "error": message, "code": code}


@dataclass(frozen=True, slots=True)
class WireError:
    """An error event as a client sees it, whichever shape it came in."""

    code: str
    message: str
    type: str | None
    client_event_id: str | None
    flat: bool
    sequenced: bool

    @property
    def is_capacity(self) -> bool:
        """True for an admission rejection (docs/metrics.md: rejected_capacity)."""
        return self.code in ("resource_exhausted", "duplex_session_busy") or (
            self.type == RATE_LIMIT and self.code not in ("input_backpressure",)
        )

    @property
    def advertised_limit(self) -> int | None:
        """N from ``duplex_session_capacity_exhausted: limit=N`` (or G1's max_sessions=N)."""
        match = _LIMIT_RE.search(self.message)
        if match is None:
            return None
        return int(match.group(1) or match.group(2))


def parse_error(frame: dict[str, Any]) -> WireError:
    """Read an ``error`` event of either shape; tolerant of missing fields."""
    err = frame.get("error")
    sequenced = isinstance(frame.get("server_event_seq"), int)
    if isinstance(err, dict):
        return WireError(
            code=str(err.get("code") or frame.get("code") or "unknown"),
            message=str(err.get("message") or ""),
            type=err.get("type") if isinstance(err.get("type"), str) else None,
            client_event_id=err.get("event_id") if isinstance(err.get("event_id"), str) else None,
            flat=False,
            sequenced=sequenced,
        )
    return WireError(
        code=str(frame.get("code") or "unknown"),
        message=str(err) if err is not None else "",
        type=None,
        client_event_id=None,
        flat=True,
        sequenced=sequenced,
    )


class ProtocolError(Exception):
    """A rejection with a documented code, raised by pure protocol code.

    The server turns it into an error event; ``sequenced`` says whether it travels through
    the session's journal (errors raised inside the session) or is written straight to the
    socket (translator and transport errors, docs/protocol.md §2).
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        echo_event_id: bool = True,
        sequenced: bool = False,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.echo_event_id = echo_event_id
        self.sequenced = sequenced

    def to_event(self, client_event_id: str | None) -> dict[str, Any]:
        return realtime_error(
            self.code, self.message, client_event_id=client_event_id if self.echo_event_id else None
        )


def refuses_server_vad(error: WireError | None) -> bool:
    """The handshake failed because the server cannot run server VAD here
    (:data:`VAD_REFUSAL_CODES`), decided by the code alone: an ``invalid_session_config``
    whose message mentions VAD is a setting to fix, not a lane without VAD."""
    return error is not None and error.code in VAD_REFUSAL_CODES
