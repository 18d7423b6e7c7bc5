"""The aligned two-channel timeline, kept as frame energies so every run can afford it.

docs/metrics.md "Conversation behaviour": the user's audio as sent (on the pacer's schedule)
and the assistant's as heard (on the playback clock), on one origin, are exactly what
``conversation.wav`` holds. Voice activity only needs each channel's energy per 10 ms
frame, so this keeps that (two floats per frame and channel, 800 bytes a second) instead of
the samples: the figures are there on every ``replay`` run, ``--out`` or not. Audio placed on
a channel twice (two answers heard at once) adds its energy, as a speaker would mix it.
"""

from __future__ import annotations

import numpy as np

from duplexctl.behaviour.activity import ActivityParams, Segment, segments_from_levels

USER, ASSISTANT = 0, 1


class ConversationTimeline:
    """Mean-square energy per frame of each channel, ms from the run's origin."""

    def __init__(self, frame_ms: float = ActivityParams().frame_ms) -> None:
        self.frame_ms = frame_ms
        self._energy = [np.zeros(0), np.zeros(0)]  # grown by doubling
        self._frames = [0, 0]  # frames in use on each channel

    def add(self, channel: int, samples: np.ndarray, rate: int, at_ms: float) -> None:
        """Place mono float ``samples`` at ``rate`` on ``channel`` starting at ``at_ms``.

        Cheap enough for every append of every ``load`` session (a few microseconds for
        100 ms): the start is rounded to a whole sample (1/16 ms at 16 kHz) and the frames
        are summed as one head, whole frames by reshaping, and one tail."""
        per = round(rate * self.frame_ms / 1000.0)
        start = round(at_ms * rate / 1000.0)
        if start < 0:
            samples, start = samples[-start:], 0
        n = int(samples.size)
        if n == 0:
            return
        x = np.asarray(samples, dtype=np.float32)
        squares = x * x
        head = min(n, (-start) % per)
        whole = (n - head) // per
        tail = n - head - whole * per
        parts = np.empty((head > 0) + whole + (tail > 0))
        k = 0
        if head:
            parts[0] = squares[:head].sum(dtype=np.float64)
            k = 1
        if whole:
            body = squares[head : head + whole * per].reshape(whole, per)
            parts[k : k + whole] = body.sum(axis=1, dtype=np.float64)
        if tail:
            parts[-1] = squares[n - tail :].sum(dtype=np.float64)
        parts /= per
        lo = start // per
        end = lo + len(parts)
        energy = self._energy[channel]
        if end > energy.size:
            grown = np.zeros(max(end, 2 * energy.size))
            grown[: energy.size] = energy
            energy = self._energy[channel] = grown
        energy[lo:end] += parts
        self._frames[channel] = max(self._frames[channel], end)

    def cut(self, channel: int, from_ms: float) -> None:
        """Nothing of ``channel`` was heard from ``from_ms`` on (a flushed answer)."""
        first = max(0, int(np.ceil(from_ms / self.frame_ms)))
        self._energy[channel][first : self._frames[channel]] = 0.0

    def length_ms(self) -> float:
        return self.frame_ms * max(self._frames)

    def levels(self, channel: int) -> np.ndarray:
        """dBFS per frame over the whole timeline (both channels the same length)."""
        energy = np.zeros(max(self._frames))
        used = self._frames[channel]
        energy[:used] = self._energy[channel][:used]
        return np.asarray(10.0 * np.log10(np.maximum(energy, 1e-24)))

    def segments(self, channel: int) -> list[Segment]:
        return segments_from_levels(self.levels(channel), ActivityParams(frame_ms=self.frame_ms))
