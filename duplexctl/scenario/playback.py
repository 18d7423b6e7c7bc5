"""Replay's listener-side playback: one simulated clock per answer, and what it owes.

Each answer plays on a :class:`~duplexctl.audio.playback.PlaybackClock` (P0 = first receive +
prebuffer, real time, docs/metrics.md "Playback clock"). What the client owes the server as
it plays — ``playback.ack``, the heard position and ``conversation.item.truncate`` after an
interruption, ``session.event_ack`` — is decided by the one
:class:`~duplexctl.protocol.playback_duty.PlaybackDuty` that ``talk`` uses too; this part only
feeds it (first audio, flushes) and sends what it returns. It also writes the audio the clock
has played into conversation.wav (with ``--out``), and tells the turn assembly when an answer
has played out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from duplexctl.audio.playback import PlaybackClock
from duplexctl.behaviour.timeline import ASSISTANT
from duplexctl.protocol.client_state import AudioDelta
from duplexctl.protocol.playback_duty import EVENT_ACK_EVERY_S, PlaybackDuty
from duplexctl.scenario.assembly import TurnAssembly
from duplexctl.scenario.state import LiveTurn, Play, RunState, now_ns
from duplexctl.units import NS_PER_MS, NS_PER_S

# headless: the journal needs trimming, not frequent acks (it also drops entries after 60 s
# and holds 8 MiB, docs/protocol.md §6.6: a talking session journals ~8 kB/s). Every 2 s keeps
# it to ~2 s of events — what a resume replays at most — and costs 0.5 sends per
# session-second, with no batch trigger (replies at 80 ms chunks would fire it every 1.3 s).
HEADLESS_EVENT_ACK_EVERY_S: Final = 2.0


class ReplayPlayback:
    """The plays of one run and the duty they feed (see the module docstring)."""

    def __init__(self, run: RunState, assembly: TurnAssembly) -> None:
        self.run = run
        self.assembly = assembly
        self.duty: PlaybackDuty | None = None
        self._writing: dict[str, Play] = {}  # plays with heard audio still to write (--out)
        # continuous lanes: answers over whose speech is still playing, and when it ends (s)
        self._finishing: dict[str, tuple[LiveTurn, float]] = {}
        self.next_finish_s = math.inf

    def start(self) -> None:
        """The session is open: the duty reads its protocol state."""
        headless = self.run.headless is not None
        self.duty = PlaybackDuty(
            self.run.session,
            event_ack_every_s=HEADLESS_EVENT_ACK_EVERY_S if headless else EVENT_ACK_EVERY_S,
            event_ack_batch=None if headless else 32,
        )

    # -- fed by the listener and the steps ---------------------------------------------------

    def received(self, h: AudioDelta, turn: LiveTurn | None) -> Play:
        """An audio delta of ``turn``'s answer (None: of a response that answers no turn,
        yet): onto its clock (and its heard audio)."""
        run = self.run
        play = self.run.plays.get(h.response_id)
        if play is None:
            play = Play(h.response_id, turn, PlaybackClock(run.config.prebuffer_ms))
            self.run.plays[h.response_id] = play
        elif turn is not None:
            play.turn = turn
        clock = play.clock
        now_s = h.recv_ns / NS_PER_S
        duration = h.audio_end_ms - h.audio_start_ms
        heard = run.artifacts is not None or run.timeline is not None
        if heard and not play.flushed and duration > 0 and h.pcm:
            due = clock.due_time()
            start = now_s + run.config.prebuffer_ms / 1000 if due is None else max(due, now_s)
            samples = np.frombuffer(h.pcm, dtype="<i2").astype(np.float32) / 32768.0
            if run.timeline is not None:  # placed when it will play; a flush cuts it
                at_ms = start * 1000.0 - run.origin_ns / NS_PER_MS
                run.timeline.add(ASSISTANT, samples, h.sample_rate_hz, at_ms)
            if run.artifacts is not None:
                play.pending.append([start, samples, h.sample_rate_hz, 0])
                self._writing[h.response_id] = play
        first = clock.first_audible is None
        clock.receive(now_s, duration)
        if first and clock.first_audible is not None and self.duty is not None:
            self.duty.playing(h.response_id, clock)
        return play

    def flush(self, turn: LiveTurn, at_ns: int) -> None:
        """Stop listening to ``turn``'s answer at ``at_ns`` (a trusted stop signal, or the
        client's own interruption): the heard position freezes and is owed to the server."""
        if turn.response_id is None:
            return
        play = self.run.plays.get(turn.response_id)
        if play is not None:
            self._flush(play, at_ns)

    def _flush(self, play: Play, at_ns: int) -> None:
        if play.flushed:
            return
        self._write_heard(play, at_ns / NS_PER_S)
        heard = play.clock.flush(at_ns / NS_PER_S)
        if self.run.timeline is not None:
            self.run.timeline.cut(ASSISTANT, (at_ns - self.run.origin_ns) / NS_PER_MS)
        play.pending.clear()
        self._writing.pop(play.response_id, None)
        if self.duty is not None:
            self.duty.interrupted(play.response_id, heard)
        if self.run.artifacts is not None:
            self.run.artifacts.note(
                at_ns, "playback.flush", response_id=play.response_id, heard_ms=heard
            )

    def flush_playing(self, at_ns: int) -> None:
        """A server signal stopped whatever is playing (protocol/playback_stop.py): flush
        every answer whose clock has not played all it received by ``at_ns``."""
        at_s = at_ns / NS_PER_S
        for play in list(self.run.plays.values()):
            if not play.clock.done_playing(at_s):
                self._flush(play, at_ns)

    def answer_ended(self, response_id: str, turn: LiveTurn) -> None:
        """A continuous lane's answer is over (docs/protocol.md §13.2): its turn finishes
        once the clock has played its speech — now if it has (or was flushed), else at that
        moment, though the response's silence goes on playing."""
        play = self.run.plays.get(response_id)
        track = self.run.session.responses.get(response_id)
        end = None
        if play is not None and not play.flushed and track is not None:
            end = play.clock.wall_at(track.speech_end_ms)
        if end is None or end <= now_ns() / NS_PER_S:
            self.assembly.finish(turn)
            return
        self._finishing[response_id] = (turn, end)
        self.next_finish_s = min(self.next_finish_s, end)

    def _finish_played(self, now_s: float) -> None:
        """Finish the answers whose speech has played by ``now_s``."""
        upcoming = math.inf
        for rid, (turn, end) in list(self._finishing.items()):
            if end <= now_s:
                del self._finishing[rid]
                self.assembly.finish(turn)
            else:
                upcoming = min(upcoming, end)
        self.next_finish_s = upcoming

    def answer_over(self, response_id: str) -> bool:
        """At ``response.done``: nothing is left to play (flushed, or no audio at all), so
        the turn is finished now rather than when its playback ends."""
        play = self.run.plays.get(response_id)
        return play is None or play.flushed or play.clock.received_ms <= 0

    # -- sending what is owed ---------------------------------------------------------------

    async def stop_listening(self, target: LiveTurn, event: dict[str, Any]) -> int:
        """The client itself decides to stop listening to ``target``'s answer: flush its
        playback, send what that owes (the heard position, docs/protocol.md §6.5), then
        ``event`` (the cancel or barge_in). Returns t_bi: the send of ``event``."""
        now = now_ns()
        self.flush(target, now)
        await self.send_owed(now / NS_PER_S)
        return await self.run.send(event) or now_ns()

    async def send_owed(self, now_s: float) -> None:
        """Send what the duty says is owed by ``now_s``; finish the turns whose answer has
        played out. Called by the ticker, the headless microphone and the interruptions."""
        if self.duty is not None:
            await self.send(self.duty.due(now_s))
        if now_s >= self.next_finish_s:
            self._finish_played(now_s)

    async def send(self, owed: Sequence[dict[str, Any]]) -> None:
        """Send ``owed`` (what the duty's ``due`` returned); finish the turns whose answer
        has played out. The headless microphone calls ``due`` itself and comes here only
        when something is owed: no coroutine per append for nothing."""
        duty = self.duty
        assert duty is not None
        for event in owed:
            if await self.run.send(event) is None:
                duty.unsent(event)
        if duty.played_out:
            for rid in duty.played_out:
                play = self.run.plays.get(rid)
                if play is not None and play.turn is not None:
                    self.assembly.finish(play.turn)
            duty.played_out.clear()

    # -- conversation.wav ----------------------------------------------------------------------

    def write_heard(self, now_s: float) -> None:
        """Write what every clock has played by ``now_s`` into conversation.wav."""
        for rid, play in list(self._writing.items()):
            self._write_heard(play, now_s)
            if not play.pending:
                del self._writing[rid]

    def _write_heard(self, play: Play, until_s: float) -> None:
        artifacts = self.run.artifacts
        if artifacts is None:
            return
        while play.pending:
            start, samples, rate, written = play.pending[0]
            if start >= until_s:
                return
            upto = min(samples.size, int((until_s - start) * rate))
            if upto > written:
                at_ns = int((start + written / rate) * NS_PER_S)
                artifacts.assistant_heard(samples[written:upto], rate, at_ns)
                play.pending[0][3] = upto
            if upto < samples.size:
                return
            play.pending.pop(0)

    def flush_heard(self) -> None:
        """The run ends: write what has been heard so far of every answer still playing."""
        now_s = now_ns() / NS_PER_S
        for play in self.run.plays.values():
            if not play.flushed:
                self._write_heard(play, now_s)
