"""Probe ``handshake``: the shape of the session handshake and of a clean close."""

from __future__ import annotations

from typing import Any

from duplexctl.probe.context import ProbeContext
from duplexctl.probe.model import ProbeFailed
from duplexctl.probe.registry import probe
from duplexctl.protocol.client_state import client_event

_CAPS_SHOWN = (
    "supports_session_resume",
    "supports_barge_in",
    "supports_client_commit",
    "supports_playback_ack",
    "supports_audio_truncate",
)


@probe("handshake", expected_s=2, max_s=20)
async def handshake(ctx: ProbeContext) -> str:
    """A handshake a client cannot build on: missing id, token or capabilities, wrong order.

    Every client reads ``session.created`` (unsequenced: it is not journaled, so a resume can
    never replay it) for the session id, the resume token and the capabilities it must branch
    on; ``session.updated`` must follow as journal entry 1, and a clean ``session.close`` must
    end with ``session.closed`` as the last event and a close frame — otherwise clients and
    dashboards mis-count sessions (docs/protocol.md §1.4, §4.1, §6.8).
    """
    raw = await ctx.raw("h")
    problems: list[str] = []
    created = await raw.open_session()
    raw_session = created.get("session")
    session: dict[str, Any] = raw_session if isinstance(raw_session, dict) else {}
    caps = session.get("capabilities")
    if "server_event_seq" in created:
        problems.append("session.created carries server_event_seq (it is never journaled)")
    if not isinstance(session.get("id"), str) or not session.get("id"):
        problems.append("session.created has no session.id")
    if not isinstance(caps, dict):
        problems.append("session.created has no capabilities object")
        caps = {}
    if caps.get("supports_session_resume"):
        token = created.get("resume_token")
        if not isinstance(token, str) or not token:
            problems.append("supports_session_resume is true but there is no resume_token")
        if created.get("attachment_generation") != 1:
            problems.append(
                f"attachment_generation is {created.get('attachment_generation')!r}, not 1"
            )
    frame, _ = await raw.recv(5.0)
    if frame is None or frame.get("type") != "session.updated":
        problems.append(
            f"session.created was followed by {frame.get('type') if frame else 'nothing'}, "
            "not session.updated"
        )
    elif frame.get("server_event_seq") != 1:
        problems.append(f"session.updated has seq {frame.get('server_event_seq')!r}, not 1")
    await raw.send(client_event("session.heartbeat"))
    ack, _ = await raw.recv_until(lambda f: f.get("type") == "session.heartbeat_ack", 5.0)
    if ack is None:
        problems.append("session.heartbeat was not answered")
    await raw.send(client_event("session.close"))
    closed, _ = await raw.recv_until(lambda f: f.get("type") == "session.closed", 5.0)
    if closed is None:
        problems.append("session.close was not answered by session.closed")
    else:
        if closed.get("reason") != "client_close":
            problems.append(f"session.closed reason {closed.get('reason')!r}, not client_close")
        after, _ = await raw.recv(3.0)
        if after is not None:
            problems.append(f"{after.get('type')} arrived after session.closed")
        code = raw.close_code() if raw.ended else None
        if code is None:
            problems.append("the socket stayed open 3 s after session.closed")
        elif code[0] != 1000:
            problems.append(f"the socket ended with code {code[0]}, not 1000")
    if problems:
        raise ProbeFailed("; ".join(problems))
    shown = ", ".join(
        f"{k.removeprefix('supports_')}={caps.get(k)}" for k in _CAPS_SHOWN if k in caps
    )
    level = caps.get("implementation_level", "?")
    ctx.finding(f"{level}; {shown}")
    return "session.created / session.updated(seq 1) / heartbeat / session.closed as documented"
