"""Probe ``admission``: the session limit is exact, its rejection documented, slots come back.

Also home of the helpers other probes use to learn the limit and to test whether a slot is
free (abandoned-handshake measures a slot's release with them).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from duplexctl.probe.context import ProbeContext, RawConn
from duplexctl.probe.model import ProbeFailed, ProbeSkipped
from duplexctl.probe.registry import probe
from duplexctl.protocol.client_state import client_event
from duplexctl.protocol.errors import WireError, parse_error

# Learning the limit by filling the server is bounded: beyond this, ask for --max-sessions.
MAX_LEARNED_LIMIT = 32
CLEAN_CLOSE_RELEASE_S = 1.0


@dataclass(slots=True)
class OpenAttempt:
    """One opening handshake: admitted (``raw`` holds the live session) or rejected."""

    raw: RawConn
    admitted: bool
    error: WireError | None
    frame: dict[str, Any] | None
    t_ns: int


async def attempt_open(ctx: ProbeContext, label: str, *, quiet: bool = False) -> OpenAttempt:
    """Connect and send the opening session.update; admitted or why not."""

    raw = await ctx.raw(label, quiet=quiet)
    obj = ctx.settings().to_session_object()
    await raw.send(client_event("session.update", session=obj))
    frame, t = await raw.recv_until(lambda f: f.get("type") in ("session.created", "error"), 10.0)
    if frame is not None and frame.get("type") == "session.created":
        return OpenAttempt(raw, True, None, frame, t)
    error = parse_error(frame) if frame is not None else None
    raw.ws.transport.abort()
    raw.ended = True
    return OpenAttempt(raw, False, error, frame, t)


async def close_all(attempts: list[OpenAttempt]) -> None:
    await asyncio.gather(
        *(a.raw.close_session(5.0) for a in attempts if a.admitted and not a.raw.ended),
        return_exceptions=True,
    )


async def learn_limit(ctx: ProbeContext) -> int:
    """The admission limit: from the options/embedded config, or by filling the server one
    session at a time until the rejection states it (sessions closed again afterwards)."""
    if ctx.facts.limit is not None:
        return ctx.facts.limit
    held: list[OpenAttempt] = []
    try:
        for k in range(MAX_LEARNED_LIMIT + 1):
            a = await attempt_open(ctx, f"learn{k + 1}-")
            if a.admitted:
                held.append(a)
                continue
            if a.error is None or not a.error.is_capacity:
                raise ProbeFailed(
                    f"open #{k + 1} was refused with {a.error.code if a.error else 'no answer'}"
                    ", not a capacity rejection"
                )
            limit = a.error.advertised_limit
            if limit is None:
                raise ProbeSkipped(
                    f"the capacity rejection states no limit ({a.error.message!r}); "
                    "pass --max-sessions"
                )
            if limit != len(held):
                raise ProbeFailed(
                    f"the server admitted {len(held)} sessions one at a time, then rejected "
                    f"the next one advertising limit={limit}"
                )
            ctx.facts.limit, ctx.facts.limit_source = limit, "advertised"
            ctx.note(f"learned the admission limit: {limit} (advertised by the rejection)")
            return limit
    finally:
        await close_all(held)
    raise ProbeSkipped(
        f"no rejection after {MAX_LEARNED_LIMIT + 1} sessions; pass --max-sessions to probe a "
        "larger limit"
    )


async def wait_admitted(
    ctx: ProbeContext, prefix: str, within_s: float, interval_s: float = 0.1
) -> OpenAttempt | None:
    """Try to open a session every ``interval_s`` until one is admitted (returned, live) or
    ``within_s`` passed (None). Rejections other than capacity end the wait with ProbeFailed."""
    t0 = time.monotonic()
    deadline = t0 + within_s
    n = 0
    while True:
        n += 1
        a = await attempt_open(ctx, f"{prefix}{n}-", quiet=n > 1)
        last = a.admitted or not (a.error and a.error.is_capacity)
        last = last or time.monotonic() + interval_s > deadline
        if last and n > 1:
            ctx.trace.muted.discard(a.raw.label)
            ctx.note(
                f"{n - 1 if a.admitted else n} open attempt(s), one every {interval_s:g} s, "
                "rejected as over "
                f"capacity during {time.monotonic() - t0:.1f} s"
            )
        if a.admitted:
            if n > 1:
                ctx.trace.add(a.raw.label, "in", "session.created", "admitted", t_ns=a.t_ns)
            return a
        if a.error is None or not a.error.is_capacity:
            raise ProbeFailed(
                f"open refused with {a.error.code if a.error else 'no answer'} while waiting "
                "for a free slot"
            )
        if time.monotonic() + interval_s > deadline:
            return None
        await asyncio.sleep(interval_s)


def rejection_problems(a: OpenAttempt, limit: int) -> list[str]:
    """What is wrong with a capacity rejection's shape (docs/protocol.md §6.7, §7.6)."""
    err, frame = a.error, a.frame or {}
    if err is None:
        return ["no rejection error at all (the connection just ended)"]
    problems = []
    if not err.is_capacity:
        problems.append(f"rejected with {err.code}, not resource_exhausted")
    elif err.flat:
        if err.code != "duplex_session_busy":
            problems.append(f"flat (G1) rejection with code {err.code}")
    else:
        if err.code != "resource_exhausted" or err.type != "rate_limit_error":
            problems.append(
                f"rejection is {err.type}/{err.code}, not rate_limit_error/resource_exhausted"
            )
    if err.advertised_limit != limit:
        problems.append(
            f"rejection advertises limit={err.advertised_limit}, expected {limit} ({err.message!r})"
        )
    if "server_event_seq" in frame:
        problems.append("the rejection is sequenced (no session exists to journal it)")
    return problems


