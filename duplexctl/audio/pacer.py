"""The user's audio clock: a microphone-like source and an absolute send schedule.

Two rules from docs/metrics.md shape this module:

* Appends go out on an **absolute schedule**, chunk ``k`` at ``t0 + k * chunk_ms``. "Send,
  then sleep chunk_ms" drifts by every wakeup's lateness; here a late wakeup only delays the
  chunk it belongs to, and the next one is still due at its own time (the pacer catches up
  rather than slipping). Lateness is recorded as ``send_lag_ms`` so a run can prove its own
  pacing valid.
* The user's audio clock runs regardless of the server: like a real microphone,
  :class:`MicQueue` plays queued clips and then keeps delivering silence until told to stop.

Every :class:`Chunk` carries its place on the user timeline ``u`` (``audio_start_ms`` /
``audio_end_ms``), so the caller can find ``t_send(u = x)`` — e.g. ``t_eos``, the send of the
append that reaches the end of speech — by :meth:`Chunk.reaches` and :meth:`Chunk.carries`.

Cost: this runs for hundreds of sessions at 10 chunks/s each, so a chunk is O(1): a view
into the clip (or a shared read-only block of zeros), never a concatenation. Only a chunk
straddling the edge of a clip is assembled into a fresh array.

The pacer does not send anything: the caller awaits :meth:`Pacer.next_chunk`, sends, and
reports the moment the send returned with :meth:`Pacer.record_send`.
"""

from __future__ import annotations

import enum
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from duplexctl.audio.sendgrid import SendGrid


