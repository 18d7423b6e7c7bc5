"""Replay's step interpreter: the scenario's steps, one after the other, at exact offsets.

Steps only queue speech on the microphone, wait, and inject what the user does — a commit,
a barge-in, a cancel, a drop — at ``after_ms`` past their anchor; every measurement is the
other parts' (docs/architecture.md: replay). Each step records the turn it concerns, which
is what its expectations are judged against; a step never reached has no entry (the report
lists its expectations as "not reached", issue 17.6).

Headless (``load``), an interruption whose answer has already ended is skipped (and
counted): under load an answer may end early, and interrupting a finished answer measures
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib

from duplexctl.client.connection import ConnectionLostError, ResumeFailed
from duplexctl.report.turns import BargeTimes
from duplexctl.scenario.assembly import TurnAssembly
from duplexctl.scenario.listener import Listener
from duplexctl.scenario.microphone import ScriptedMicrophone
from duplexctl.scenario.model import (
    Anchor,
    BargeIn,
    Cancel,
    Commit,
    Drop,
    Interrupt,
    Pause,
    Say,
    Silence,
    Step,
    ToolOutput,
    TurnEnd,
    Wait,
)
from duplexctl.scenario.playback import ReplayPlayback
from duplexctl.scenario.state import LiveTurn, RunState, now_ns
from duplexctl.scenario.tools import ToolAnswerer
from duplexctl.units import NS_PER_MS, NS_PER_S


async def _first_set(*events: asyncio.Event) -> None:
    """Return as soon as one of ``events`` is set."""
    if any(e.is_set() for e in events):
        return
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


class StepInterpreter:
    """Runs the scenario's steps (see the module docstring)."""

    def __init__(
        self,
        run: RunState,
        mic: ScriptedMicrophone,
        playback: ReplayPlayback,
        listener: Listener,
        assembly: TurnAssembly,
        tools: ToolAnswerer,
    ) -> None:
        self.run = run
        self.mic = mic
        self.playback = playback
        self.listener = listener
        self.assembly = assembly
        self.tools = tools
        self._paused = False  # the step being run is followed by a pause

    async def run_steps(self) -> None:
        run = self.run
        steps = run.scenario.steps
        for i, step in enumerate(steps):
            run.steps_begun += 1
            self._paused = i + 1 < len(steps) and isinstance(steps[i + 1], Pause)
            turn = await self._step(step)
            run.step_turn[step.index] = turn
            run.report_dirty = True
        await self._drain()

    async def _step(self, step: Step) -> LiveTurn | None:
        run = self.run
        timeout = run.config.response_timeout_s
        if isinstance(step, Say):
            return self.mic.speak(
                step.index, step.file, step.commit, step.tail_ms, paused=self._paused
            )
        if isinstance(step, Pause):
            turn = run.latest()
            if turn is None or turn.speech_end_u is None:
                run.problems.append(f"step {step.index}: pause: no speech before it to pause")
                return turn
            self.mic.resume_after_pause(turn, step.file, step.ms, 200.0, paused=self._paused)
            return turn
        if isinstance(step, Silence):
            await asyncio.sleep(step.ms / 1000)
            return run.latest()
        if isinstance(step, Wait):
            turn = run.latest()
            if turn is not None:
                await self._wait_finished(turn, step.timeout_s or timeout)
            return turn
        if isinstance(step, Commit):
            turn = run.latest()
            event = run.session.commit(response_create=step.response_create)
            if run.commits is not None:
                run.commits.sent(turn, event)
            sent = await run.send(event)
            if turn is not None and turn.times.t_commit is None:
                turn.times.t_commit = sent
                if sent is not None and step.response_create:
                    self.assembly.committed(turn, sent)
            return turn
        if isinstance(step, BargeIn):
            return await self._barge_in(step)
        if isinstance(step, Cancel):
            return await self._cancel(step)
        if isinstance(step, Drop):
            return await self._drop(step)
        if isinstance(step, ToolOutput):
            return await self.tools.step(step)
        raise AssertionError(f"unknown step {step!r}")

    async def _anchor(self, step: BargeIn | Cancel | Drop, target: LiveTurn | None) -> bool:
        """Sleep until ``after_ms`` past the step's anchor; False if the anchor never came
        (or, headless, if the answer is over by then)."""
        run = self.run
        start = now_ns()
        headless = run.headless is not None
        if step.anchor is Anchor.FIRST_AUDIO and target is not None:
            try:
                async with asyncio.timeout(run.config.response_timeout_s):
                    if headless:
                        await _first_set(target.first_audio, target.done)
                    else:
                        await target.first_audio.wait()
            except TimeoutError:
                run.problems.append(
                    f"step {step.index}: {type(step).__name__.lower()}: the answer never "
                    f"started (no audio within {run.config.response_timeout_s:g} s)"
                )
                return False
            if not target.first_audio.is_set():
                return False  # headless: answered without audio, nothing to interrupt
            assert target.response_id is not None
            cs = run.conn.session if run.conn else None
            track = cs.responses.get(target.response_id) if cs else None
            # on a lane that streams silence too, the answer's audio is its first audible one
            first = None
            if track is not None and cs is not None:
                first = track.first_audible_ns if cs.model_native else track.first_audio_ns
            if first is not None:
                start = first
        delay = (start + step.after_ms * NS_PER_MS - now_ns()) / NS_PER_S
        if delay > 0:
            await asyncio.sleep(delay)
        if headless and target is not None and target.done.is_set():
            run.unanswered_interruptions += 1
            return False
        return True

    def _interrupt_kind(self, step: BargeIn) -> Interrupt:
        if step.interrupt is not None:
            return step.interrupt
        if self.run.config.end_mode in (TurnEnd.VAD, TurnEnd.MODEL):
            return Interrupt.SPEECH
        caps = self.run.conn.session.capabilities if self.run.conn else {}
        return Interrupt.BARGE_IN if caps.get("supports_barge_in") else Interrupt.CANCEL

    async def _barge_in(self, step: BargeIn) -> LiveTurn | None:
        target = self.run.latest()
        if not await self._anchor(step, target):
            return target
        turn = self.mic.speak(step.index, step.file, step.commit, step.tail_ms)
        if target is not None:
            turn.interrupts = target
            turn.interrupt_kind = self._interrupt_kind(step)
            target.interrupted_by = turn
        return target

    async def _cancel(self, step: Cancel) -> LiveTurn | None:
        run = self.run
        target = run.latest()
        if not await self._anchor(step, target):
            return target
        rid = target.response_id if target is not None else None
        event = run.session.response_cancel(rid)
        if target is None:
            await run.send(event)
            return None
        t_bi = await self.playback.stop_listening(target, event)
        target.times.barge = BargeTimes(kind="cancel", t_bi=t_bi)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(run.config.response_timeout_s):
                await target.done.wait()
        return target

    async def _drop(self, step: Drop) -> LiveTurn | None:
        run = self.run
        assert run.conn is not None
        conn = run.conn
        cs = conn.session
        target = run.latest()
        if not await self._anchor(step, target):
            return target
        r = self.listener.begin_resume(target, now_ns(), automatic=False)
        r.times.scripted_wait_ms = step.resume_after_ms
        try:
            r.times.t_drop = await conn.drop()
        except ConnectionLostError:
            r.times.outcome = "not_connected"
            return target
        if run.artifacts is not None:
            run.artifacts.note(r.times.t_drop, "drop", resume_after_ms=step.resume_after_ms)
        await asyncio.sleep(step.resume_after_ms / 1000)
        try:
            record = await conn.resume()
        except ResumeFailed as exc:
            record = exc.record
            run.problems.append(f"step {step.index}: drop: {exc}")
        rt = r.times
        rt.outcome = record.outcome or "unknown"
        if record.reconnect_ms is not None:
            rt.t_open = rt.t_drop + int(record.reconnect_ms * NS_PER_MS)
        rt.t_resumed = record.t_resumed_ns
        if record.t_resumed_ns is not None and record.resume_handshake_ms is not None:
            rt.t_resume_sent = record.t_resumed_ns - int(record.resume_handshake_ms * NS_PER_MS)
        if run.artifacts is not None and rt.t_resume_sent is not None:
            run.artifacts.event(
                "send",
                rt.t_resume_sent,
                {
                    "type": "session.resume",
                    "session_id": cs.session_id,
                    "resume_token": "<redacted>",
                    "last_received_server_event_seq": record.resumed_from_seq,
                },
            )
        if rt.outcome != "resumed":
            run.ended_by = run.ended_by or f"resume failed: {rt.outcome}"
            run.ended.set()
        return target

    async def _wait_finished(self, turn: LiveTurn, timeout: float) -> None:
        """Wait for the turn's speech to go out, then up to ``timeout`` for its answer;
        without one, the turn is given up on (an error: no silent turns)."""
        if turn.speech_end_u is not None:
            clip_left_s = max(0.0, (turn.speech_end_u - self.mic.position_ms) / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(clip_left_s + timeout):
                    await turn.eos_sent.wait()
        try:
            async with asyncio.timeout(timeout):
                await turn.finished.wait()
        except TimeoutError:
            self.assembly.stop_waiting(turn)

    async def _drain(self) -> None:
        """After the last step: let the speech still queued go out, and every turn get its
        answer within the response timeout — or be given up on (no silent turns)."""
        timeout = self.run.config.response_timeout_s
        for turn in self.run.turns:
            if turn.finished.is_set():
                continue
            marks = [u for u in (turn.speech_end_u, turn.commit_u) if u is not None]
            left_s = max([0.0, *((u - self.mic.position_ms) / 1000 for u in marks)])
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left_s + timeout):
                    await turn.finished.wait()
            self.assembly.stop_waiting(turn)
