"""Probe ``bad-input``: a client's mistakes are answered with errors, not a dead session."""

from __future__ import annotations

from typing import Any

from duplexctl.audio import pcm
from duplexctl.probe.context import ProbeContext
from duplexctl.probe.model import ProbeFailed
from duplexctl.probe.registry import probe
from duplexctl.protocol import ids
from duplexctl.protocol.client_state import client_event
from duplexctl.protocol.errors import parse_error
from duplexctl.units import MiB

# Just over vLLM-Omni's 15 MiB event limit and under the 16 MiB websocket message limit, so
# the server's own check (event_too_large, socket stays open) answers, not the websocket
# layer (close 1009) — docs/protocol.md §1.3, wire README "frame-size ladder".
_OVERSIZE_BYTES = 15 * MiB + 512 * 1024


def _cases() -> list[tuple[str, dict[str, Any] | str, frozenset[str]]]:
    """(name, frame, acceptable error codes)."""
    return [
        ("invalid JSON", "{not json", frozenset({"invalid_json"})),
        (
            "unknown event",
            {"type": "duplexctl.no_such_event", "event_id": ids.client_event_id()},
            frozenset({"unknown_event"}),
        ),
        (
            "oversize frame (15.5 MiB)",
            {
                "type": "session.heartbeat",
                "event_id": ids.client_event_id(),
                "padding": "x" * _OVERSIZE_BYTES,
            },
            frozenset({"event_too_large"}),
        ),
        (
            "audio that is not base64",
            {
                "type": "input_audio_buffer.append",
                "audio": "!!not base64!!",
                "event_id": ids.client_event_id(),
            },
            frozenset({"bad_audio", "bad_event"}),
        ),
        (
            "PCM16 audio with an odd byte count",
            {
                "type": "input_audio_buffer.append",
                "audio": pcm.b64encode(b"\x00\x01\x02"),
                "event_id": ids.client_event_id(),
            },
            frozenset({"bad_audio"}),
        ),
    ]


@probe("bad-input", expected_s=4, max_s=45)
async def bad_input(ctx: ProbeContext) -> str:
    """Bad input that kills or wedges the session instead of being answered with an error.

    Invalid JSON, an unknown event type, an oversize frame and undecodable audio must each
    get their documented error code while the session stays usable (docs/protocol.md §4.4: errors
    do not close the socket after the handshake) — a server that drops the socket, closes
    the session or stops answering on one bad frame turns any client bug into an outage.
    After every bad frame the probe sends ``session.heartbeat`` and requires its ack.
    """
    raw = await ctx.raw_session("b")
    problems: list[str] = []
    for name, frame, codes in _cases():
        ctx.note(f"sending {name}")
        await raw.send(frame)
        await raw.send(client_event("session.heartbeat"))
        errors: list[str] = []
        ack = None
        while ack is None:
            got, _ = await raw.recv_until(
                lambda f: (
                    f.get("type")
                    in ("error", "session.heartbeat_ack", "session.closed", "session.expired")
                ),
                8.0,
            )
            if got is None:
                break
            if got.get("type") == "error":
                errors.append(parse_error(got).code)
            elif got.get("type") == "session.heartbeat_ack":
                ack = got
            else:
                problems.append(f"{name}: the server ended the session ({got.get('type')})")
                break
        if raw.ended:
            code, reason = raw.close_code()
            raise ProbeFailed(
                f"{name}: the server dropped the connection (code {code} {reason}); "
                + "; ".join(problems)
            )
        if ack is None:
            problems.append(f"{name}: session.heartbeat not answered within 8 s afterwards")
            continue
        # a sequenced session error may trail the ack it preceded on the wire (§6.9): wait a
        # moment for it before judging the code
        if not errors:
            late, _ = await raw.recv_until(lambda f: f.get("type") == "error", 1.0)
            if late is not None:
                errors.append(parse_error(late).code)
        if not errors:
            problems.append(f"{name}: no error (expected {'/'.join(sorted(codes))})")
        elif not set(errors) & codes:
            problems.append(
                f"{name}: error {', '.join(errors)} (expected {'/'.join(sorted(codes))})"
            )
    if problems:
        raise ProbeFailed("; ".join(problems))
    await raw.close_session()
    return f"{len(_cases())} kinds of bad input answered with their error codes; session usable"
