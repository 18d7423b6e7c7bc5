"""Probe ``heartbeat``: heartbeats keep a quiet session alive past its idle timeout."""

from __future__ import annotations

import time

from duplexctl.probe.context import ProbeContext
from duplexctl.probe.model import ProbeFailed
from duplexctl.probe.registry import probe
from duplexctl.protocol.client_state import client_event

IDLE_TIMEOUT_S = 2  # set in the opening session object (only the opening update can set it)
QUIET_FOR_S = 5.0  # 2.5 idle timeouts of nothing but heartbeats
HEARTBEAT_EVERY_S = 0.7
DROP_WITHIN_S = IDLE_TIMEOUT_S + 3.0


@probe("heartbeat", expected_s=11, max_s=45)
async def heartbeat(ctx: ProbeContext) -> str:
    """A quiet session dropped although the client sends heartbeats (or never dropped at all).

    A client that is listening, not talking, sends nothing but ``session.heartbeat``; the
    server's receive timeout (the session's ``idle_timeout_s``) must count heartbeats as
    activity, or every pause in a conversation longer than the timeout kills the session
    (docs/protocol.md §6.8). The probe opens with ``idle_timeout_s`` = 2, sends only heartbeats
    for 5 s (each must be acked, the socket must stay up), then goes silent: the server must
    now drop the socket within the timeout (+3 s) — proof that the timeout was real and the
    heartbeats are what kept the session. The dropped session is then resumed and closed.
    """
    a = await ctx.raw_session("hb", idle_timeout_s=IDLE_TIMEOUT_S)
    echoed = None
    rtts: list[float] = []
    start = time.monotonic()
    while time.monotonic() - start < QUIET_FOR_S:
        t_sent = time.monotonic_ns()
        await a.send(client_event("session.heartbeat"))
        ack, t_ack = await a.recv_until(lambda f: f.get("type") == "session.heartbeat_ack", 2.0)
        if ack is None:
            if a.ended:
                code, reason = a.close_code()
                raise ProbeFailed(
                    f"the server dropped the session {time.monotonic() - start:.1f} s into a "
                    f"quiet period although a heartbeat was sent every {HEARTBEAT_EVERY_S:g} s "
                    f"(idle_timeout_s={IDLE_TIMEOUT_S}; code {code} {reason})"
                )
            raise ProbeFailed("session.heartbeat got no session.heartbeat_ack within 2 s")
        rtts.append((t_ack - t_sent) / 1e6)
        await a.recv(max(0.0, HEARTBEAT_EVERY_S - (time.monotonic_ns() - t_sent) / 1e9))
    ctx.note(f"quiet with heartbeats for {QUIET_FOR_S:g} s; now silent")
    t_silent = t_sent / 1e9  # the last client frame
    closed = await a.wait_closed(DROP_WITHIN_S)
    if closed is None:
        raise ProbeFailed(
            f"idle_timeout_s={IDLE_TIMEOUT_S} was not enforced: the socket was still open "
            f"{DROP_WITHIN_S:g} s after the last client frame (so the heartbeats proved nothing)"
        )
    dropped_after = time.monotonic() - t_silent
    await ctx.reclaim(a)
    echoed = f"heartbeat rtt max {max(rtts):.1f} ms over {len(rtts)}"
    ctx.finding(
        f"{echoed}; dropped {dropped_after:.1f} s after the last frame "
        f"(idle_timeout_s={IDLE_TIMEOUT_S}, code {closed[0]})"
    )
    return f"heartbeats kept the session {QUIET_FOR_S:g} s past a {IDLE_TIMEOUT_S} s idle timeout"
