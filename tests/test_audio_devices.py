"""The audio device layer against a REAL sound server (a private PulseAudio, tests/support/pulse.py).

Sound goes out through :class:`Speaker` into the null sink ``vsink`` and comes back through
:class:`Microphone` from its monitor, so these tests exercise PortAudio, ALSA's pulse plugin
and the server exactly as ``talk`` does. Assertions are on frequency and duration, never on
exact level (resampling moves peaks by up to 3 dB), and timing bounds are generous (shared
machines); the measured figures are printed (``pytest -s``) for the report.

The MissingDependency tests run in a subprocess and need neither PortAudio nor PulseAudio.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from support.pulse import PulseServer

from duplexctl.errors import BadInput, MissingDependency

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parent.parent
MIC_RATE = 16000
SPK_RATE = 24000
LOUD = 0.05  # |x| above this counts as tone (tone amplitude 0.5; silence is digital zero)


def tone(seconds: float, rate: int, freq: float = 440.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


class Capture:
    """Collect microphone blocks in the background; sample times from ``t_capture``."""

    def __init__(self, mic: object) -> None:
        self.mic = mic
        self.blocks: list = []
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Capture:
        self.mic.start()  # type: ignore[attr-defined]
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        async for block in self.mic:  # type: ignore[attr-defined]
            self.blocks.append(block)

    async def __aexit__(self, *exc: object) -> None:
        self.mic.stop()  # type: ignore[attr-defined]
        assert self.task is not None
        await asyncio.wait_for(self.task, 5)

    def signal(self) -> tuple[np.ndarray, np.ndarray]:
        """(samples, monotonic time of each sample)."""
        x = np.concatenate([b.samples for b in self.blocks])
        t = np.concatenate(
            [b.t_capture + np.arange(b.samples.size) / MIC_RATE for b in self.blocks]
        )
        return x, t

    def loud(self) -> tuple[np.ndarray, np.ndarray]:
        x, t = self.signal()
        idx = np.nonzero(np.abs(x) > LOUD)[0]
        return idx, t


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(x.size)))
    return float(np.fft.rfftfreq(x.size, 1.0 / rate)[int(np.argmax(spectrum))])


# --- device discovery (real server) -------------------------------------------------------


@pytest.mark.audio
def test_list_devices_shows_the_pulse_device(pulse_server: PulseServer) -> None:
    from duplexctl.audio.devices import list_devices

    devs = list_devices()
    for dev in devs:
        print(dev.describe())
    pulse = [d for d in devs if "pulse" in d.name.lower()]
    assert pulse, [d.name for d in devs]
    assert pulse[0].max_input_channels > 0 and pulse[0].max_output_channels > 0
    assert any(d.is_default_output for d in devs) and any(d.is_default_input for d in devs)


@pytest.mark.audio
def test_resolve_device_by_default_index_and_name(pulse_server: PulseServer) -> None:
    from duplexctl.audio.devices import list_devices, resolve_device

    pulse = next(d for d in list_devices() if d.name == "pulse")
    assert resolve_device("PULSE", "output") == pulse  # case-insensitive, exact name wins
    assert resolve_device(pulse.index, "input") == pulse
    assert resolve_device(str(pulse.index), "output") == pulse
    assert resolve_device(None, "output").is_default_output
    assert resolve_device(None, "input").is_default_input
    assert resolve_device(pulse, "input") is pulse


@pytest.mark.audio
@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("no-such-device", "no audio output device matches 'no-such-device'"),
        (99, "no audio device with index 99"),
        ("99", "no audio device with index 99"),
        ("u", "is ambiguous"),  # in both 'pulse' and 'default'
    ],
)
def test_resolve_device_errors_are_one_line(
    pulse_server: PulseServer, spec: str | int, needle: str
) -> None:
    from duplexctl.audio.devices import resolve_device

    with pytest.raises(BadInput) as info:
        resolve_device(spec, "output")
    message = str(info.value)
    print(message)
    assert needle in message
    assert "\n" not in message
    assert not isinstance(info.value, MissingDependency)


# --- play and capture through the real server ---------------------------------------------


@pytest.mark.audio
@pytest.mark.parametrize(
    ("spk_device_rate", "mic_device_rate"),
    [(None, None), (48000, 44100)],
    ids=["session-rate", "resampled"],
)
async def test_tone_plays_and_comes_back(
    pulse_server: PulseServer, spk_device_rate: int | None, mic_device_rate: int | None
) -> None:
    """1 s of 440 Hz out of the Speaker comes back from the monitor: same pitch, ~1 s.

    The second case forces device rates different from the session rates, so both
    StreamResamplers (mic 44.1k -> 16k, speaker 24k -> 48k) are in the path.
    """
    from duplexctl.audio.devices import Microphone, Speaker

    started: list[tuple[str, float]] = []
    speaker = Speaker(
        rate=SPK_RATE,
        device_rate=spk_device_rate,
        on_started=lambda rid, t0: started.append((rid, t0)),
    )
    mic = Microphone(rate=MIC_RATE, device_rate=mic_device_rate)
    assert (speaker.device_rate, mic.device_rate) == (
        spk_device_rate or SPK_RATE,
        mic_device_rate or MIC_RATE,
    )
    async with Capture(mic) as cap:
        speaker.start()
        await asyncio.sleep(0.3)
        speaker.enqueue("r1", tone(1.0, SPK_RATE))
        speaker.end_response("r1")
        assert await speaker.drain(5.0)
        await asyncio.sleep(0.2)
        played = speaker.played_ms("r1")
    speaker.close()

    idx, t = cap.loud()
    assert idx.size, "no tone captured"
    span = (idx[-1] - idx[0]) / MIC_RATE
    x, _ = cap.signal()
    freq = peak_hz(x[idx[0] : idx[-1]], MIC_RATE)
    latencies = [b.t_received - b.t_capture for b in cap.blocks]
    assert started and started[0][0] == "r1"
    onset_vs_p0 = t[idx[0]] - started[0][1]
    print(
        f"\ntone: peak {freq:.1f} Hz, span {span * 1000:.0f} ms, played_ms {played:.0f}, "
        f"capture latency median {np.median(latencies) * 1000:.1f} ms "
        f"max {max(latencies) * 1000:.1f} ms, captured onset - P0 {onset_vs_p0 * 1000:+.1f} ms, "
        f"output latency {speaker.output_latency_s * 1000:.0f} ms, underruns {speaker.underruns}"
    )
    assert abs(freq - 440.0) <= 10.0
    assert 0.8 <= span <= 1.2
    assert 950.0 <= played <= 1050.0  # the whole response, from the device position
    assert abs(onset_vs_p0) < 0.25  # P0 (device DAC time) agrees with what was captured
    assert speaker.underruns == 0  # ended responses running dry are not underruns
    assert mic.dropped_blocks == 0


@pytest.mark.audio
async def test_played_ms_follows_the_device_not_enqueue(pulse_server: PulseServer) -> None:
    """2 s enqueued at once: half a second later about 500 ms have played, not 2000."""
    from duplexctl.audio.devices import Speaker

    speaker = Speaker(rate=SPK_RATE)
    speaker.start()
    try:
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        speaker.enqueue("r1", tone(2.0, SPK_RATE))
        samples = []
        while time.monotonic() - t0 < 0.5:
            await asyncio.sleep(0.05)
            samples.append(speaker.played_ms("r1"))
        played, queued = speaker.played_ms("r1"), speaker.queued_ms("r1")
        received = speaker.counts("r1").received_ms
        elapsed_ms = (time.monotonic() - t0) * 1000.0
        print(
            f"\nplayed_ms after {elapsed_ms:.0f} ms: {played:.0f} "
            f"(queued {queued:.0f} ms, received {received:.0f} ms)"
        )
        assert 250.0 <= played <= 900.0
        assert samples == sorted(samples)  # monotonic
        assert received == pytest.approx(2000.0, abs=1.0)
        started = speaker.started_at("r1")
        assert started is not None and started >= t0 - 0.01
        assert queued > 500.0  # the rest is still waiting
        # nothing lost or counted twice: what played, what waits and what the device holds
        assert 1400.0 <= played + queued <= 2000.0 + 1.0
    finally:
        speaker.flush()
        speaker.close()


@pytest.mark.timing
@pytest.mark.audio
async def test_flush_silences_the_output_promptly(pulse_server: PulseServer) -> None:
    """After flush() at t the captured signal is silent within 150 ms of t."""
    from duplexctl.audio.devices import Microphone, Speaker

    speaker = Speaker(rate=SPK_RATE)
    mic = Microphone(rate=MIC_RATE)
    async with Capture(mic) as cap:
        speaker.start()
        await asyncio.sleep(0.3)
        speaker.enqueue("r1", tone(3.0, SPK_RATE))
        await asyncio.sleep(0.6)
        before = speaker.played_ms("r1")
        t_flush = time.monotonic()
        heard = speaker.flush()
        flush_call_ms = (time.monotonic() - t_flush) * 1000.0
        speaker.enqueue("r1", tone(0.5, SPK_RATE))  # a late delta of the cancelled response
        await asyncio.sleep(0.5)
        after = speaker.played_ms("r1")
    speaker.close()

    idx, t = cap.loud()
    assert idx.size, "no tone captured"
    silent_after_ms = (t[idx[-1]] - t_flush) * 1000.0
    print(
        f"\nflush: last loud sample {silent_after_ms:+.1f} ms after flush(), flush() call "
        f"{flush_call_ms:.1f} ms, heard {heard['r1']:.0f} ms, played before {before:.0f} ms, "
        f"dropped after flush {speaker.dropped_after_flush_ms:.0f} ms"
    )
    assert silent_after_ms < 150.0
    assert set(heard) == {"r1"}
    assert before <= heard["r1"] <= before + 150.0
    assert after == heard["r1"]  # frozen at the flush
    assert speaker.dropped_after_flush_ms == pytest.approx(500.0)
    captured_ms = (idx[-1] - idx[0]) / MIC_RATE * 1000.0
    assert abs(captured_ms - heard["r1"]) < 150.0  # heard position matches what came out


@pytest.mark.timing
@pytest.mark.audio
async def test_underrun_is_counted_when_a_live_response_runs_dry(
    pulse_server: PulseServer,
) -> None:
    from duplexctl.audio.devices import Speaker

    speaker = Speaker(rate=SPK_RATE)
    speaker.start()
    try:
        speaker.enqueue("r1", tone(0.1, SPK_RATE))
        await asyncio.sleep(0.4)  # runs dry: response not ended -> underrun
        speaker.enqueue("r1", tone(0.1, SPK_RATE))
        speaker.end_response("r1")
        assert await speaker.drain(3.0)
        await asyncio.sleep(0.1)
        counts = speaker.counts("r1")
        print(f"\nunderruns {counts.underruns}, stall {counts.stall_ms:.0f} ms")
        assert counts.underruns == 1 and speaker.underruns == 1
        assert 100.0 <= counts.stall_ms <= 600.0
        assert speaker.stall_ms == counts.stall_ms  # the one response had every stall
        assert speaker.played_ms("r1") == pytest.approx(200.0, abs=5.0)
        end = speaker.end_time("r1")
        assert end is not None and end <= time.monotonic()  # everything received has played
    finally:
        speaker.close()


# --- PortAudio missing (subprocess; no sound server needed) -------------------------------


def _run_py(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_missing_portaudio_library_is_one_clear_line() -> None:
    """sounddevice's own failure (no libportaudio) becomes MissingDependency, exit code 2."""
    proc = _run_py(
        """
        import ctypes.util, sys
        real = ctypes.util.find_library
        ctypes.util.find_library = lambda name: None if "portaudio" in name else real(name)
        import duplexctl.audio.devices as d
        assert "sounddevice" not in sys.modules  # lazy: importing the module needs no PortAudio
        try:
            d.list_devices()
        except d.MissingDependency as exc:
            print(type(exc).__name__, exc.exit_code, exc, sep="|")
        """
    )
    assert proc.returncode == 0, proc.stderr
    name, code, message = proc.stdout.strip().split("|")
    assert (name, code) == ("MissingDependency", "2")
    assert message == (
        "PortAudio is not installed: apt-get install libportaudio2 (or run install.sh)"
    )


