"""audio/source.py: real files of many shapes → mono float32 at the session rate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from duplexctl.audio.manifest import recording_path
from duplexctl.audio.source import AudioClip, load_audio, speech_bounds
from duplexctl.errors import BadInput


def tone(freq: float, rate: int, seconds: float, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_hz(clip: AudioClip) -> float:
    spectrum = np.abs(np.fft.rfft(clip.samples * np.hanning(clip.samples.size)))
    return float(np.fft.rfftfreq(clip.samples.size, 1 / clip.rate)[np.argmax(spectrum)])


def test_stereo_44k_pcm24_tone_keeps_its_frequency(tmp_path: Path) -> None:
    x = tone(1000, 44100, 1.0)
    path = tmp_path / "tone.wav"
    sf.write(path, np.stack([x, x], axis=1), 44100, subtype="PCM_24")

    clip = load_audio(path, 16000)

    assert clip.rate == 16000
    assert clip.samples.dtype == np.float32 and clip.samples.ndim == 1
    assert clip.samples.size == 16000
    assert abs(peak_hz(clip) - 1000) <= 2
    assert 0.45 < float(np.max(np.abs(clip.samples[1000:-1000]))) < 0.55
    assert (clip.original_rate, clip.original_channels, clip.original_format) == (
        44100,
        2,
        "PCM_24",
    )
    assert clip.conversion is not None
    assert clip.conversion.startswith("tone.wav: 44100 Hz stereo PCM_24 → 16000 Hz mono pcm16")
    assert "downmixed" in clip.conversion and "resampled" in clip.conversion
    assert "\n" not in clip.conversion


def test_downmix_averages_channels(tmp_path: Path) -> None:
    left = tone(440, 16000, 0.5, amp=0.4)
    path = tmp_path / "lr.wav"
    sf.write(path, np.stack([left, np.zeros_like(left)], axis=1), 16000, subtype="FLOAT")
    clip = load_audio(path, 16000)
    np.testing.assert_allclose(clip.samples, left / 2, atol=1e-6)
    assert clip.conversion is not None and "(downmixed" in clip.conversion


def test_native_mono_pcm16_needs_no_conversion(tmp_path: Path) -> None:
    x = tone(300, 16000, 0.25)
    path = tmp_path / "native.wav"
    sf.write(path, x, 16000, subtype="PCM_16")
    clip = load_audio(path, 16000)
    assert clip.conversion is None
    np.testing.assert_allclose(clip.samples, x, atol=1 / 32768)


@pytest.mark.parametrize(
    ("suffix", "fmt", "subtype", "rate", "channels", "word"),
    [
        ("flac", "FLAC", "PCM_16", 48000, 1, "resampled"),
        ("wav", "WAV", "FLOAT", 8000, 3, "requantized"),
        ("ogg", "OGG", "VORBIS", 22050, 2, "decoded"),
        ("mp3", "MP3", "MPEG_LAYER_III", 44100, 1, "decoded"),
    ],
)
def test_many_formats_rates_and_channels(
    tmp_path: Path, suffix: str, fmt: str, subtype: str, rate: int, channels: int, word: str
) -> None:
    x = tone(500, rate, 1.0)
    data = np.stack([x] * channels, axis=1) if channels > 1 else x
    path = tmp_path / f"in.{suffix}"
    sf.write(path, data, rate, format=fmt, subtype=subtype)

    clip = load_audio(path, 24000)

    assert clip.rate == 24000 and clip.original_rate == rate
    assert clip.original_channels == channels
    assert abs(clip.duration_ms - 1000) < 80  # lossy codecs add a little padding
    assert abs(peak_hz(clip) - 500) <= 3
    assert clip.conversion is not None and word in clip.conversion
    assert clip.conversion.startswith(f"in.{suffix}: {rate} Hz")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as err:
        load_audio(tmp_path / "nope.wav")
    message = str(err.value)
    assert "nope.wav" in message and "no such file" in message and "\n" not in message


def test_text_file_named_wav(tmp_path: Path) -> None:
    path = tmp_path / "notes.wav"
    path.write_text("this is not audio\n")
    with pytest.raises(BadInput) as err:
        load_audio(path)
    message = str(err.value)
    assert "notes.wav" in message and "not a readable audio file" in message
    assert "\n" not in message
    assert err.value.exit_code == 2


def test_empty_wav(tmp_path: Path) -> None:
    path = tmp_path / "empty.wav"
    sf.write(path, np.zeros(0, dtype=np.float32), 16000)
    with pytest.raises(BadInput) as err:
        load_audio(path)
    assert "empty.wav" in str(err.value) and "no audio" in str(err.value)


def test_zero_byte_file_and_directory(tmp_path: Path) -> None:
    zero = tmp_path / "zero.wav"
    zero.write_bytes(b"")
    with pytest.raises(BadInput, match=r"zero\.wav"):
        load_audio(zero)
    with pytest.raises(BadInput, match="directory"):
        load_audio(tmp_path)


def test_speech_bounds_of_a_bundled_recording_come_from_the_manifest() -> None:
    clip = load_audio(recording_path("hello"), 16000)
    assert clip.conversion is None
    bounds = speech_bounds(clip)
    assert bounds is not None
    start, end = bounds
    assert 250 <= start <= 350  # 0.3 s lead silence
    assert end < clip.duration_ms - 900  # ~1 s trailing silence


def test_speech_bounds_of_other_files_come_from_the_vad(tmp_path: Path) -> None:
    rate = 16000
    signal = np.concatenate(
        [np.zeros(8000), tone(200, rate, 1.0, amp=0.3), np.zeros(16000)]
    ).astype(np.float32)
    path = tmp_path / "burst.wav"
    sf.write(path, signal, rate, subtype="PCM_16")
    bounds = speech_bounds(load_audio(path, rate))
    assert bounds is not None
    assert abs(bounds[0] - 500) <= 20 and abs(bounds[1] - 1500) <= 20


def test_resampled_bundled_recording_keeps_manifest_bounds() -> None:
    clip = load_audio(recording_path("interrupt.wav"), 24000)
    assert clip.conversion is not None and "resampled" in clip.conversion
    bounds = speech_bounds(clip)
    assert bounds is not None
    # Manifest values are ms, so they hold at any rate.
    assert abs(bounds[0] - 288) < 1e-9


def test_no_speech_gives_none(tmp_path: Path) -> None:
    path = tmp_path / "silence.wav"
    sf.write(path, np.zeros(16000, dtype=np.float32), 16000)
    assert speech_bounds(load_audio(path, 16000)) is None


def test_edited_copy_of_a_bundled_recording_is_measured_not_looked_up(tmp_path: Path) -> None:
    source = recording_path("hello.wav")
    samples, rate = sf.read(source, dtype="float32")
    samples[: rate * 2] = 0.0  # silence the first two seconds
    copy = tmp_path / "hello.wav"
    sf.write(copy, samples, rate, subtype="PCM_16")
    bounds = speech_bounds(load_audio(copy, rate))
    assert bounds is not None and bounds[0] >= 2000
