"""Probes of resume: replay without gaps, expiry after the grace, journal gap, takeover."""

from __future__ import annotations

import asyncio
import time

from duplexctl.probe.context import ProbeContext, describe
from duplexctl.probe.model import ProbeFailed, ProbeSkipped
from duplexctl.probe.registry import probe
from duplexctl.protocol.client_state import AudioDelta, ResponseCreated, client_event

GRACE_BOUND_S = 20.0  # resume-after-grace waits grace + EXPIRY_MARGIN_S; longer is skipped
EXPIRY_MARGIN_S = 2.0  # the reaper checks every reaper_interval_s (1 s on the peer)
DROP_FOR_S = 1.5  # long enough for the server to journal output while nobody is attached


def _resume_answer(f: dict[str, object]) -> bool:
    return f.get("type") in ("session.resumed", "session.resync_required", "error")


@probe("resume-replay", expected_s=6, max_s=60)
async def resume_replay(ctx: ProbeContext) -> str:
    """Events lost or duplicated across a dropped connection and its resume.

    The journal exists so a client that lost its socket mid-reply gets every event it missed
    exactly once: resuming with the last processed ``server_event_seq`` must replay from the
    next seq, in order, with no gap (lost audio, a lost ``response.done`` → a hung turn) and
    nothing at or below it (double-played audio), then continue live; the token must rotate
    and ``attachment_generation`` grow (docs/protocol.md §6.6, §7.5). The probe drops TCP at the
    first audio delta of a reply and resumes ``DROP_FOR_S`` later, while the reply goes on.
    """
    ctx.require("supports_session_resume")
    ctx.require_client_turns("dropping the socket at a reply's first audio delta")
    pc = await ctx.open("rr-")
    try:
        await pc.speak()
        h = await pc.wait_for(lambda h: isinstance(h, ResponseCreated), 10.0, "response.created")
        rid = h.response_id  # type: ignore[attr-defined]
        await pc.wait_for(
            lambda h: isinstance(h, AudioDelta) and h.response_id == rid, 10.0, f"audio of {rid}"
        )
        cs = pc.session
        token, generation = cs.resume_token, cs.attachment_generation
        await pc.conn.drop()
        seq_at_drop = cs.last_seq  # the reader is stopped: nothing is processed after this
        ctx.trace.add(pc.label, "net", "abort", f"client dropped TCP after seq {seq_at_drop}")
        await asyncio.sleep(DROP_FOR_S)
        try:
            record = await pc.conn.resume()
        except Exception as exc:
            raise ProbeFailed(f"resume {DROP_FOR_S:g} s after the drop failed: {exc}") from None
        ctx.note(
            f"resumed from seq {record.resumed_from_seq} in {record.resume_handshake_ms:.1f} ms"
        )
        first_after = None
        deadline = time.monotonic() + 15.0
        while not cs.responses[rid].done and (remaining := deadline - time.monotonic()) > 0:
            h2 = await pc.next(remaining)
            if h2 is None:
                break
            resumed_ns = record.t_resumed_ns or 0
            if first_after is None and h2.seq is not None and h2.recv_ns >= resumed_ns:
                first_after = h2.seq
        await pc.collect(0.3)
        problems: list[str] = []
        if cs.duplicates_dropped:
            problems.append(
                f"{cs.duplicates_dropped} replayed event(s) at or below seq "
                f"{seq_at_drop}, which the client had already processed"
            )
        if cs.seq_gaps:
            problems.append(
                f"{cs.missing_events} event(s) missing across the resume ({cs.seq_gaps} gap(s))"
            )
        for v in cs.checker.violations:
            if v.name == "seq_gap":
                problems.append(f"seq_gap: {v.detail}")
        if first_after is not None and first_after != seq_at_drop + 1:
            problems.append(f"the replay began at seq {first_after}, not {seq_at_drop + 1}")
        if not cs.responses[rid].done:
            problems.append(f"{rid} never got its response.done after the resume")
        if cs.resume_token == token:
            problems.append("the resume token was not rotated")
        if generation is not None and cs.attachment_generation != generation + 1:
            problems.append(
                f"attachment_generation {cs.attachment_generation}, not {generation + 1}"
            )
        if problems:
            raise ProbeFailed("; ".join(problems))
        after = cs.last_seq - seq_at_drop
        ctx.finding(
            f"dropped after seq {seq_at_drop}; {after} events replayed or live after "
            f"the resume, none missing, none duplicated"
        )
    finally:
        await pc.close()
    return "replay after a drop: no gap, no duplicate, token rotated"


