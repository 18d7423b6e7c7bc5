"""Probe ``tool-calls``: a tool call is answered once, a stray result refused, a cancel forgets."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Final

from duplexctl.probe.context import ProbeConn, ProbeContext
from duplexctl.probe.model import ProbeFailed, ProbeSkipped
from duplexctl.probe.registry import probe
from duplexctl.protocol.client_state import (
    ErrorReceived,
    FunctionCall,
    Happening,
    ResponseDone,
    TranscriptDelta,
)

#: the tool every probe session declares unless ``probe --tools`` names others
DEFAULT_TOOLS: Final[list[dict[str, Any]]] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
CALL_WITHIN_S: Final = 12.0  # the user's turn, the model's end-of-turn wait, the call's frames
ANSWER_WITHIN_S: Final = 3.0  # an item or an error answering a function_call_output
FORGOTTEN_WATCH_S: Final = 4.0  # after the cancel: no answer to the forgotten result
TAKEN_AFTER_S: Final = 0.5  # the model takes a result on its next frame (80 ms): cancel after
REFUSED: Final = "invalid_function_call_output"
UNKNOWN_CALL: Final = "call_duplexctl_probe_unknown"


def _output_item(h: Happening, call_id: str) -> bool:
    item = h.frame.get("item") if h.type == "conversation.item.added" else None
    return (
        isinstance(item, dict)
        and item.get("type") == "function_call_output"
        and item.get("call_id") == call_id
    )


def _answered(pc: ProbeConn, h: Happening) -> bool:
    """``h`` ends a spoken answer: the model answered without a tool call."""
    if not isinstance(h, ResponseDone):
        return False
    track = pc.session.responses.get(h.response_id)
    return track is not None and track.kind == "audio" and track.first_audible_ns is not None


async def _answer(pc: ProbeConn, call_id: str, output: Any) -> tuple[str | None, bool]:
    """Send a ``function_call_output``; (the error code it got, whether its item came)."""
    await pc.send(pc.session.function_call_output(call_id, output))
    deadline = time.monotonic() + ANSWER_WITHIN_S
    error: str | None = None
    while (remaining := deadline - time.monotonic()) > 0:
        h = await pc.next(remaining)
        if h is None:
            if not pc.conn.connected:
                break
            continue
        if isinstance(h, ErrorReceived) and h.error.code != "playback_item_not_found":
            error = h.error.code
            break
        if _output_item(h, call_id):
            return None, True
    return error, False


@probe("tool-calls", expected_s=16, max_s=90)
async def tool_calls(ctx: ProbeContext) -> str:
    """A tool call answered twice, a result for no call accepted, or a cancel that keeps a
    forgotten result.

    A tool call is owed exactly one ``function_call_output`` (docs/protocol.md §13.4): a
    second one for the same call, or one naming a call the model never made, must be refused
    with ``invalid_function_call_output`` — a server that takes them feeds the model results
    it did not ask for. And ``response.cancel`` while a result is still pending is a reset on
    a model whose memory is its request (§13.3): the answer is ``response.done`` cancelled
    (``client_cancelled``) and a result the model was reading is forgotten, never answered
    afterwards (the probe cancels ``TAKEN_AFTER_S`` after the result, once the model has
    taken it: one sent just before a cancel survives it in the session). The probe
    declares a tool (``get_weather``, or ``probe --tools FILE.json``), speaks a turn and waits
    for the model to call it; a model that calls nothing is skipped, not failed.
    """
    tools = ctx.facts.tools or DEFAULT_TOOLS
    pc = await ctx.try_open("tool-", replace(ctx.settings(), tools=tools))
    if pc is None:
        raise ProbeSkipped(f"the server refused a session declaring tools ({ctx.last_refusal})")
    try:
        if ctx.facts.auto_response_only:
            pc.stream(1000)  # the model takes its turn by itself
        else:
            await pc.speak(1000)  # a committed turn
        names_ = ", ".join(t.get("name") or t.get("function", {}).get("name") for t in tools)
        hint = f"tools declared: {names_}; declare one it calls with probe --tools FILE.json"
        try:
            call = await pc.wait_for(
                lambda h: isinstance(h, FunctionCall) or _answered(pc, h),
                CALL_WITHIN_S,
                "tool call",
            )
        except ProbeFailed:
            raise ProbeSkipped(
                f"the model made no tool call within {CALL_WITHIN_S:g} s of a turn ({hint})"
            ) from None
        if not isinstance(call, FunctionCall):
            raise ProbeSkipped(f"the model answered the turn without calling a tool ({hint})")
        ctx.finding(f"the model called {call.name}({call.arguments}) as {call.call_id}")
        problems: list[str] = []
        error, taken = await _answer(pc, UNKNOWN_CALL, "{}")
        if error != REFUSED:
            what = "accepted" if taken else f"answered {error or 'with nothing'}"
            problems.append(f"a result for a call never made was {what}, not {REFUSED}")
        error, taken = await _answer(pc, call.call_id, '{"temperature_c": 21}')
        if not taken:
            problems.append(f"the result of {call.call_id} was not taken ({error or 'no item'})")
        error, taken = await _answer(pc, call.call_id, '{"temperature_c": 22}')
        if error != REFUSED:
            what = "accepted" if taken else f"answered {error or 'with nothing'}"
            problems.append(f"a second result for {call.call_id} was {what}, not {REFUSED}")
        problems += await _cancel_while_pending(pc)
        if problems:
            raise ProbeFailed("; ".join(problems))
        return (
            "one result per call: a stray and a second result refused "
            f"({REFUSED}); a cancel with the result pending reset the model"
        )
    finally:
        await pc.close()


async def _cancel_while_pending(pc: ProbeConn) -> list[str]:
    """``response.cancel`` while the model reads the result (it takes one on its next frame,
    then reads it one token per frame): cancelled, then never answered."""
    cs = pc.session
    await pc.collect(TAKEN_AFTER_S)
    epoch = cs.epoch
    await pc.send(cs.response_cancel())
    try:
        done = await pc.wait_for(
            lambda h: isinstance(h, ResponseDone) and h.status == "cancelled",
            ANSWER_WITHIN_S,
            "a cancelled response.done",
        )
    except ProbeFailed as exc:
        return [f"response.cancel with a result pending: {exc.summary}"]
    assert isinstance(done, ResponseDone)
    problems = []
    if done.reason != "client_cancelled":
        problems.append(f"the cancel ended {done.response_id} with reason {done.reason}")
    after = await pc.collect(FORGOTTEN_WATCH_S)
    spoke = [h for h in after if isinstance(h, TranscriptDelta) and h.delta]
    if cs.epoch <= epoch:
        problems.append("the cancel did not start a new epoch")
    if spoke:
        text = "".join(h.delta for h in spoke)[:80]
        problems.append(
            f"after the cancel the model answered the forgotten result within "
            f"{FORGOTTEN_WATCH_S:g} s: {text!r}"
        )
    return problems
