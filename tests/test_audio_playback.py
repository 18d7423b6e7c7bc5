"""audio/playback.py: the simulated playback clock's arithmetic (injected times only)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from duplexctl.audio.playback import PlaybackClock


def test_p0_is_first_recv_plus_prebuffer() -> None:
    clock = PlaybackClock(prebuffer_ms=200)
    assert clock.first_audible is None and clock.end_time() is None
    assert clock.played_ms(5.0) == 0.0
    clock.receive(10.0, 100)
    assert clock.first_audible == pytest.approx(10.2)
    assert clock.played_ms(10.1) == 0.0
    assert clock.played_ms(10.25) == pytest.approx(50)
    assert clock.end_time() == pytest.approx(10.3)


def test_chunks_faster_than_realtime_play_gaplessly() -> None:
    clock = PlaybackClock(prebuffer_ms=100)
    for k in range(10):  # 10 x 100 ms chunks, one every 50 ms
        clock.receive(1.0 + 0.05 * k, 100)
    assert clock.underruns == 0 and clock.stall_ms == 0
    assert clock.first_audible == pytest.approx(1.1)
    assert clock.end_time() == pytest.approx(2.1)
    assert clock.played_ms(1.6) == pytest.approx(500)
    assert clock.played_ms(5.0) == pytest.approx(1000)  # never more than received
    assert clock.done_playing(2.1) and not clock.done_playing(2.0)


def test_underrun_counts_and_stalls() -> None:
    clock = PlaybackClock(prebuffer_ms=0)
    clock.receive(0.0, 100)  # plays 0.0 .. 0.1
    clock.receive(0.05, 100)  # buffered: plays 0.1 .. 0.2
    clock.receive(0.35, 100)  # due at 0.2, arrived 0.35: 150 ms of silence inserted
    assert clock.underruns == 1
    assert clock.stall_ms == pytest.approx(150)
    assert clock.played_ms(0.2) == pytest.approx(200)
    assert clock.played_ms(0.3) == pytest.approx(200)  # stalled
    assert clock.played_ms(0.4) == pytest.approx(250)
    assert clock.end_time() == pytest.approx(0.45)
    clock.receive(0.45, 100)  # exactly on time: not an underrun
    assert clock.underruns == 1
    clock.receive(0.6, 50)  # due 0.55: 50 ms late
    assert clock.underruns == 2 and clock.stall_ms == pytest.approx(200)
    assert clock.played_ms(0.2) == pytest.approx(200)  # the past is still answerable


def test_chunk_during_prebuffer_is_not_an_underrun() -> None:
    clock = PlaybackClock(prebuffer_ms=300)
    clock.receive(0.0, 40)
    clock.receive(0.25, 40)
    assert clock.underruns == 0
    assert clock.end_time() == pytest.approx(0.38)


def test_flush_stops_at_once_and_never_exceeds_received() -> None:
    clock = PlaybackClock(prebuffer_ms=100)
    clock.receive(0.0, 1000)  # a second of audio arrives at once
    heard = clock.flush(0.35)  # barge-in: 250 ms played
    assert heard == pytest.approx(250)
    assert clock.played_ms(10.0) == pytest.approx(250)
    assert clock.end_time() == pytest.approx(0.35)
    clock.receive(0.4, 100)  # leaked after the flush: discarded, never played
    assert clock.discarded_ms == 100 and clock.received_ms == 1000
    assert clock.flush(0.9) == pytest.approx(250)  # idempotent


def test_flush_after_playback_finished_keeps_the_natural_end() -> None:
    clock = PlaybackClock(prebuffer_ms=0)
    clock.receive(0.0, 200)
    assert clock.flush(1.0) == pytest.approx(200)
    assert clock.end_time() == pytest.approx(0.2)


def test_flush_before_p0_heard_nothing() -> None:
    clock = PlaybackClock(prebuffer_ms=200)
    clock.receive(0.0, 100)
    assert clock.flush(0.1) == 0.0
    assert clock.end_time() == pytest.approx(0.1)


def test_empty_chunks_are_ignored() -> None:
    clock = PlaybackClock(prebuffer_ms=50)
    clock.receive(1.0, 0)
    assert clock.first_audible is None and clock.chunks == 0


@given(
    st.lists(
        st.tuples(st.floats(0, 0.5), st.floats(1, 200)),  # (gap before recv s, duration ms)
        min_size=1,
        max_size=40,
    ),
    st.floats(0, 300),
    st.floats(0, 10),
)
def test_invariants(chunks: list[tuple[float, float]], prebuffer: float, probe: float) -> None:
    clock = PlaybackClock(prebuffer_ms=prebuffer)
    t = 0.0
    total = 0.0
    for gap, duration in chunks:
        t += gap
        clock.receive(t, duration)
        total += duration
    p0 = clock.first_audible
    assert p0 is not None
    end = clock.end_time()
    assert end is not None
    # Wall span of playback = audio + inserted silence.
    assert (end - p0) * 1000 == pytest.approx(total + clock.stall_ms, abs=1e-6)
    # played_ms is monotone, bounded by received, and complete at the end.
    samples = [clock.played_ms(p0 + probe * k / 10) for k in range(11)]
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(samples))
    assert all(0 <= s <= total + 1e-9 for s in samples)
    assert clock.played_ms(end) == pytest.approx(total)
    heard = clock.flush(t + probe)
    assert 0 <= heard <= total + 1e-9
