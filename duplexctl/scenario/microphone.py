"""Replay's microphone: appends on the pacer's absolute schedule, and the marks they carry.

Clips queued by steps, silence otherwise — the user's clock never waits for the server. The
microphone stamps each turn's reference points from the send of the append that carries
them (``t_speech_start``, ``t_eos``, docs/metrics.md "Clocks"), sends the client commit
``tail_ms`` after the speech, and at the onset of a barge-in sends the explicit interrupt
(after telling the server what was heard: flush, the duty's ack, then the event).

Headless (``load``), the loop is also the session's only timer: after each append it sends
what the playback duty says is owed, at most ``chunk_ms`` late, so a session costs one timer,
not two. Per append the work is O(1) unless a reference point is due.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import numpy as np

from duplexctl.audio.pacer import MicQueue, Pacer
from duplexctl.audio.pacer import Pace as PacerPace
from duplexctl.behaviour.timeline import USER
from duplexctl.report.turns import BargeTimes
from duplexctl.scenario.assembly import TurnAssembly
from duplexctl.scenario.clips import AppendCache, SpokenClip
from duplexctl.scenario.model import Interrupt, Pace, TurnEnd
from duplexctl.scenario.playback import ReplayPlayback
from duplexctl.scenario.state import LiveTurn, RunState, now_ns
from duplexctl.units import NS_PER_MS, NS_PER_S


class ScriptedMicrophone:
    """The send side of a run's user audio (see the module docstring)."""

    def __init__(
        self,
        run: RunState,
        playback: ReplayPlayback,
        assembly: TurnAssembly,
        clips: dict[Path, SpokenClip],
    ) -> None:
        self.run = run
        self.playback = playback
        self.assembly = assembly
        self.clips = clips
        config = run.config
        s = config.settings
        headless = run.headless
        self.input_format = s.input_format_canonical
        appends = headless.appends if headless is not None else None
        if appends is not None and appends.wire_format != self.input_format:
            raise ValueError(f"append cache is {appends.wire_format}, not {self.input_format}")
        self._encode = (appends or AppendCache(self.input_format, limit=0)).encode
        # the user channel's frame energies, shared by the process's sessions (load)
        self._energies = headless.energies if headless is not None else None
        self.queue = MicQueue(s.input_rate)
        self.pacer = Pacer(
            config.chunk_ms,
            s.input_rate,
            pace=PacerPace(config.pace.value),
            source=self.queue,
            grid=headless.send_grid if headless is not None else None,
        )
        self._marking: list[LiveTurn] = []  # turns whose reference points are still due
        self._learned_samples: int | None = None  # the refusal limit the cadence follows
        self._next_mark_ms = math.inf  # no append ending before this can stamp anything
        self._late_commits: set[asyncio.Task[None]] = set()

    # -- queueing speech -----------------------------------------------------------------------

    def speak(
        self, step: int, path: Path, commit: bool | None, tail_ms: float, *, paused: bool = False
    ) -> LiveTurn:
        """Queue ``path`` as a new turn; the loop stamps its points as they go out.
        ``paused``: a pause follows inside the turn, so the clip stops where speech ends."""
        run = self.run
        clip = self.clips[path]
        turn = run.new_turn(step=step, source=path.name)
        samples = clip.clip.samples
        if paused:
            samples = samples[: round(clip.speech_end_ms * self.queue.rate / 1000.0)]
        placement = self.queue.play(samples)
        turn.speech_start_u = placement.start_ms + clip.speech_start_ms
        turn.speech_end_u = placement.start_ms + clip.speech_end_ms
        do_commit = commit if commit is not None else run.config.end_mode is TurnEnd.COMMIT
        if do_commit:
            turn.commit_u = turn.speech_end_u + tail_ms
        self._marking.append(turn)
        self._next_mark_ms = min(self._next_mark_ms, turn.next_mark())
        return turn

    def resume_after_pause(
        self, turn: LiveTurn, path: Path, pause_ms: float, tail_ms: float, *, paused: bool
    ) -> None:
        """The user goes on with ``path``'s speech ``pause_ms`` after ``turn``'s speech
        ended, in the same turn: its end of speech and any client commit move after it."""
        clip = self.clips[path]
        assert turn.speech_end_u is not None
        rate = self.queue.rate
        start = round(clip.speech_start_ms * rate / 1000.0)
        end = round(clip.speech_end_ms * rate / 1000.0) if paused else clip.clip.samples.size
        pause_start = turn.speech_end_u
        placement = self.queue.play(clip.clip.samples[start:end], at_ms=pause_start + pause_ms)
        self.run.pauses_u.append((pause_start, placement.start_ms))
        turn.speech_end_u = placement.start_ms + clip.speech_end_ms - clip.speech_start_ms
        if turn.commit_u is not None:
            turn.commit_u = turn.speech_end_u + tail_ms
        self._next_mark_ms = min(self._next_mark_ms, turn.next_mark())

    def _on_timeline(
        self,
        samples: np.ndarray,
        silent: bool,
        audio_end_ms: float,
        sent_ns: int,
        origin: tuple[np.ndarray, int] | None,
    ) -> None:
        """The append onto the behaviour timeline, at its place on the pacer's schedule
        (the first append's send fixes where ``u`` = 0 is); silence adds nothing."""
        run = self.run
        assert run.timeline is not None
        rate = self.queue.rate
        u_start = audio_end_ms - 1000.0 * samples.size / rate
        if run.user_offset_ms is None:
            run.user_offset_ms = (sent_ns - run.origin_ns) / NS_PER_MS - u_start
        if not silent:
            at_ms = run.user_offset_ms + u_start
            run.timeline.add(USER, samples, rate, at_ms, origin=origin, cache=self._energies)

    @property
    def position_ms(self) -> float:
        return self.queue.position_ms

    def adopt_cadence(self) -> None:
        """Cut the appends the way the lane wants them (docs/protocol.md §13.1): asked once
        the session is open (its ``chunk_period_ms``) and again after a refusal of a longer
        append taught the limit. The decision is the protocol state's
        (:meth:`~duplexctl.protocol.client_state.ClientSession.packet_ms`)."""
        run = self.run
        cs = run.session
        self._learned_samples = cs.max_append_samples
        origin = run.config.run.origins.get("chunk_ms")
        asked_by = "--chunk-ms" if origin is not None and origin.value == "flag" else "chunk_ms"
        decided = cs.packet_ms(run.config.chunk_ms, self.queue.rate, asked_by=asked_by)
        if decided.packet_ms == self.pacer.chunk_ms:
            return
        self.pacer.retime(decided.packet_ms)
        if decided.note is not None:
            run.notes.append(decided.note)
            run.progress(decided.note)

    # -- the loop --------------------------------------------------------------------------------

    async def loop(self) -> None:
        """Append on schedule until the pacer ends (see the module docstring)."""
        run = self.run
        assert run.conn is not None
        conn = run.conn
        cs = conn.session
        self.adopt_cadence()
        fast = run.config.pace is Pace.FAST
        encode = self._encode
        headless = run.headless
        on_append = headless.on_append if headless is not None else None
        pacer = self.pacer
        playback = self.playback
        duty = playback.duty if headless is not None else None
        assembly = self.assembly
        # with nothing to trace, appends go out as pre-formatted text (no dict, no orjson)
        text_only = run.artifacts is None
        append_text = cs.append_text
        while True:
            if cs.max_append_samples != self._learned_samples:
                self.adopt_cadence()  # the server refused longer appends: follow its limit
            chunk_ms = pacer.chunk_ms
            chunk = await pacer.next_chunk()
            if chunk is None:
                return
            if not conn.connected:
                run.skipped_appends += 1
                if fast:
                    await asyncio.sleep(chunk_ms / 1000)
                continue
            if text_only:
                sent = await run.send_text(
                    append_text(
                        encode(chunk.samples, chunk.silent, chunk.origin),
                        audio_end_ms=int(chunk.audio_end_ms),
                        duration_ms=chunk_ms,
                    )
                )
            else:
                event = cs.append(
                    encode(chunk.samples, chunk.silent, chunk.origin),
                    duration_ms=chunk_ms,
                    audio_end_ms=int(chunk.audio_end_ms),
                )
                sent = await run.send(event)
            if sent is None:
                run.skipped_appends += 1
                continue
            cs.input_sent(chunk_ms)  # frame accounting (protocol/frames.py)
            lag_ms = pacer.record_send(chunk, sent / NS_PER_S)
            if on_append is not None:
                on_append(sent / NS_PER_S, lag_ms)
            if run.artifacts is not None:
                run.artifacts.user_audio(chunk.samples, sent)
            if run.timeline is not None:
                self._on_timeline(
                    chunk.samples, chunk.silent, chunk.audio_end_ms, sent, chunk.origin
                )
            if chunk.audio_end_ms >= self._next_mark_ms:
                await self._marks(chunk.audio_end_ms, sent)
            if duty is not None:  # headless: this loop is the session's only timer
                now = now_ns()
                owed = duty.due(now / NS_PER_S)
                if owed or duty.played_out:
                    await playback.send(owed)
                if now / NS_PER_S >= playback.next_finish_s:
                    await playback.send_owed(now / NS_PER_S)
                if now >= assembly.next_answer_due_ns:
                    assembly.expire_unanswered(now)
            if fast and chunk.silent:
                await asyncio.sleep(chunk_ms / 1000)  # silence flows like a real microphone

    async def _marks(self, end_ms: float, sent: int) -> None:
        """Stamp reference points carried by the append ending at ``end_ms``, sent at ``sent``."""
        for turn in [t for t in self._marking if t.marks_pending]:
            t = turn.times
            start_u = turn.speech_start_u
            if t.t_speech_start is None and start_u is not None and end_ms > start_u:
                t.t_speech_start = sent  # this append carries the first speech sample
                if turn.interrupts is not None:
                    await self._interrupt(turn, sent)
            if t.t_eos is None and turn.speech_end_u is not None and end_ms >= turn.speech_end_u:
                t.t_eos = sent
                turn.eos_sent.set()
            if t.t_commit is None and turn.commit_u is not None and end_ms >= turn.commit_u:
                await self._commit(turn)
        self._marking = [t for t in self._marking if t.marks_pending]
        self._next_mark_ms = min((t.next_mark() for t in self._marking), default=math.inf)

    async def _commit(self, turn: LiveTurn) -> None:
        """The client commit of ``turn`` (its answer is due within the response timeout).

        With the socket down (a resume running), the commit waits for the new socket in the
        background instead of being lost: the microphone keeps its schedule."""
        run = self.run
        event = run.session.commit(response_create=True)
        if run.commits is not None:
            run.commits.sent(turn, event)
        sent = await run.send(event)
        turn.times.t_commit = sent or now_ns()
        self.assembly.committed(turn, turn.times.t_commit)
        if sent is None and run.conn is not None and not run.closing:
            task = asyncio.create_task(self._commit_later(turn, event))
            self._late_commits.add(task)
            task.add_done_callback(self._late_commits.discard)

    async def _commit_later(self, turn: LiveTurn, event: dict[str, object]) -> None:
        run = self.run
        assert run.conn is not None
        try:
            sent = await run.conn.send(event)  # waits for a running resume
        except Exception:
            return
        turn.times.t_commit = sent
        if run.artifacts is not None:
            run.artifacts.event("send", sent, event)

    def close(self) -> None:
        self.pacer.close()
        for task in list(self._late_commits):
            task.cancel()

    async def _interrupt(self, turn: LiveTurn, speech_sent: int) -> None:
        """A barge-in's speech onset went out: stamp t_bi, send the explicit interrupt if any."""
        run = self.run
        assert turn.interrupts is not None
        target, kind = turn.interrupts, turn.interrupt_kind or Interrupt.SPEECH
        t_bi = speech_sent
        if kind is Interrupt.BARGE_IN:
            t_bi = await self.playback.stop_listening(target, run.session.barge_in())
        elif kind is Interrupt.CANCEL:
            t_bi = await self.playback.stop_listening(
                target, run.session.response_cancel(target.response_id)
            )
        target.times.barge = BargeTimes(kind=kind.value, t_bi=t_bi, interrupt_turn=turn.index)
