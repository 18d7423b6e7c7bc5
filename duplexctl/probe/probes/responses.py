"""Probe ``responses``: every response.created ends in exactly one response.done."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from duplexctl.probe.context import (
    INPUT_RATE,
    ProbeConn,
    ProbeContext,
    silence,
    speech_chunks,
)
from duplexctl.probe.model import ProbeFailed
from duplexctl.probe.registry import probe
from duplexctl.protocol import cadence
from duplexctl.protocol.client_state import AudioDelta, ErrorReceived, ResponseCreated

DONE_WITHIN_S = 15.0  # a reply's whole length plus margin; the reference reply is 2.3 s
UNIT_MS = 1000  # MiniCPM-o's model unit: a lane stepping faster is frame-locked
_LIFECYCLE_VIOLATIONS = frozenset(
    {"duplicate_response_done", "response_done_without_created", "delta_after_response_done"}
)


def open_responses(pc: ProbeConn) -> list[str]:
    return [rid for rid in pc.session.response_order if not pc.session.responses[rid].done]


async def settle(pc: ProbeConn, within_s: float) -> list[str]:
    """Read until every created response has its response.done (or ``within_s`` passed);
    the ids still open. A short tail afterwards catches a duplicate response.done."""
    deadline = time.monotonic() + within_s
    while open_responses(pc) and (remaining := deadline - time.monotonic()) > 0:
        if await pc.next(remaining) is None and not pc.conn.connected:
            break
    await pc.collect(0.3)
    return open_responses(pc)


def judge(
    pc: ProbeConn,
    case: str,
    problems: list[str],
    within_s: float,
    still_open: list[str],
) -> None:
    for rid in still_open:
        track = pc.session.responses[rid]
        created = pc.ctx.trace.ms(track.created_ns) if track.created_ns else None
        problems.append(
            f"{case}: response {rid} (created at {created} ms) has no response.done "
            f"{within_s:g} s later"
        )
    for v in pc.session.checker.violations:
        if v.name in _LIFECYCLE_VIOLATIONS:
            problems.append(f"{case}: {v.name}: {v.detail}")


async def _turn_case(
    ctx: ProbeContext, case: str, interrupt: str | None, problems: list[str]
) -> str:
    """One client-committed turn, optionally interrupted at its first audio delta."""
    pc = await ctx.open(f"{case}-")
    try:
        await pc.speak()
        created = await pc.wait_for(
            lambda h: isinstance(h, ResponseCreated), 10.0, f"response.created ({case})"
        )
        rid = created.response_id  # type: ignore[attr-defined]
        if interrupt is not None:
            await pc.wait_for(
                lambda h: isinstance(h, AudioDelta) and h.response_id == rid,
                10.0,
                f"audio of {rid} ({case})",
            )
            event = (
                pc.session.response_cancel(rid)
                if interrupt == "response.cancel"
                else pc.session.barge_in()
            )
            await pc.send(event)
        still_open = await settle(pc, DONE_WITHIN_S)
        judge(pc, case, problems, DONE_WITHIN_S, still_open)
        track = pc.session.responses[rid]
        return f"{case}: {track.status or 'open'}" + (f"/{track.reason}" if track.reason else "")
    finally:
        await pc.close()


async def _native_case(ctx: ProbeContext, problems: list[str]) -> str:
    """Model-native lane with unit-aligned appends (the first unit closes at 1030 ms, then
    every 1000 ms — MiniCPM-o, docs/protocol.md §5), paced in real time. Any append the server
    fails (``runtime_append_*``) while a response it created is open must still end that
    response; on a healthy server this just checks the native lane's responses end."""
    settings = replace(ctx.settings(), auto_response=True)
    pc = await ctx.try_open("native-", settings)
    if pc is None:
        return "native lane: refused by the server (auto_response), not checked"
    try:
        first = b"".join(speech_chunks(1000)) + silence(30)
        unit = silence(1000)
        failed_appends = 0
        t_next = time.monotonic()
        for k in range(8):
            await pc.send(pc.session.append(first if k == 0 else unit))
            t_next += len(first if k == 0 else unit) / (2 * INPUT_RATE)
            for h in await pc.collect(max(0.0, t_next - time.monotonic())):
                if isinstance(h, ErrorReceived) and h.error.code.startswith("runtime_append"):
                    failed_appends += 1
            if k >= 3 and pc.session.response_order and not open_responses(pc):
                break
        still_open = await settle(pc, DONE_WITHIN_S)
        judge(pc, "native lane", problems, DONE_WITHIN_S, still_open)
        n = len(pc.session.response_order)
        what = f"{failed_appends} failed appends" if failed_appends else "no append failed"
        return f"native lane: {n} response(s), {what}"
    finally:
        await pc.close()


