"""Replay's tool answerer: every tool call the model makes, answered exactly once
(docs/protocol.md §13.4).

The listener hands over each :class:`~duplexctl.protocol.client_state.FunctionCall` at
receive time. The call belongs to the turn awaiting its answer (a tool call is how the model
answers it, before it speaks) and is recorded there (``TurnTimes.tool_calls``: the figures of
docs/metrics.md "Tool calls"). Who answers it:

* a ``tool_output`` step waiting for a call (of its ``name``, or any): it sends its
  ``output`` (or the ``--tool-outputs`` entry of the tool called) ``latency_ms`` after the
  call;
* else the ``--tool-outputs`` map: the entry of the tool called, after its ``latency_ms``;
* else nobody: the call is recorded as unanswered, an error of the run
  (``unanswered_tool_call``) — the model waits for its result, so the turn will not be
  answered either.

The answer is ``conversation.item.create`` with a ``function_call_output`` item, never a
``response.create`` (the model takes the result by itself on a model-native lane; the
Nemotron lane refuses ``response.create`` while its audio response is open). A call is
claimed once, when its answer is scheduled, so a step and the map can never both answer it,
and a duplicate call event is ignored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Final

from duplexctl.aio import cancel_and_wait
from duplexctl.protocol.client_state import FunctionCall
from duplexctl.report.turns import ToolCallTimes
from duplexctl.scenario.model import ToolOutput
from duplexctl.scenario.state import LiveTurn, RunState, now_ns

#: the error code of a tool call nothing answered (report.json ``errors``)
UNANSWERED_CALL: Final = "unanswered_tool_call"


@dataclass(eq=False)
class Call:
    """One tool call: the happening, the turn it belongs to, its times, whether claimed."""

    call: FunctionCall
    turn: LiveTurn | None
    times: ToolCallTimes
    claimed: bool = False


class ToolAnswerer:
    """Answers the model's tool calls (see the module docstring)."""

    def __init__(self, run: RunState) -> None:
        self.run = run
        self.calls: dict[str, Call] = {}
        self._waiting: list[tuple[str | None, asyncio.Future[Call]]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    # -- fed by the listener -----------------------------------------------------------------

    def on_call(self, h: FunctionCall) -> None:
        """A call arrived (receive path: quick, no await)."""
        if not h.call_id or h.call_id in self.calls:
            return  # a duplicate event: the call is answered once
        run = self.run
        turn = run.awaiting(need_eos=False) or run.latest()
        times = ToolCallTimes(call_id=h.call_id, name=h.name, t_call=h.recv_ns)
        if turn is not None:
            turn.times.tool_calls.append(times)
        call = self.calls[h.call_id] = Call(h, turn, times)
        run.report_dirty = True
        for name, future in list(self._waiting):
            if not future.done() and name in (None, h.name):
                call.claimed = True
                future.set_result(call)
                return
        entry = (run.config.tool_outputs or {}).get(h.name or "")
        if entry is not None:
            call.claimed = True
            self._spawn(self._answer(call, entry["output"], entry["latency_ms"]))

    # -- the tool_output step ------------------------------------------------------------------

    async def step(self, step: ToolOutput) -> LiveTurn | None:
        """Wait for the next unclaimed call (of ``step.name``), then answer it."""
        run = self.run
        call = next(
            (c for c in self.calls.values() if not c.claimed and step.name in (None, c.call.name)),
            None,
        )
        if call is not None:
            call.claimed = True
        else:
            future: asyncio.Future[Call] = asyncio.get_running_loop().create_future()
            waiter = (step.name, future)
            self._waiting.append(waiter)
            timeout = step.timeout_s or run.config.response_timeout_s
            try:
                async with asyncio.timeout(timeout):
                    call = await future
            except TimeoutError:
                what = f"a call of {step.name}" if step.name else "a tool call"
                run.problems.append(
                    f"step {step.index}: tool_output: the model made no {what} within {timeout:g} s"
                )
                return run.latest()
            finally:
                self._waiting.remove(waiter)
        entry = (run.config.tool_outputs or {}).get(call.call.name or "")
        output = step.output if step.output is not None else (entry or {}).get("output")
        if output is None:
            run.problems.append(
                f"step {step.index}: tool_output: no output for {call.call.name} (give the "
                "step an output, or --tool-outputs an entry for it)"
            )
            return call.turn
        latency = step.latency_ms
        if latency is None:
            latency = entry["latency_ms"] if entry is not None else 0.0
        await self._answer(call, output, latency)
        return call.turn

    # -- answering ---------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, call: Call, output: str, latency_ms: float) -> None:
        """``latency_ms`` after the call, its ``function_call_output`` (once)."""
        run = self.run
        delay = (call.times.t_call - now_ns()) / 1e9 + latency_ms / 1000.0
        if delay > 0:
            await asyncio.sleep(delay)
        if call.times.outputs:
            return
        event = run.session.function_call_output(call.call.call_id, output)
        sent = await run.send(event)
        if sent is None:
            return  # no socket: the call stays unanswered (an error at the end)
        call.times.t_output = sent
        call.times.outputs += 1
        run.report_dirty = True

    def finish(self) -> None:
        """The run ends: every call nothing answered is an error of the run."""
        run = self.run
        for call in self.calls.values():
            if call.times.outputs:
                continue
            turn = call.turn.index if call.turn is not None else None
            run.errors.append(
                {
                    "t_ms": run.t_ms(call.times.t_call),
                    "code": UNANSWERED_CALL,
                    "message": f"turn {turn}: the model called {call.call.name} "
                    f"({call.call.call_id}) and nothing answered it (a tool_output step, or "
                    "--tool-outputs with an entry for it)",
                    "turn": turn,
                }
            )

    async def close(self) -> None:
        await cancel_and_wait(*self._tasks)
