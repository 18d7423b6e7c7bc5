"""The playback clock: what a listener would have heard of one response, and when.

Why simulate it: the server's playback ledger (``playback.ack`` / ``played_ms``) and the
truncation point of a barge-in (``conversation.item.truncate``) must reflect audio *played*,
not bytes received — a client that acks on receipt tells the server the user heard audio
still sitting in a buffer. Without a speaker, docs/metrics.md defines the clock as a jitter
buffer: playback starts at ``P0 = recv(first audio chunk) + prebuffer`` and runs in real
time; a chunk that arrives after it was due to play is an **underrun**, and the silence
inserted while waiting for it is ``stall_ms``. ``flush`` is barge-in/cancel: the buffer is
dropped at once and the heard position is frozen.

All times are seconds on one monotonic clock (the event loop's / ``time.monotonic``) and are
passed in by the caller, so the clock is pure arithmetic, deterministic under test, and
cheap for hundreds of sessions. Calls must come in non-decreasing time order, except that
:meth:`PlaybackClock.played_ms` may also be asked about any earlier moment.

``talk``'s speaker (``audio/devices.py`` ``Speaker``) answers the same questions per response
(``played_ms``, ``end_time``, ``flush``), with the output device driving the clock instead of
arithmetic; ``talk/output.py`` puts both behind one ``Output``.

The clock also keeps vLLM-Omni's continuity figure (docs/metrics.md "Audio continuity"):
``audio_underrun_ms``, the worst deficit of a player that starts at the first chunk and
never waits — for each later chunk, how far its arrival is behind the position that player
has reached (``recv − recv(first) − audio received before it``). On a clock that waits, that
is the silence it inserts in total when it has no prebuffer, so ``stall_ms`` is exactly
``max(0, audio_underrun_ms − prebuffer_ms)``; the figure itself does not depend on the
prebuffer. Chunks received after a flush are not counted: nobody listened to them.
"""

from __future__ import annotations

import bisect

# Lateness below 1 us is float rounding of (wall + ms/1000) sums, not an underrun.
_ROUNDING_S = 1e-6


class WorstDeficit:
    """vLLM-Omni's worst underrun of one stream (``audio_underrun``; its
    ``compute_continuity_stats``): a player starts at the first chunk's arrival and plays
    in real time without ever waiting; each later chunk's deficit is how far its arrival is
    behind that player (``now − first − audio received before it``); the worst is kept,
    0 when none was late. The one place the formula lives: the client's playback clock and
    the reference server's ``vllm_omni:audio_underrun_s`` both use it."""

    __slots__ = ("_first", "received_ms", "worst_ms")

    def __init__(self) -> None:
        self._first: float | None = None
        self.received_ms = 0.0
        self.worst_ms = 0.0

    def add(self, now: float, duration_ms: float) -> None:
        """A chunk of ``duration_ms`` arrived (or was sent) at ``now`` (seconds)."""
        if self._first is None:
            self._first = now
        else:
            deficit = (now - self._first) * 1000.0 - self.received_ms
            if deficit > self.worst_ms and deficit > _ROUNDING_S * 1000.0:
                self.worst_ms = deficit
        self.received_ms += duration_ms