@probe("resume-after-grace", expected_s=8, max_s=GRACE_BOUND_S + 25)
async def resume_after_grace(ctx: ProbeContext) -> str:
    """A session that can still be resumed after its disconnect grace (a slot that never frees).

    After a drop the server keeps the session for ``disconnect_grace_s`` and then must end it;
    a resume after that must get ``session_resume_expired``. A server that keeps dropped
    sessions past their grace leaks admission slots to every client that crashed (docs/protocol.md
    §6.6, wire resume_expired). Needs the server's grace (``--disconnect-grace-s``, known for
    the embedded server) and waits grace + ``EXPIRY_MARGIN_S``.
    """
    ctx.require("supports_session_resume")
    grace = ctx.facts.disconnect_grace_s
    if grace is None:
        raise ProbeSkipped(
            f"needs the server's disconnect grace: pass --disconnect-grace-s S (S <= "
            f"{GRACE_BOUND_S:g})"
        )
    if grace > GRACE_BOUND_S:
        raise ProbeSkipped(
            f"disconnect grace {grace:g} s ({ctx.facts.grace_source}) would need a "
            f"{grace + EXPIRY_MARGIN_S:g} s wait; runs with --disconnect-grace-s <= "
            f"{GRACE_BOUND_S:g} (a server configured so)"
        )
    a = await ctx.raw_session("g")
    a.abort()
    wait_s = grace + EXPIRY_MARGIN_S
    ctx.note(f"waiting {wait_s:g} s (grace {grace:g} s + {EXPIRY_MARGIN_S:g} s)")
    await asyncio.sleep(wait_s)
    b = await ctx.raw("g'")
    await b.send(a.resume_event())
    frame, _ = await b.recv_until(_resume_answer, 5.0)
    if frame is None:
        raise ProbeFailed(f"no answer to session.resume {wait_s:g} s after the drop")
    if frame.get("type") == "session.resumed":
        await b.close_session()
        raise ProbeFailed(
            f"the session was resumed {wait_s:g} s after the drop, past its {grace:g} s grace"
        )
    if frame.get("type") == "error" and describe(frame).startswith("session_resume_expired"):
        ctx.finding(f"expired within grace + {EXPIRY_MARGIN_S:g} s")
        return f"resume {wait_s:g} s after the drop: session_resume_expired"
    raise ProbeFailed(
        f"resume after the grace answered {frame.get('type')} {describe(frame)}, "
        "not session_resume_expired"
    )


@probe("journal-gap", expected_s=2, max_s=40)
async def journal_gap(ctx: ProbeContext) -> str:
    """A resume below the acknowledged seq that is not refused (a replay with a silent hole).

    ``session.event_ack`` lets the server trim its journal; a client that then resumes below
    what it acked asks for events that no longer exist. The server must answer
    ``session.resync_required{reason: journal_gap}`` instead of replaying with a hole, and the
    refusal must not consume the session or its token: a resume at the acked seq still works
    (docs/protocol.md §6.6, wire journal_gap).
    """
    ctx.require("supports_session_resume")
    a = await ctx.raw_session("j")
    for _ in range(3):
        await a.send(client_event("session.heartbeat"))
    while a.last_seq < 4:
        frame, _ = await a.recv(5.0)
        if frame is None:
            raise ProbeFailed(f"heartbeats were not answered (last seq {a.last_seq})")
    acked = a.last_seq
    await a.send(client_event("session.event_ack", server_event_seq=acked))
    await a.recv(0.3)  # an invalid_event_ack would show here
    a.abort()
    below = acked - 2
    b = await ctx.raw("j'")
    await b.send(a.resume_event(last_seq=below))
    frame, _ = await b.recv_until(_resume_answer, 5.0)
    problems: list[str] = []
    if frame is None:
        problems.append(f"no answer to a resume at seq {below} after acking {acked}")
    elif frame.get("type") == "session.resumed":
        problems.append(
            f"a resume at seq {below} after acking {acked} was accepted "
            "(events the client acked are gone: the replay has a hole)"
        )
    elif frame.get("type") != "session.resync_required" or frame.get("reason") != "journal_gap":
        problems.append(
            f"a resume below the ack was answered {frame.get('type')} "
            f"{describe(frame)}, not session.resync_required{{journal_gap}}"
        )
    b.ws.transport.abort()
    b.ended = True
    c = await ctx.raw("j''")
    await c.send(a.resume_event(last_seq=acked))
    frame, _ = await c.recv_until(_resume_answer, 5.0)
    if frame is None or frame.get("type") != "session.resumed":
        problems.append(
            f"afterwards a resume at the acked seq {acked} with the same token was "
            f"answered {describe(frame) if frame else 'with nothing'}"
        )
    else:
        await c.close_session()
    if problems:
        raise ProbeFailed("; ".join(problems))
    return "resume below the ack: session.resync_required{journal_gap}; session and token kept"


@probe("takeover", expected_s=2, max_s=40)
async def takeover(ctx: ProbeContext) -> str:
    """A takeover that leaves two sockets attached, or keeps the superseded token valid.

    A resume while the old socket is still open (a client that reconnected before noticing
    the old connection died) must detach the old socket with ``session.replaced`` and close
    it, so events are not split between two readers; the old token must stop working
    (docs/protocol.md §6.6, wire resume_takeover).
    """
    ctx.require("supports_session_resume")
    a = await ctx.raw_session("t")
    await a.send(client_event("session.heartbeat"))
    await a.recv_until(lambda f: f.get("type") == "session.heartbeat_ack", 5.0)
    old_token = a.resume_token
    b = await ctx.raw("t'")
    await b.send(a.resume_event())
    frame, _ = await b.recv_until(_resume_answer, 5.0)
    if frame is None or frame.get("type") != "session.resumed":
        raise ProbeFailed(
            f"resume while the old socket was open answered "
            f"{describe(frame) if frame else 'nothing'}"
        )
    problems: list[str] = []
    replaced, _ = await a.recv_until(lambda f: f.get("type") == "session.replaced", 3.0)
    if replaced is None:
        problems.append("the old socket got no session.replaced")
    closed = await a.wait_closed(3.0)
    if closed is None:
        problems.append("the old socket was still open 3 s after the takeover")
    elif replaced is not None and closed != (1000, "session_replaced"):
        ctx.note(f"old socket closed with {closed[0]} {closed[1]!r}")
    c = await ctx.raw("t''")
    await c.send(a.resume_event(token=old_token))
    frame, _ = await c.recv_until(_resume_answer, 5.0)
    if frame is not None and frame.get("type") == "session.resumed":
        problems.append("the superseded resume token still worked")
        b.session_id = c.session_id
        await c.close_session()
        b.ended = True
    c.ws.transport.abort()
    c.ended = True
    if not b.ended:
        await b.close_session()
    if problems:
        raise ProbeFailed("; ".join(problems))
    return "takeover: session.replaced to the old socket, old token refused"
