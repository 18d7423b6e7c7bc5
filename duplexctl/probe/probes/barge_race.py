"""Probe ``barge-in-race``: an interruption racing the previous append still gets answered."""

from __future__ import annotations

import asyncio

from duplexctl.probe.context import ProbeContext, audio_of, speech_chunks
from duplexctl.probe.model import ProbeFailed
from duplexctl.probe.registry import probe
from duplexctl.protocol.client_state import ResponseCreated, ResponseDone

# How long after an append the barge_in is sent, one iteration each: 0 ms puts both in the
# same server read, the others land while the append is being applied or just after.
OFFSETS_MS = (0, 0, 1, 2, 5, 10, 20, 50)
ANSWER_WITHIN_S = 6.0


@probe("barge-in-race", expected_s=8, max_s=90)
async def barge_in_race(ctx: ProbeContext) -> str:
    """A turn gate left closed by a barge-in that races an append: the next turn is never answered.

    vLLM-Omni applies an append in a task; a ``barge_in`` that arrives while the previous
    append is completing must cancel the running reply *and* leave the turn gate open, so the
    interrupting utterance gets its own response. If the gate stays closed the user is
    committed but never answered — the session looks alive and is dead. The probe interrupts
    a speaking reply ``len(OFFSETS_MS)`` times in one session, sending ``barge_in`` 0-50 ms
    after an append of overlapping speech, then the new utterance and a commit; each
    iteration must see the old reply cancelled and a new ``response.created``.
    """
    ctx.require("supports_barge_in")
    pc = await ctx.open("race-")
    try:
        await pc.speak()
        h = await pc.wait_for(
            lambda h: isinstance(h, ResponseCreated), 10.0, "the first response.created"
        )
        current = h.response_id  # type: ignore[attr-defined]
        overlap = speech_chunks(100)[0]
        for k, offset in enumerate(OFFSETS_MS, start=1):
            await pc.wait_for(
                audio_of(current),
                10.0,
                f"audio of {current} (iteration {k})",
            )
            ctx.note(f"iteration {k}: barge_in {offset} ms after an append, over {current}")
            await pc.send(pc.session.append(overlap))
            if offset:
                await asyncio.sleep(offset / 1000)
            await pc.send(pc.session.barge_in())
            await pc.speak(400)
            seen_done = False
            new: str | None = None
            while new is None:
                try:
                    h = await pc.wait_for(
                        lambda h: isinstance(h, ResponseCreated | ResponseDone),
                        ANSWER_WITHIN_S,
                        "response.created",
                    )
                except ProbeFailed:
                    done = pc.session.responses[current]
                    raise ProbeFailed(
                        f"iteration {k} (barge_in {offset} ms after an append): the "
                        f"interrupted reply ended {done.status or 'never'}"
                        f"{'/' + done.reason if done.reason else ''}, but the new utterance "
                        f"was committed and got no response within {ANSWER_WITHIN_S:g} s"
                    ) from None
                if isinstance(h, ResponseDone) and h.response_id == current:
                    seen_done = True
                elif isinstance(h, ResponseCreated) and h.response_id != current:
                    new = h.response_id
            if not seen_done and not pc.session.responses[current].done:
                raise ProbeFailed(f"iteration {k}: {current} got no response.done after barge_in")
            current = new
        await pc.send(pc.session.response_cancel(current))
        await pc.collect(0.3)
    finally:
        await pc.close()
    ctx.finding(f"{len(OFFSETS_MS)} interruptions, offsets {', '.join(map(str, OFFSETS_MS))} ms")
    return f"all {len(OFFSETS_MS)} racing interruptions got their own response"
