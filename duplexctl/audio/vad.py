"""Energy voice-activity detection with hysteresis, streaming and offline.

One detector serves three users: the reference server's ``server_vad`` (speech_started /
speech_stopped with prefix padding and a silence duration, docs/protocol.md §6.2), the recordings
manifest (where speech starts and ends in a WAV, docs/metrics.md ``t_eos``), and ``talk``'s local
barge-in trigger. An energy detector is enough for all three: the inputs are clean speech
and digital silence, and unlike Silero it needs no model file.

Hysteresis: a frame is "loud" above ``threshold_db``; speech starts after
``min_speech_ms`` of consecutive loud audio and stops after ``silence_ms`` of consecutive
quiet audio (frames below ``threshold_db - hysteresis_db`` count as quiet; frames between
the two levels keep the current state).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_MS = 16  # analysis frame; 256 samples at 16 kHz


@dataclass(frozen=True, slots=True)
class VadParams:
    threshold_db: float = -40.0  # dBFS of the frame RMS that counts as loud
    hysteresis_db: float = 6.0
    min_speech_ms: int = 96
    silence_ms: int = 500
    prefix_padding_ms: int = 300


@dataclass(frozen=True, slots=True)
class VadEvent:
    """``kind`` is ``"start"`` or ``"stop"``; ``ms`` on the detector's input clock.

    For a start, ``ms`` is the onset minus the prefix padding (floored at 0), the value the
    server reports as ``audio_start_ms``; ``onset_ms`` is the first loud frame itself. For a
    stop, ``ms`` is the end of the last loud frame (where speech really ended: a client's
    ``t_eos``) and ``decided_ms`` the input position at which the silence duration elapsed
    and the detector decided (what vLLM-Omni's server VAD reports as ``audio_end_ms``).
    """

    kind: str
    ms: float
    onset_ms: float
    decided_ms: float | None = None


def threshold_to_db(threshold: float) -> float:
    """Map a Silero-style probability threshold (0.15-1.0, default 0.5) to dBFS.

    0.5 -> -40 dBFS; each 0.1 above or below moves the level by 5 dB. Lets a client's
    ``turn_detection.threshold`` make the reference server's detector stricter or looser in
    the same direction as on a real server.
    """
    return -40.0 + (threshold - 0.5) * 50.0


class StreamingVad:
    """Feed float32 mono chunks at ``rate``; get start/stop events on the input clock."""

    def __init__(self, rate: int, params: VadParams | None = None) -> None:
        self.rate = rate
        self.params = params or VadParams()
        self._frame = max(1, rate * FRAME_MS // 1000)
        self._pending = np.zeros(0, dtype=np.float32)
        self._pos = 0  # samples consumed into whole frames
        self.speaking = False
        self._loud_run = 0.0
        self._quiet_run = 0.0
        self._run_start_ms = 0.0
        self._last_loud_end_ms = 0.0

    @property
    def position_ms(self) -> float:
        return 1000.0 * self._pos / self.rate

    @property
    def last_loud_end_ms(self) -> float:
        """End of the last loud frame: where speech last ended, on the input clock."""
        return self._last_loud_end_ms

    def reset(self) -> None:
        """Forget the current utterance (the server resets its detector after each commit)."""
        self.speaking = False
        self._loud_run = self._quiet_run = 0.0

    def feed(self, samples: np.ndarray) -> list[VadEvent]:
        events: list[VadEvent] = []
        data = np.concatenate([self._pending, np.asarray(samples, dtype=np.float32)])
        n_frames = data.size // self._frame
        if n_frames:
            frames = data[: n_frames * self._frame].reshape(n_frames, self._frame)
            energy = np.sqrt(np.mean(np.square(frames, dtype=np.float64), axis=1))
            levels = 20.0 * np.log10(np.maximum(energy, 1e-10))
            for level in levels:
                event = self._step(float(level))
                if event is not None:
                    events.append(event)
        self._pending = data[n_frames * self._frame :]
        return events

    def _step(self, level: float) -> VadEvent | None:
        p = self.params
        start_ms = self.position_ms
        self._pos += self._frame
        end_ms = self.position_ms
        loud = level >= p.threshold_db
        quiet = level < p.threshold_db - p.hysteresis_db
        if not self.speaking:
            if loud:
                if self._loud_run == 0.0:
                    self._run_start_ms = start_ms
                self._loud_run += FRAME_MS
                self._last_loud_end_ms = end_ms
                if self._loud_run >= p.min_speech_ms:
                    self.speaking = True
                    self._quiet_run = 0.0
                    onset = self._run_start_ms
                    return VadEvent("start", max(0.0, onset - p.prefix_padding_ms), onset)
            elif quiet:
                self._loud_run = 0.0
            return None
        if loud:
            self._quiet_run = 0.0
            self._last_loud_end_ms = end_ms
        elif quiet or not loud:
            self._quiet_run += FRAME_MS
            if self._quiet_run >= p.silence_ms:
                self.speaking = False
                self._loud_run = 0.0
                return VadEvent("stop", self._last_loud_end_ms, self._run_start_ms, end_ms)
        return None


def speech_segments(
    samples: np.ndarray, rate: int, params: VadParams | None = None
) -> list[tuple[float, float]]:
    """Offline: (onset_ms, end_ms) of each utterance in a whole signal (no prefix padding)."""
    vad = StreamingVad(rate, params)
    segments: list[tuple[float, float]] = []
    onset: float | None = None
    for event in vad.feed(samples):
        if event.kind == "start":
            onset = event.onset_ms
        elif onset is not None:
            segments.append((onset, event.ms))
            onset = None
    if onset is not None:
        segments.append((onset, vad._last_loud_end_ms))
    return segments