class Pace(enum.StrEnum):
    """``realtime``: chunk k is due at t0 + k*chunk_ms. ``fast``: every chunk is due at once
    (no sleeping; for offline tests and throughput runs where wall time does not matter)."""

    REALTIME = "realtime"
    FAST = "fast"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a queued clip lands on the user timeline (ms; end exclusive)."""

    start_ms: float
    end_ms: float


@dataclass(slots=True)
class Chunk:
    """One append: ``samples`` (float32 mono, do not modify: may be a view of the clip or a
    shared block of zeros) covering ``[audio_start_ms, audio_end_ms)`` of the user timeline,
    due at ``scheduled`` (seconds on the pacer's clock). ``silent`` means no clip sample is
    in it (pure microphone silence). ``origin`` is (clip array, first sample) when
    ``samples`` is a view of one queued clip — a cheap identity for caches of encoded
    chunks — and None for silence and for chunks assembled across a clip edge. ``sent`` is
    filled in by :meth:`Pacer.record_send`."""

    index: int
    samples: np.ndarray
    audio_start_ms: float
    audio_end_ms: float
    scheduled: float
    silent: bool
    sent: float | None = None
    origin: tuple[np.ndarray, int] | None = None

    def reaches(self, u_ms: float) -> bool:
        """True for the append after which the server first has user audio up to ``u_ms``
        (``audio_start_ms < u_ms <= audio_end_ms``): ``t_eos = t_send(u = speech_end)``."""
        return self.audio_start_ms < u_ms <= self.audio_end_ms or (u_ms <= 0 and self.index == 0)

    def carries(self, u_ms: float) -> bool:
        """True for the append carrying the sample at ``u_ms``
        (``audio_start_ms <= u_ms < audio_end_ms``): ``t_bi`` is the send of the append that
        carries the first speech sample of an interrupting utterance."""
        return self.audio_start_ms <= u_ms < self.audio_end_ms


class MicQueue:
    """A microphone that plays queued clips, back to back or at given positions, and
    delivers silence in between and afterwards until closed.

    Positions are in samples internally (exact); the public API speaks ms on the user
    timeline. Clips never overlap: a clip placed before the end of the queue is an error,
    because one user cannot say two things at once.
    """

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._segments: deque[tuple[int, np.ndarray]] = deque()  # (start sample, samples)
        self._pos = 0  # samples read so far
        self._tail = 0  # end sample of the last queued clip
        self._zeros = np.zeros(0, dtype=np.float32)
        self.closed = False
        self.drain = False

    @property
    def position_ms(self) -> float:
        """User-timeline position of the next sample to be read."""
        return 1000.0 * self._pos / self.rate

    @property
    def idle(self) -> bool:
        """True when every queued clip has been read (only silence would follow)."""
        return self._pos >= self._tail

    def play(self, samples: np.ndarray, *, at_ms: float | None = None) -> Placement:
        """Queue ``samples`` (mono float32 at ``rate``) to start at ``at_ms`` on the user
        timeline, or right after what is queued (or now, if nothing is) when None.

        Returns where the clip landed, so the caller can turn file positions (speech
        bounds) into user-timeline positions: ``u = placement.start_ms + speech_end_ms``.
        Raises ValueError when ``at_ms`` is in the past or inside an already queued clip.
        """
        if self.closed:
            raise ValueError("the microphone queue is closed")
        earliest = max(self._tail, self._pos)
        start = earliest if at_ms is None else round(at_ms * self.rate / 1000.0)
        if start < earliest:
            raise ValueError(
                f"cannot place a clip at {at_ms} ms: the user timeline is already at "
                f"{1000.0 * earliest / self.rate} ms"
            )
        data = np.asarray(samples, dtype=np.float32)
        if data.ndim != 1:
            data = data.reshape(-1)  # a 1-D clip stays the same object: Chunk.origin names it
        if data.size:
            self._segments.append((start, data))
            self._tail = start + data.size
        return Placement(1000.0 * start / self.rate, 1000.0 * (start + data.size) / self.rate)

    def close(self, *, drain: bool = False) -> None:
        """Stop the microphone: at once, or (``drain=True``) after the queued clips."""
        self.closed = True
        self.drain = drain

    @property
    def finished(self) -> bool:
        """True when a reader should stop (closed, and drained if asked to drain)."""
        return self.closed and (not self.drain or self.idle)

    def read(self, n: int) -> tuple[np.ndarray, bool, tuple[np.ndarray, int] | None]:
        """The next ``n`` samples, whether they are all silence, and (clip, first sample)
        when they are a view of one clip (see :attr:`Chunk.origin`). O(1) except at clip
        edges."""
        start, end = self._pos, self._pos + n
        self._pos = end
        segments = self._segments
        while segments and segments[0][0] + segments[0][1].size <= start:
            segments.popleft()
        if not segments or segments[0][0] >= end:
            if self._zeros.size != n:
                self._zeros = np.zeros(n, dtype=np.float32)
                self._zeros.flags.writeable = False
            return self._zeros, True, None
        seg_start, seg = segments[0]
        if seg_start <= start and seg_start + seg.size >= end:
            offset = start - seg_start
            return seg[offset : offset + n], False, (seg, offset)
        out = np.zeros(n, dtype=np.float32)  # straddles a clip edge: assemble
        for seg_start, seg in segments:
            if seg_start >= end:
                break
            lo, hi = max(seg_start, start), min(seg_start + seg.size, end)
            out[lo - start : hi - start] = seg[lo - seg_start : hi - seg_start]
        return out, False, None


class SendLag:
    """send_lag_ms (docs/metrics.md): actual send − scheduled send, for every append.

    Keeps count, max, the number of appends later than one chunk period (a run whose p99
    exceeds that is ``invalid_pacing``) and every value in a growing float64 array (amortised
    O(1), no Python object per chunk) for exact percentiles or an HDR histogram.
    """

    def __init__(self, chunk_ms: float) -> None:
        self.chunk_ms = chunk_ms
        self.count = 0
        self.max_ms = 0.0
        self.late = 0
        self._values = np.empty(1024, dtype=np.float64)

    def add(self, lag_ms: float) -> None:
        if self.count == self._values.size:
            self._values = np.concatenate([self._values, np.empty_like(self._values)])
        self._values[self.count] = lag_ms
        self.count += 1
        if lag_ms > self.max_ms:
            self.max_ms = lag_ms
        if lag_ms > self.chunk_ms:
            self.late += 1

    def values(self) -> np.ndarray:
        """All recorded lags in ms (a view; copy it to keep it past further appends)."""
        return self._values[: self.count]

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.values(), q)) if self.count else 0.0


Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[object]]


class Pacer:
    """Cuts the microphone into ``chunk_ms`` appends due at ``t0 + k * chunk_ms``.

    ``clock`` defaults to ``time.monotonic`` (the clock docs/metrics.md measures with, and the
    one send times are stamped with; uvloop's ``loop.time()`` is cached per loop iteration
    and rounded to the millisecond, and costs a ``get_running_loop`` per call); tests
    inject a fake clock and ``sleep``. ``t0`` is fixed by :meth:`start` or by the first
    :meth:`next_chunk`.

    Sleeps are timers of a :class:`~duplexctl.audio.sendgrid.SendGrid`: the ``grid`` given
    (many sessions in one process, ``load``: ``t0`` lands on one of its phases, sleeps are
    shared with the other pacers due at the same instant, :meth:`close` gives the phase
    back), or the pacer's own, used for its timers only.
    """

    def __init__(
        self,
        chunk_ms: int = 100,
        rate: int = 16000,
        *,
        pace: Pace | str = Pace.REALTIME,
        source: MicQueue | None = None,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        grid: SendGrid | None = None,
    ) -> None:
        samples = rate * chunk_ms / 1000.0
        if chunk_ms <= 0 or samples != math.floor(samples):
            raise ValueError(f"chunk_ms={chunk_ms} is not a whole number of samples at {rate} Hz")
        self.chunk_ms = chunk_ms
        self.rate = rate
        self.chunk_samples = int(samples)
        self.pace = Pace(pace)
        self.source = source if source is not None else MicQueue(rate)
        if self.source.rate != rate:
            raise ValueError(f"source rate {self.source.rate} != pacer rate {rate}")
        self._clock = clock if clock is not None else time.monotonic
        self._sleep = sleep
        self._grid = grid
        self._timers = grid if grid is not None else SendGrid(chunk_ms / 1000)
        self._phase: int | None = None  # the grid phase held, if any
        self.t0: float | None = None
        self.index = 0  # index of the next chunk
        self.lag = SendLag(chunk_ms)
        # where the current chunk size took over (retime): its first chunk's index, user
        # timeline position (ms) and due time (s, None until t0 is fixed)
        self._base_index = 0
        self._base_ms = 0.0
        self._base_t: float | None = None

    def now(self) -> float:
        return self._clock()

    def start(self, t0: float | None = None) -> float:
        """Fix the schedule's origin (default: now, or the grid's next free phase from now).
        Chunk k is due at ``t0 + k*chunk_ms``."""
        if t0 is None and self._grid is not None and self.pace is Pace.REALTIME:
            if self._phase is not None:
                self._grid.leave(self._phase)
            self._phase, t0 = self._grid.join(self.now())
        self.t0 = self.now() if t0 is None else t0
        if self._base_t is None or self._base_index == 0:
            self._base_t = self.t0
        return self.t0

    def retime(self, chunk_ms: int) -> None:
        """From the next chunk on, cut ``chunk_ms`` appends (a lane's cadence, learned once
        the session is open: :mod:`duplexctl.protocol.cadence`). The user timeline and the
        schedule go on from where they are: the next chunk starts where the last one ended
        and is due when it would have been."""
        samples = self.rate * chunk_ms / 1000.0
        if chunk_ms <= 0 or samples != math.floor(samples):
            raise ValueError(
                f"chunk_ms={chunk_ms} is not a whole number of samples at {self.rate} Hz"
            )
        if chunk_ms == self.chunk_ms:
            return
        base_t = self.scheduled(self.index) if self.t0 is not None else None
        self._base_ms = self._start_ms(self.index)
        self._base_index = self.index
        self._base_t = base_t
        self.chunk_ms = chunk_ms
        self.chunk_samples = int(samples)
        self.lag.chunk_ms = chunk_ms

    def _start_ms(self, index: int) -> float:
        """User-timeline start (ms) of chunk ``index``."""
        return self._base_ms + (index - self._base_index) * self.chunk_ms

    def close(self) -> None:
        """Give the grid phase back (a no-op without a grid); the pacer may not be reused."""
        if self._grid is not None and self._phase is not None:
            self._grid.leave(self._phase)
            self._phase = None

    def scheduled(self, index: int) -> float:
        """Due time of chunk ``index``; computed from t0 each time, so it cannot drift."""
        if self.t0 is None or self._base_t is None:
            raise RuntimeError("pacer not started")
        return self._base_t + (index - self._base_index) * self.chunk_ms / 1000.0

    def take(self, scheduled: float | None = None) -> Chunk | None:
        """The next chunk without waiting (None once the source is finished); starts the
        schedule at now if :meth:`start` was not called. For offline use and tests."""
        if self.source.finished:
            return None
        if self.t0 is None:
            self.start()
        k = self.index
        self.index += 1
        samples, silent, origin = self.source.read(self.chunk_samples)
        start_ms = self._start_ms(k)
        return Chunk(
            index=k,
            samples=samples,
            audio_start_ms=float(start_ms),
            audio_end_ms=float(start_ms + self.chunk_ms),
            scheduled=self.scheduled(k) if scheduled is None else scheduled,
            silent=silent,
            origin=origin,
        )

    async def next_chunk(self) -> Chunk | None:
        """Sleep until the next chunk is due, then read it from the source (so a clip queued
        during the sleep is in it). In ``fast`` pace nothing sleeps and a chunk is due when
        it is taken. None once the source is finished."""
        if self.t0 is None:
            self.start()
        if self.pace is Pace.FAST:
            return self.take(self.now())
        due = self.scheduled(self.index)
        delay = due - self.now()
        if delay > 0:
            if self._sleep is not None:
                await self._sleep(delay)
            else:
                await self._timers.sleep_until(due, delay)
        return self.take()

    def record_send(self, chunk: Chunk, sent: float | None = None) -> float:
        """Note that ``chunk`` was sent at ``sent`` (default: now, i.e. call right after the
        websocket send returned); returns and records its send lag in ms."""
        chunk.sent = self.now() if sent is None else sent
        lag_ms = 1000.0 * (chunk.sent - chunk.scheduled)
        self.lag.add(lag_ms)
        return lag_ms
