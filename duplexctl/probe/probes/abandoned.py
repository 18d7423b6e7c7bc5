"""Probe ``abandoned-handshake``: an open the client gave up on must not keep its slot."""

from __future__ import annotations

import asyncio
import socket
import time

from duplexctl.probe.context import ProbeContext, RawConn
from duplexctl.probe.model import ProbeFailed, ProbeSkipped
from duplexctl.probe.probes.admission import (
    MAX_LEARNED_LIMIT,
    OpenAttempt,
    attempt_open,
    close_all,
    learn_limit,
    wait_admitted,
)
from duplexctl.probe.registry import probe
from duplexctl.protocol.client_state import client_event

RELEASE_BOUND_S = 2.0  # a slot must be free this soon after the client vanished
MEASURE_BOUND_S = 60.0  # the longest the probe watches a held slot to measure the hold
UNKNOWN_GRACE_WATCH_S = 10.0  # how long it watches when the grace is not known


def _cork(raw: RawConn) -> bool:
    """Hold the next frame in the kernel so it leaves together with the FIN of the close.

    The server then has the disconnect in hand when it reads the ``session.update``: it
    cannot answer into a live connection, whatever the scheduling. Without this the result
    would depend on a race (measured on loopback: 13 of 20 plain send-then-abort attempts
    reached the reference server's read loop before the FIN, 0 of 20 corked ones). Linux
    only; elsewhere the probe sends and aborts as fast as it can.
    """
    cork = getattr(socket, "TCP_CORK", None)
    sock = raw.ws.transport.get_extra_info("socket")
    if cork is None or sock is None:
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, cork, 1)
    except OSError:
        return False
    return True


@probe("abandoned-handshake", expected_s=5, max_s=MEASURE_BOUND_S + 30)
async def abandoned_handshake(ctx: ProbeContext) -> str:
    """An admission slot leaked by a client that vanished before reading session.created.

    ``session.created`` is not journaled, so a client that sent ``session.update`` and
    disconnected before reading it has neither the session id nor the token: nobody can
    ever resume or close that session. A server that treats it as an ordinary disconnect
    keeps it in disconnect grace, holding an admission slot for the whole grace (30 s by
    default) — a burst of impatient clients (load balancer retries, timeouts) then locks
    everyone out (docs/protocol.md §6.6 "If session.created was never delivered", §6.7). The probe
    fills all but one slot, abandons a handshake in the last one (session.update, then TCP
    abort), and measures how long until a new session is admitted there; more than
    ``RELEASE_BOUND_S`` fails. Needs the limit (``--max-sessions``, or learned from a
    rejection's advertised limit).
    """
    limit = await learn_limit(ctx)
    if limit > MAX_LEARNED_LIMIT:
        raise ProbeSkipped(f"limit {limit} is above the probe's bound of {MAX_LEARNED_LIMIT}")
    grace = ctx.facts.disconnect_grace_s
    watch_s = min(grace + 3.0, MEASURE_BOUND_S) if grace is not None else UNKNOWN_GRACE_WATCH_S
    held: list[OpenAttempt] = []
    try:
        for k in range(limit - 1):
            a = await attempt_open(ctx, f"fill{k + 1}-")
            if not a.admitted:
                raise ProbeFailed(
                    f"could not fill slot {k + 1} of {limit} before the test "
                    f"({a.error.code if a.error else 'no answer'})"
                )
            held.append(a)
        # the last free slot: the client sends session.update and vanishes at once
        gone = await ctx.raw("abandon-")
        corked = _cork(gone)
        obj = ctx.settings().to_session_object()
        await gone.send(client_event("session.update", session=obj))
        gone.abort()
        if corked:
            ctx.note("session.update and the client's FIN left in one TCP segment (TCP_CORK)")
        t_gone = time.monotonic()
        ctx.note(
            f"abandoned a handshake in the last free slot ({limit - 1} of {limit} held); "
            f"watching the slot for up to {watch_s:g} s"
        )
        await asyncio.sleep(0.05)
        again = await wait_admitted(ctx, "retry", watch_s, interval_s=0.2)
        if again is None:
            grace_txt = (
                f"the server's disconnect grace is {grace:g} s ({ctx.facts.grace_source})"
                if grace is not None
                else "pass --disconnect-grace-s to measure the whole hold"
            )
            raise ProbeFailed(
                f"the abandoned handshake still holds its slot {watch_s:g} s later ({grace_txt})"
            )
        held.append(again)
        hold_s = again.t_ns / 1e9 - t_gone
        ctx.finding(
            f"slot free {hold_s * 1000:.0f} ms after the client vanished"
            + (f" (disconnect grace {grace:g} s)" if grace is not None else "")
        )
        if hold_s > RELEASE_BOUND_S:
            raise ProbeFailed(
                f"the abandoned handshake held its admission slot for {hold_s:.1f} s"
                + (f" (disconnect grace {grace:g} s)" if grace is not None else "")
                + f"; must be free within {RELEASE_BOUND_S:g} s"
            )
    finally:
        await close_all(held)
    return f"an abandoned handshake's slot was free again within {RELEASE_BOUND_S:g} s"
