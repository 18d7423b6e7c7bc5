"""The behaviour figures' voice activity finds known speech boundaries within 30 ms.

Truth by construction (tools/make_recordings.py): each bundled turn is speech padded with
exactly 300 ms of silence before and 1000 ms after. The fixed-threshold detector of
audio/vad.py loses these boundaries once white noise sits 20 dB under the speech; the
noise-floor threshold keeps them (bench/behaviour_vad.py prints the whole table).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import soundfile as sf

from duplexctl.audio import manifest
from duplexctl.audio.vad import speech_segments
from duplexctl.behaviour.activity import voice_activity

RATE = 16000


def _known(name: str) -> tuple[np.ndarray, float, float]:
    entry = manifest.bundled().get(name)  # type: ignore[union-attr]
    assert entry is not None
    data, rate = sf.read(entry.path, dtype="float32")
    assert rate == RATE
    return data, 300.0, 1000.0 * data.size / RATE - 1000.0


def _noisy(data: np.ndarray, start: float, end: float, snr_db: float) -> np.ndarray:
    speech = data[int(start * RATE / 1000) : int(end * RATE / 1000)]
    rms = float(np.sqrt(np.mean(np.square(speech, dtype=np.float64))))
    noise = np.random.default_rng(7).standard_normal(data.size) * rms / 10 ** (snr_db / 20)
    return (data + noise).astype(np.float32)


@pytest.mark.parametrize("name", ["hello.wav", "followup.wav", "count.wav", "short_ack.wav"])
@pytest.mark.parametrize("snr_db", [None, 20.0])
def test_bounds_within_30_ms(name: str, snr_db: float | None) -> None:
    data, start, end = _known(name)
    signal = data if snr_db is None else _noisy(data, start, end, snr_db)
    segments = voice_activity(signal, RATE)
    assert segments, "no voice found"
    assert abs(segments[0].start_ms - start) <= 30.0
    assert abs(segments[-1].end_ms - end) <= 30.0


def test_a_pause_inside_a_turn_is_found_to_30_ms() -> None:
    hello, _, hello_end = _known("hello.wav")
    follow, _, _ = _known("followup.wav")
    pause = np.zeros(int(1.2 * RATE), dtype=np.float32)
    head = hello[: int(hello_end * RATE / 1000)]
    signal = _noisy(np.concatenate([head, pause, follow[int(0.3 * RATE) :]]), 300, hello_end, 20)
    segments = voice_activity(signal, RATE)
    gaps = [(b.start_ms - a.end_ms, a.end_ms, b.start_ms) for a, b in itertools.pairwise(segments)]
    _, gap_start, gap_end = max(gaps)
    assert abs(gap_start - hello_end) <= 30.0
    assert abs(gap_end - (hello_end + 1200.0)) <= 30.0


def test_the_fixed_threshold_detector_fails_where_this_one_holds() -> None:
    """Why a detector of its own: at 20 dB SNR the server VAD's detector misses the bounds."""
    data, start, end = _known("hello.wav")
    segments = speech_segments(_noisy(data, start, end, 20.0), RATE)
    assert not segments or abs(segments[0][0] - start) > 30.0 or abs(segments[-1][1] - end) > 30


def test_stationary_noise_alone_is_not_voice() -> None:
    noise = np.random.default_rng(3).standard_normal(RATE * 10).astype(np.float32) * 0.02
    assert voice_activity(noise, RATE) == []
    assert voice_activity(np.zeros(RATE, dtype=np.float32), RATE) == []