class PlaybackClock:
    """Simulated jitter buffer for one response (docs/metrics.md "Playback clock").

    Playback is a sequence of *runs*: stretches of gapless real-time playing. The first run
    starts at ``P0``; each underrun ends a run (everything received so far has played) and
    starts a new one when the late chunk arrives, playing it at once. ``played_ms`` is then
    ``run_audio_start + (now - run_wall_start)``, capped at what has been received.
    """

    def __init__(self, prebuffer_ms: float = 0.0) -> None:
        if prebuffer_ms < 0:
            raise ValueError("prebuffer_ms must be >= 0")
        self.prebuffer_ms = prebuffer_ms
        self.received_ms = 0.0
        self.underruns = 0
        self.stall_ms = 0.0
        self.chunks = 0
        self.flushed_at: float | None = None
        self.heard_ms: float | None = None  # frozen heard position after flush
        self.discarded_ms = 0.0  # audio received after flush (never played)
        self._deficit = WorstDeficit()  # vLLM-Omni's worst underrun (module docstring)
        self._flush_end: float | None = None
        self._run_wall: list[float] = []  # wall start of each run
        self._run_audio: list[float] = []  # audio ms at the start of each run

    @property
    def audio_underrun_ms(self) -> float:
        """vLLM-Omni's worst underrun of the chunks played so far (:class:`WorstDeficit`)."""
        return self._deficit.worst_ms

    @property
    def first_audible(self) -> float | None:
        """``P0``: first recv + prebuffer (None before any audio)."""
        return self._run_wall[0] if self._run_wall else None

    def due_time(self) -> float | None:
        """When the audio received so far runs out (the next chunk is due then)."""
        if not self._run_wall:
            return None
        return self._run_wall[-1] + (self.received_ms - self._run_audio[-1]) / 1000.0

    def receive(self, now: float, duration_ms: float) -> None:
        """Schedule a received chunk right after the audio already buffered.

        An empty chunk is ignored (docs/metrics.md counts non-empty deltas). A chunk arriving
        after its due time is an underrun: the gap is ``stall_ms`` and the chunk plays on
        arrival. After :meth:`flush`, received audio is counted as discarded, never played.
        """
        if duration_ms <= 0:
            return
        if self.flushed_at is not None:
            self.discarded_ms += duration_ms
            return
        due = self.due_time()
        self._deficit.add(now, duration_ms)
        if due is None:
            self._start_run(now + self.prebuffer_ms / 1000.0)
        elif now - due > _ROUNDING_S:
            self.underruns += 1
            self.stall_ms += (now - due) * 1000.0
            self._start_run(now)
        self.received_ms += duration_ms
        self.chunks += 1

    def _start_run(self, wall: float) -> None:
        self._run_wall.append(wall)
        self._run_audio.append(self.received_ms)

    def played_ms(self, now: float) -> float:
        """Audio played by ``now``: 0 before ``P0``, never more than received, frozen by
        flush."""
        if self.flushed_at is not None and now >= self.flushed_at:
            return self.heard_ms or 0.0
        i = bisect.bisect_right(self._run_wall, now) - 1
        if i < 0:
            return 0.0
        run_end = self._run_audio[i + 1] if i + 1 < len(self._run_audio) else self.received_ms
        return min(self._run_audio[i] + (now - self._run_wall[i]) * 1000.0, run_end)

    def wall_at(self, audio_ms: float) -> float | None:
        """When the audio at ``audio_ms`` into the response plays (played, or will if no
        underrun intervenes): None before it was received, and for audio a flush discarded.
        On a lane that streams silence too, this places the model's speech inside the
        response (docs/protocol.md §13.2)."""
        if not self._run_wall or audio_ms > self.received_ms:
            return None
        if self.heard_ms is not None and audio_ms > self.heard_ms:
            return None
        i = max(0, bisect.bisect_right(self._run_audio, audio_ms) - 1)
        return self._run_wall[i] + (audio_ms - self._run_audio[i]) / 1000.0

    def flush(self, now: float) -> float:
        """Barge-in/cancel: stop playing at ``now``; returns the heard position (ms).

        This is what ``conversation.item.truncate`` reports as ``audio_end_ms``; it never
        exceeds what was received. A second flush returns the first one's position.
        """
        if self.flushed_at is None:
            self.heard_ms = self.played_ms(now)
            due = self.due_time()
            self._flush_end = None if due is None else min(now, due)
            self.flushed_at = now
        return self.heard_ms or 0.0

    def end_time(self) -> float | None:
        """When playback of everything received finishes; after a flush, the flush time (or
        the natural end, if playback had already finished). None before any audio.
        ``heard_stop_ms = end_time() - t_bi``."""
        if self.flushed_at is not None:
            return self._flush_end
        return self.due_time()

    def done_playing(self, now: float) -> bool:
        """True when everything received has played (or playback was flushed)."""
        end = self.end_time()
        return end is not None and now >= end
