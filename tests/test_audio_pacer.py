"""audio/pacer.py: absolute schedule, microphone queue, user-timeline positions, send lag."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from duplexctl.audio.manifest import recording_path
from duplexctl.audio.pacer import Chunk, MicQueue, Pace, Pacer
from duplexctl.audio.source import load_audio, speech_bounds


class FakeLoopClock:
    """A clock the pacer reads and a sleep that advances it, oversleeping on purpose."""

    def __init__(self, start: float = 1000.0, seed: int = 7, max_late_s: float = 0.0) -> None:
        self.t = start
        self.sleeps: list[float] = []
        self._rng = random.Random(seed)
        self.max_late_s = max_late_s

    def now(self) -> float:
        return self.t

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.t += delay + self._rng.uniform(0.0, self.max_late_s)


def make_pacer(clock: FakeLoopClock, **kwargs: object) -> Pacer:
    return Pacer(100, 16000, clock=clock.now, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]


async def test_schedule_is_absolute_with_late_wakeups() -> None:
    clock = FakeLoopClock(max_late_s=0.03)  # every wakeup up to 30 ms late
    pacer = make_pacer(clock)
    pacer.start()
    chunks: list[Chunk] = []
    for _ in range(1000):
        chunk = await pacer.next_chunk()
        assert chunk is not None
        pacer.record_send(chunk)
        chunks.append(chunk)

    for k, chunk in enumerate(chunks):
        assert chunk.index == k
        assert chunk.scheduled == pytest.approx(1000.0 + k * 0.1, abs=1e-9)
        assert chunk.sent is not None and chunk.sent >= chunk.scheduled
    # No drift: the last chunk went out within one wakeup's lateness of its slot,
    # whereas "send then sleep" would be ~1000 * 15 ms = 15 s behind.
    assert chunks[-1].sent - chunks[-1].scheduled <= 0.03 + 1e-9  # type: ignore[operator]
    assert pacer.lag.count == 1000
    assert 0 < pacer.lag.max_ms <= 30.0 + 1e-6
    assert pacer.lag.late == 0
    assert pacer.lag.percentile(50) == pytest.approx(15.0, abs=3.0)


async def test_a_long_stall_is_caught_up_not_slipped() -> None:
    clock = FakeLoopClock()
    pacer = make_pacer(clock)
    pacer.start()
    for _ in range(3):
        pacer.record_send(await pacer.next_chunk())  # type: ignore[arg-type]
    clock.t += 0.45  # the event loop was blocked: now 1000.65, chunk 3 was due at 1000.3
    late = []
    for _ in range(6):
        chunk = await pacer.next_chunk()
        assert chunk is not None
        pacer.record_send(chunk)
        late.append(chunk)
    assert [c.index for c in late] == [3, 4, 5, 6, 7, 8]
    # Chunks 3..6 were overdue and went out back to back; 7 and 8 waited for their slots.
    assert len(clock.sleeps) == 2 + 2
    assert pacer.lag.values()[3:].tolist() == pytest.approx([350, 250, 150, 50, 0, 0], abs=1e-6)
    assert pacer.lag.late == 3  # more than one chunk period late
    assert late[-1].scheduled == pytest.approx(1000.8)


async def test_fast_pace_never_sleeps() -> None:
    clock = FakeLoopClock()
    pacer = make_pacer(clock, pace="fast")
    assert pacer.pace is Pace.FAST
    for _ in range(50):
        chunk = await pacer.next_chunk()
        assert chunk is not None
        assert pacer.record_send(chunk) == 0.0
    assert clock.sleeps == []
    assert chunk.audio_end_ms == 5000.0


async def test_default_clock_is_the_event_loop_clock() -> None:
    pacer = Pacer(20, 16000, pace=Pace.FAST)
    loop_now = asyncio.get_running_loop().time()
    chunk = await pacer.next_chunk()
    assert chunk is not None and chunk.samples.size == 320
    assert pacer.t0 is not None and pacer.t0 >= loop_now


def test_clip_then_silence_forever_then_stop() -> None:
    queue = MicQueue(16000)
    clip = np.arange(1, 2501, dtype=np.float32)  # 156.25 ms, a recognisable ramp
    placement = queue.play(clip)
    assert (placement.start_ms, placement.end_ms) == (0.0, 156.25)
    pacer = Pacer(100, 16000, source=queue, clock=lambda: 0.0)
    pacer.start()

    first = pacer.take()
    second = pacer.take()
    assert first is not None and second is not None
    assert not first.silent and not second.silent
    np.testing.assert_array_equal(first.samples, clip[:1600])
    assert np.shares_memory(first.samples, clip)  # a view, not a copy
    np.testing.assert_array_equal(second.samples[:900], clip[1600:])
    assert not second.samples[900:].any()
    assert queue.idle

    for _ in range(100):  # the microphone keeps flowing
        chunk = pacer.take()
        assert chunk is not None and chunk.silent and not chunk.samples.any()
        assert chunk.samples.size == 1600
    queue.close()
    assert pacer.take() is None


def test_silent_chunks_share_one_read_only_buffer() -> None:
    pacer = Pacer(100, 16000, clock=lambda: 0.0)
    pacer.start()
    a, b = pacer.take(), pacer.take()
    assert a is not None and b is not None
    assert a.samples is b.samples
    assert not a.samples.flags.writeable


def test_play_at_a_later_position_and_drain() -> None:
    queue = MicQueue(16000)
    pacer = Pacer(100, 16000, source=queue, clock=lambda: 0.0)
    pacer.start()
    first = queue.play(np.ones(3200, dtype=np.float32))  # 0..200 ms
    second = queue.play(np.full(800, 0.5, dtype=np.float32), at_ms=350.0)  # 350..400 ms
    assert second.start_ms == 350.0 and second.end_ms == 400.0
    with pytest.raises(ValueError, match="already at"):
        queue.play(np.ones(10, dtype=np.float32), at_ms=100.0)
    queue.close(drain=True)
    chunks = []
    while (chunk := pacer.take()) is not None:
        chunks.append(chunk)
    assert [c.silent for c in chunks] == [False, False, True, False]
    assert chunks[3].samples[:800].sum() == 0.0 and chunks[3].samples[800:].min() == 0.5
    assert first.end_ms == 200.0


def test_clip_queued_while_silence_flows_starts_at_the_next_chunk() -> None:
    queue = MicQueue(16000)
    pacer = Pacer(100, 16000, source=queue, clock=lambda: 0.0)
    pacer.start()
    for _ in range(7):
        pacer.take()
    placement = queue.play(np.ones(1600, dtype=np.float32))
    assert placement.start_ms == 700.0
    chunk = pacer.take()
    assert chunk is not None and chunk.audio_start_ms == 700.0 and not chunk.silent


def test_chunk_positions_find_t_eos_for_a_real_recording() -> None:
    clip = load_audio(recording_path("hello"), 16000)
    bounds = speech_bounds(clip)
    assert bounds is not None
    pacer = Pacer(100, 16000, clock=lambda: 50.0)
    pacer.start()
    placement = pacer.source.play(clip.samples, at_ms=500.0)
    speech_end_u = placement.start_ms + bounds[1]
    speech_start_u = placement.start_ms + bounds[0]
    pacer.source.close(drain=True)

    reaching = carrying = None
    while (chunk := pacer.take()) is not None:
        if chunk.reaches(speech_end_u):
            assert reaching is None
            reaching = chunk
        if chunk.carries(speech_start_u):
            carrying = chunk
    assert reaching is not None and carrying is not None
    assert reaching.audio_start_ms < speech_end_u <= reaching.audio_end_ms
    assert reaching.scheduled == pytest.approx(50.0 + reaching.index * 0.1)
    assert carrying.audio_start_ms <= speech_start_u < carrying.audio_end_ms


def test_reaches_and_carries_on_a_chunk_boundary() -> None:
    chunk = Chunk(3, np.zeros(1600, np.float32), 300.0, 400.0, 0.3, silent=True)
    assert chunk.reaches(400.0) and not chunk.carries(400.0)
    assert chunk.carries(300.0) and not chunk.reaches(300.0)


def test_chunk_must_be_a_whole_number_of_samples() -> None:
    with pytest.raises(ValueError, match="whole number"):
        Pacer(1, 22050)
    with pytest.raises(ValueError, match="rate"):
        Pacer(100, 16000, source=MicQueue(24000))


def test_lag_storage_grows_without_losing_values() -> None:
    pacer = Pacer(10, 16000, clock=lambda: 0.0)
    pacer.start()
    for k in range(5000):
        chunk = pacer.take()
        assert chunk is not None
        pacer.record_send(chunk, sent=chunk.scheduled + (k % 7) / 1000.0)
    values = pacer.lag.values()
    assert values.size == 5000
    assert values[6] == pytest.approx(6.0) and values[4999] == pytest.approx((4999 % 7) * 1.0)


async def test_default_clock_and_sleep_keep_the_absolute_schedule() -> None:
    """Without injected clock/sleep the pacer sleeps on the running loop until each due time
    (never early by more than the loop's 1 ms timer resolution)."""
    import time

    pacer = Pacer(20, 16000)
    due = []
    for _ in range(4):
        chunk = await pacer.next_chunk()
        assert chunk is not None
        due.append((chunk.scheduled, time.monotonic()))
    assert [round(s - due[0][0], 3) for s, _ in due] == [0.0, 0.02, 0.04, 0.06]
    assert all(t >= s - 0.0015 for s, t in due)