async def _frame_case(ctx: ProbeContext, problems: list[str]) -> str:
    """A frame-locked lane (docs/protocol.md §13): speech then silence streamed in sub-frame
    packets; the response the model answers in must end in exactly one ``response.done``
    (its end of speech). The response that opens after it stays open while the model
    listens, by design: it is not judged."""
    settings = replace(ctx.settings(), auto_response=True)
    pc = await ctx.try_open("frame-", settings)
    if pc is None:
        return "frame-locked lane: refused by the server (auto_response), not checked"
    try:
        pc.stream(1000)
        cs = pc.session

        def answered() -> list[str]:
            return [r for r in cs.response_order if cs.responses[r].answer_start_ns]

        deadline = time.monotonic() + DONE_WITHIN_S
        while (remaining := deadline - time.monotonic()) > 0:
            spoken = answered()
            if spoken and all(cs.responses[r].done for r in spoken):
                break
            await pc.next(remaining)
        await pc.collect(0.5)
        spoken = answered()
        if not spoken:
            problems.append(
                f"frame-locked lane: the model did not answer within {DONE_WITHIN_S:g} s"
            )
        still_open = [r for r in spoken if not cs.responses[r].done]
        judge(pc, "frame-locked lane", problems, DONE_WITHIN_S, still_open)
        return (
            f"frame-locked lane: {len(cs.response_order)} response(s), {len(spoken)} spoken, "
            f"{cs.packet_ms(100, INPUT_RATE).packet_ms} ms packets"
        )
    finally:
        await pc.close()


@probe("responses", expected_s=14, max_s=120)
async def responses(ctx: ProbeContext) -> str:
    """Responses that never end (or end twice): a turn gate stuck closed, a slot held.

    ``response.done`` is what frees the turn: clients wait for it before the next turn, the
    server's own gate waits for it, and a response without one holds the session's model
    slot until the session dies. Checked for a completed reply, a ``response.cancel``, a
    ``barge_in`` (when supported) and the model-native lane, where an append that fails
    inside the server (``runtime_append_failed``) must still end the response it created
    with a failed ``response.done`` (docs/metrics.md invariants; docs/protocol.md §4.2).
    """
    problems: list[str] = []
    outcomes: list[str] = []
    if ctx.facts.auto_response_only:  # no commit lane: the model answers by itself (§13)
        outcomes.append("committed turns: not checked (model-native sessions only)")
    else:
        outcomes += [
            await _turn_case(ctx, "completed", None, problems),
            await _turn_case(ctx, "cancelled", "response.cancel", problems),
        ]
        if ctx.capability("supports_barge_in") is not False:
            outcomes.append(await _turn_case(ctx, "barge-in", "barge_in", problems))
    step = cadence.frame_ms(ctx.facts.capabilities)
    if step is not None and step < UNIT_MS:
        outcomes.append(await _frame_case(ctx, problems))
    else:
        outcomes.append(await _native_case(ctx, problems))
    await asyncio.sleep(0)
    for o in outcomes:
        ctx.finding(o)
    if problems:
        raise ProbeFailed("; ".join(problems))
    return "every response.created ended in exactly one response.done"
