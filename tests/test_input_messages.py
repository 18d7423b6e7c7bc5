"""Messages that say what is wrong with the user's input (issue 17.7).

A WAV too short or cut short said "no speech found"; it now says what the file holds. ``talk``
on a machine without a sound server now says so and names the ways to talk without one
(``--output-device none``, ``--input-file``). Each runs the real CLI: the input checks in this process (support.cli), talk's device
checks as a process of their own (what a process finds on the machine is the point there).
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
from support.cli import invoke
from support.cli import one_line as one_line_of

from duplexctl.audio.source import load_audio
from duplexctl.errors import MissingDependency

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parent.parent
NOWHERE = "ws://127.0.0.1:9/v1/realtime?duplex=1"  # nobody listens: errors must come first


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "duplexctl", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def speech_wav(seconds: float = 1.0) -> bytes:
    t = np.arange(int(16000 * seconds)) / 16000
    out = io.BytesIO()
    samples = (0.5 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    soundfile.write(out, samples, 16000, subtype="PCM_16", format="WAV")
    return out.getvalue()


@pytest.fixture
def short_wav(tmp_path: Path) -> Path:
    path = tmp_path / "short.wav"
    noise = np.random.default_rng(1).uniform(-0.5, 0.5, 28).astype(np.float32)
    soundfile.write(path, noise, 16000, subtype="PCM_16")
    return path


@pytest.fixture
def truncated_wav(tmp_path: Path) -> Path:
    """A 1 s WAV whose file was cut after 28 samples (the header still says 16000)."""
    path = tmp_path / "truncated.wav"
    data = speech_wav()
    assert data[36:40] == b"data"
    path.write_bytes(data[: 44 + 28 * 2])
    return path


def test_a_short_wav_says_what_it_holds(short_wav: Path) -> None:
    done = invoke("replay", str(short_wav), "--url", NOWHERE)
    line = one_line_of(done.stderr)
    print(line)
    assert done.code == 2
    assert f"{short_wav}: file holds 28 samples (1.75 ms) at 16000 Hz" in line
    assert "too short to hold speech" in line


def test_a_truncated_wav_says_it_is_truncated(truncated_wav: Path) -> None:
    path = str(truncated_wav)
    for command in (["replay", path], ["load", path, "--count", "1", "--sessions", "1"]):
        done = invoke(*command, "--url", NOWHERE)
        line = one_line_of(done.stderr)
        print(line)
        assert done.code == 2
        assert "file holds 28 samples (1.75 ms) at 16000 Hz" in line
        assert "truncated (its header declares 16000 samples, 1000 ms)" in line


def test_silence_says_how_long_it_is(tmp_path: Path) -> None:
    path = tmp_path / "silence.wav"
    soundfile.write(path, np.zeros(32000, dtype=np.float32), 16000, subtype="PCM_16")
    line = one_line_of(invoke("replay", str(path), "--url", NOWHERE).stderr)
    assert "file holds 32000 samples (2000 ms) at 16000 Hz; no speech found in it" in line


def test_the_header_is_only_blamed_when_it_promised_more(
    tmp_path: Path, truncated_wav: Path
) -> None:
    cut = load_audio(truncated_wav)
    assert (cut.original_frames, cut.declared_frames) == (28, 16000)
    whole = tmp_path / "whole.wav"
    whole.write_bytes(speech_wav())
    assert load_audio(whole).declared_frames is None
    streamed = tmp_path / "streamed.wav"  # a streaming writer's placeholder data size
    data = bytearray(speech_wav())
    data[40:44] = struct.pack("<I", 0xFFFFFFFF)
    streamed.write_bytes(bytes(data))
    clip = load_audio(streamed)
    assert clip.declared_frames is None and clip.original_frames == 16000


# --- talk without a sound server -------------------------------------------------------------


def portaudio_sees_devices() -> bool:
    proc = run_cli("talk", "--list-devices")
    return proc.returncode == 0 and not proc.stdout.startswith("no audio devices found")


def test_talk_without_a_sound_server_says_how_to_talk_anyway() -> None:
    """On this machine (no sound server, no card): one line naming both alternatives."""
    if portaudio_sees_devices():
        pytest.skip("PortAudio sees audio devices here; the in-process test covers the message")
    proc = run_cli("talk", "--duration", "1", "--url", NOWHERE)
    line = one_line(proc)
    print(line)
    assert proc.returncode == 2
    assert "no audio output device found" in line and "no sound server" in line
    assert "--output-device none" in line and "--input-file FILE" in line
    proc = run_cli("talk", "--duration", "1", "--output-device", "none", "--url", NOWHERE)
    line = one_line(proc)
    assert proc.returncode == 2
    assert "no audio input device found" in line and "--input-file FILE[@SECONDS]" in line
    listing = run_cli("talk", "--list-devices")
    assert "--output-device none" in listing.stdout


def test_talk_names_the_alternatives_whatever_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """PortAudio listing no device at all (as without a sound server): the same line."""
    from duplexctl.audio import devices
    from duplexctl.talk.config import TalkConfig
    from duplexctl.talk.session import TalkSession
    from duplexctl.talk.view import PlainView

    monkeypatch.setattr(devices, "list_devices", lambda: [])
    for output, expected in ((None, "--output-device none"), ("none", "--input-file FILE[@")):
        talk = TalkSession(TalkConfig(output_device=output), PlainView(io.StringIO()))
        with pytest.raises(MissingDependency) as info:
            talk._open_devices(talk._build_settings("server_vad"))
        assert expected in str(info.value) and "\n" not in str(info.value)
        assert "PortAudio sees no sound server" in str(info.value)
