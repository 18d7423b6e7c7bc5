"""Probe ``epoch-fencing``: nothing of a cancelled response after its response.done."""

from __future__ import annotations

from duplexctl.probe.context import ProbeContext, audio_of, done_of
from duplexctl.probe.model import ProbeFailed
from duplexctl.probe.registry import probe
from duplexctl.protocol import names
from duplexctl.protocol.client_state import ResponseCreated

# (how to interrupt, when): at response.created the generator has not produced anything yet;
# at the first delta it is between chunks — both are where a late chunk slips out.
ROUNDS = (
    ("response.cancel", "created"),
    ("response.cancel", "first-delta"),
    ("output_audio_buffer.clear", "first-delta"),
)
WATCH_S = 1.5  # how long after response.done late output is looked for (> one chunk period)
_DELTAS = frozenset({names.AUDIO_DELTA, names.TRANSCRIPT_DELTA, names.TEXT_DELTA})


@probe("epoch-fencing", expected_s=9, max_s=90)
async def epoch_fencing(ctx: ProbeContext) -> str:
    """Audio of a cancelled response that keeps coming after its response.done.

    Cancellation is atomic at the session (docs/protocol.md §6.4): once the epoch advanced and
    ``response.done`` went out, no delta of the old response or epoch may follow — a client
    that already flushed its speaker would otherwise play stale speech over the next turn.
    Each round interrupts a reply (``response.cancel`` at ``response.created`` and at the
    first delta, ``output_audio_buffer.clear`` at the first delta) and watches for
    ``WATCH_S`` after its ``response.done``.
    """
    ctx.require_client_turns("interrupting a reply at response.created or its first delta")
    pc = await ctx.open("fence-")
    problems: list[str] = []
    try:
        for how, when in ROUNDS:
            await pc.speak()
            h = await pc.wait_for(
                lambda h: isinstance(h, ResponseCreated), 10.0, "response.created"
            )
            rid = h.response_id  # type: ignore[attr-defined]
            if when == "first-delta":
                await pc.wait_for(
                    audio_of(rid),
                    10.0,
                    f"audio of {rid}",
                )
            event = (
                pc.session.response_cancel(rid)
                if how == "response.cancel"
                else pc.session.output_audio_buffer_clear(rid)
            )
            await pc.send(event)
            done = await pc.wait_for(
                done_of(rid),
                10.0,
                f"response.done of {rid} after {how}",
            )
            new_epoch = max(pc.session.epoch, done.epoch or 0)
            late = [
                h
                for h in await pc.collect(WATCH_S)
                if h.type in _DELTAS
                and (
                    getattr(h, "response_id", None) == rid
                    or (h.epoch is not None and h.epoch < new_epoch)
                )
            ]
            for h in late:
                problems.append(
                    f"{how} at {when}: {h.type} of {getattr(h, 'response_id', '?')} "
                    f"(epoch {h.epoch}) {ctx.trace.ms(h.recv_ns) - ctx.trace.ms(done.recv_ns):.0f}"
                    f" ms after its response.done (epoch now {new_epoch})"
                )
        for v in pc.session.checker.violations:
            if v.name in ("delta_after_response_done", "old_epoch_delta"):
                problems.append(f"{v.name}: {v.detail}")
    finally:
        await pc.close()
    if problems:
        raise ProbeFailed("; ".join(dict.fromkeys(problems)))
    return f"{len(ROUNDS)} interrupted replies: no output after their response.done"
