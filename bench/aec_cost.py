"""What echo cancellation costs ``talk``: CPU per second of audio, and time added per block.

Issue 22 asks for the CPU echo cancellation takes per second of audio (a figure for a bench,
not a timed test). This feeds :class:`duplexctl.talk.echo.EchoCanceller` exactly as ``talk``
does, as fast as it goes: a speaker block of 20 ms at 24 kHz (``render``, as the output
callback hands it), then a 20 ms microphone block at 16 kHz holding that far end 60 ms late
and 10 dB down plus the user's speech every other few seconds (``process``). Side by side in
the same run it times the path without cancellation (the block copied through), so the
ratio is the canceller's own share. CPU is the process's (the binding's native threads
included); "added" is the wall time ``process`` takes per block, which is what the capture
path waits (``talk`` captures whole 10 ms frames, so no audio is held back).

    .venv/bin/python bench/aec_cost.py --seconds 30
    .venv/bin/python bench/aec_cost.py --seconds 30 --noise-suppression
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import soundfile as sf

from duplexctl.audio.resample import resample
from duplexctl.talk.echo import EchoCanceller, load_binding
from duplexctl.talk.inputs import InputBlock

ROOT = Path(__file__).resolve().parent.parent
RATE = 16000
SPEAKER_RATE = 24000
BLOCK_MS = 20


def signals(seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """(far end at 24 kHz, microphone at 16 kHz): speech through a 60 ms, -10 dB echo path,
    with the user's own speech added in alternate stretches (double talk included)."""
    speech = np.concatenate(
        [
            sf.read(str(ROOT / "recordings" / n), dtype="float32")[0]
            for n in ("count.wav", "hello.wav")
        ]
    )
    reps = int(np.ceil(seconds * RATE / speech.size)) + 1
    far16 = np.tile(speech, reps)[: int(seconds * RATE)]
    user = np.roll(np.tile(speech, reps)[: far16.size], RATE * 3) * 0.7
    user[(np.arange(user.size) // (RATE * 4)) % 2 == 0] = 0.0
    delay = int(0.060 * RATE)
    mic = np.zeros_like(far16)
    mic[delay:] = far16[:-delay] * 10 ** (-10 / 20)
    return resample(far16, RATE, SPEAKER_RATE), (mic + user).astype(np.float32)


def run(far: np.ndarray, mic: np.ndarray, echo: EchoCanceller | None) -> tuple[float, list[float]]:
    """(CPU seconds, wall ms per block) for pushing the whole signal through one path."""
    mic_block = RATE * BLOCK_MS // 1000
    far_block = SPEAKER_RATE * BLOCK_MS // 1000
    walls: list[float] = []
    cpu0 = time.process_time()
    for k in range(mic.size // mic_block):
        now = time.monotonic()
        block = InputBlock(mic[k * mic_block : (k + 1) * mic_block], k * BLOCK_MS, now - 0.04)
        w0 = time.perf_counter()
        if echo is None:
            out = InputBlock(np.array(block.samples, copy=True), block.start_ms, block.t_capture)
        else:
            echo.render(far[k * far_block : (k + 1) * far_block], now + 0.03)
            out = echo.process(block, now)
        walls.append(1000.0 * (time.perf_counter() - w0))
        assert out.samples.size == mic_block
    return time.process_time() - cpu0, walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="audio to process")
    parser.add_argument("--noise-suppression", action="store_true")
    args = parser.parse_args()
    rtc = load_binding()
    if rtc is None:
        raise SystemExit("the aec extra is not installed: pip install 'duplexctl[aec]'")
    far, mic = signals(args.seconds)
    echo = EchoCanceller(rtc, RATE, SPEAKER_RATE, noise_suppression=args.noise_suppression)
    base_cpu, base_wall = run(far, mic, None)
    aec_cpu, aec_wall = run(far, mic, echo)
    audio_s = mic.size / RATE
    print(
        f"{platform.python_implementation()} {platform.python_version()}, {audio_s:.0f} s of audio"
    )
    print(f"{'path':<28}{'CPU ms per s audio':>20}{'added ms/block p50':>20}{'p99':>8}")
    for name, cpu, wall in (
        ("no cancellation", base_cpu, base_wall),
        ("aec" + (" + noise suppression" if args.noise_suppression else ""), aec_cpu, aec_wall),
    ):
        print(
            f"{name:<28}{1000 * cpu / audio_s:>20.2f}{np.percentile(wall, 50):>20.3f}"
            f"{np.percentile(wall, 99):>8.3f}"
        )
    print(
        f"cancellation: {100 * (aec_cpu - base_cpu) / audio_s:.2f} % of one core; AEC3's own "
        f"delay {1000 * echo.module_delay_s:.1f} ms on top of the computing time above"
    )


if __name__ == "__main__":
    main()
