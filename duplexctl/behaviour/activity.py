"""Voice activity on one channel of the aligned conversation, offline, with its own noise floor.

Why not :mod:`duplexctl.audio.vad` as it is: that detector serves the server VAD and
``t_eos`` with a fixed -40 dBFS threshold, 16 ms frames and a 500 ms silence window, the
right choice for deciding when a *turn* ends. The behaviour figures need the boundaries of
*speech* (a 1 s pause inside a turn, a 300 ms backchannel) within 30 ms, on a user channel
that may carry noise. Measured by ``bench/behaviour_vad.py`` (docs/metrics.md "Voice
activity"): a fixed threshold loses the speech boundaries once stationary noise reaches it,
so here the threshold follows the channel's own noise floor (a low percentile of the frame
levels, known offline because the whole conversation is there), with 10 ms frames.

No model file (Silero) is needed for the two channels duplexctl produces: the user channel
is the speech it sent (clean or with the noise a scenario adds), the assistant channel is
clean digital audio as heard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SILENT_DB = -100.0  # frames below this are digital silence, not a noise floor


@dataclass(frozen=True, slots=True)
class ActivityParams:
    """Tuned by ``bench/behaviour_vad.py`` on the bundled speech, clean and noisy."""

    frame_ms: float = 10.0
    floor_db: float = -45.0  # never detect below this level (dBFS), whatever the floor
    above_noise_db: float = 3.0  # the threshold sits this far above the noise floor
    noise_percentile: float = 10.0  # of all frame levels: the noise floor
    min_speech_ms: float = 40.0  # shorter bursts are clicks, not speech
    merge_gap_ms: float = 150.0  # shorter silences are inside one stretch of speech


@dataclass(frozen=True, slots=True)
class Segment:
    """One stretch of voice activity, ms on the channel's clock, ``start_ms < end_ms``."""

    start_ms: float
    end_ms: float

    @property
    def duration_ms(self) -> float:
        return self.end_ms - self.start_ms


def frame_samples(rate: int, frame_ms: float) -> int:
    """Samples in one analysis frame; the rates duplexctl uses divide into whole frames."""
    return max(1, round(rate * frame_ms / 1000.0))


def frame_levels(samples: np.ndarray, rate: int, frame_ms: float) -> np.ndarray:
    """dBFS of each whole frame's RMS."""
    frame = frame_samples(rate, frame_ms)
    n = samples.size // frame
    if n == 0:
        return np.zeros(0)
    frames = np.asarray(samples[: n * frame], dtype=np.float64).reshape(n, frame)
    rms = np.sqrt(np.mean(np.square(frames), axis=1))
    return np.asarray(20.0 * np.log10(np.maximum(rms, 1e-12)))


def threshold_db(levels: np.ndarray, params: ActivityParams) -> float:
    """The loudness above which a frame is voice: ``above_noise_db`` over the noise floor
    (the ``noise_percentile`` of all frame levels: a conversation is mostly not speech on
    either channel), never below ``floor_db``; a channel whose floor is digital silence
    keeps ``floor_db``."""
    noise = float(np.percentile(levels, params.noise_percentile))
    if noise <= SILENT_DB:
        return params.floor_db
    return max(params.floor_db, noise + params.above_noise_db)


def voice_activity(
    samples: np.ndarray, rate: int, params: ActivityParams | None = None
) -> list[Segment]:
    """Segments of voice activity in a whole mono signal."""
    p = params or ActivityParams()
    return segments_from_levels(frame_levels(samples, rate, p.frame_ms), p)


def segments_from_levels(levels: np.ndarray, params: ActivityParams | None = None) -> list[Segment]:
    """Segments of voice activity from frame levels (dBFS, one per ``frame_ms``)."""
    p = params or ActivityParams()
    if levels.size == 0:
        return []
    return bridged(loud_runs(levels >= threshold_db(levels, p), p.frame_ms), p)


def loud_runs(loud: np.ndarray, frame_ms: float) -> list[tuple[float, float]]:
    """The runs of frames marked speech, as [start, end) in ms."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], loud.astype(np.int8), [0]])))
    runs = zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True)
    return [(s * frame_ms, e * frame_ms) for s, e in runs]


def bridged(runs: list[tuple[float, float]], params: ActivityParams) -> list[Segment]:
    """Runs of detected speech (ms, in order) as segments: gaps under ``merge_gap_ms``
    bridged, bursts under ``min_speech_ms`` dropped. Shared with the benchmark's other
    detectors, so they are compared on the same rules."""
    merged: list[list[float]] = []
    for start, end in runs:
        if merged and start - merged[-1][1] < params.merge_gap_ms:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    return [Segment(s, e) for s, e in merged if e - s >= params.min_speech_ms]