def test_blocked_sounddevice_import_is_missing_dependency() -> None:
    proc = _run_py(
        """
        import sys
        sys.modules["sounddevice"] = None
        from duplexctl.audio.devices import Microphone, MissingDependency
        try:
            Microphone()
        except MissingDependency as exc:
            print("MissingDependency", exc)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("MissingDependency ")
    assert "\n" not in proc.stdout.strip()


def test_no_devices_is_missing_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no device at all, resolve_device says so in one line (not an IndexError)."""
    from duplexctl.audio import devices

    monkeypatch.setattr(devices, "list_devices", lambda: [])
    with pytest.raises(MissingDependency, match=r"^no audio input device found"):
        devices.resolve_device(None, "input")


@pytest.mark.audio
def test_unusable_device_settings_are_one_line(pulse_server: PulseServer) -> None:
    """PortAudio refusing the stream format becomes BadInput, not a PortAudioError traceback."""
    from duplexctl.audio.devices import Speaker

    with pytest.raises(BadInput) as info:
        Speaker(rate=SPK_RATE, device_rate=1)  # no device runs at 1 Hz
    print(info.value)
    assert "cannot be used" in str(info.value) and "\n" not in str(info.value)


def test_busy_device_error_names_the_likely_cause() -> None:
    from duplexctl.audio.devices import DeviceInfo, _open_error

    dev = DeviceInfo(3, "USB Headset", "ALSA", 1, 2, 48000.0)
    err = _open_error(
        "input",
        dev,
        RuntimeError("Error opening InputStream: Device unavailable [PaErrorCode -9985]\nmore"),
    )
    assert isinstance(err, BadInput)
    assert str(err) == (
        "cannot open audio input device 3 (USB Headset): Error opening InputStream: "
        "Device unavailable [PaErrorCode -9985] (busy? another program may hold it)"
    )