@probe("admission", expected_s=6, max_s=60)
async def admission(ctx: ProbeContext) -> str:
    """An admission limit that is not exact under a burst, mis-states itself, or frees late.

    N+2 simultaneous opens against a limit of N must admit exactly N (two opens racing past
    the check is a double-booked GPU; rejecting below N wastes capacity), the rejections must
    be ``rate_limit_error/resource_exhausted`` with ``duplex_session_capacity_exhausted:
    limit=N`` (clients and load tools parse it), and a clean ``session.close`` must free the
    slot at once: a waiting client is admitted within a second (docs/protocol.md §6.7).
    """
    limit = await learn_limit(ctx)
    source = ctx.facts.limit_source
    if limit > MAX_LEARNED_LIMIT:
        raise ProbeSkipped(f"limit {limit} is above the probe's bound of {MAX_LEARNED_LIMIT}")
    burst = limit + 2
    ctx.note(f"burst of {burst} simultaneous opens against limit {limit} ({source})")
    attempts = await asyncio.gather(*(attempt_open(ctx, f"burst{k + 1}-") for k in range(burst)))
    admitted = [a for a in attempts if a.admitted]
    rejected = [a for a in attempts if not a.admitted]
    try:
        if len(admitted) != limit:
            raise ProbeFailed(
                f"{len(admitted)} of {burst} simultaneous opens admitted, limit is {limit}"
            )
        for a in rejected:
            problems = rejection_problems(a, limit)
            if problems:
                raise ProbeFailed(f"{a.raw.label.rstrip('-')}: " + "; ".join(problems))
        # a clean close frees the slot within a second
        first = admitted.pop(0)
        t_close = time.monotonic()
        if not await first.raw.close_session(5.0):
            raise ProbeFailed("session.close was not answered by session.closed")
        again = await wait_admitted(ctx, "after-close", CLEAN_CLOSE_RELEASE_S)
        if again is None:
            raise ProbeFailed(
                f"after a clean session.close the slot was still taken {CLEAN_CLOSE_RELEASE_S:g} "
                "s later"
            )
        admitted.append(again)
        release_ms = (again.t_ns / 1e9 - t_close) * 1000
        ctx.finding(
            f"limit {limit} ({source}) exact under a burst of {burst}; "
            f"slot free {release_ms:.0f} ms after session.close"
        )
    finally:
        await close_all(admitted)
    return f"exactly {limit} of {burst} admitted; rejections documented; clean close frees the slot"
