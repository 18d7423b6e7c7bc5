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


def frame_energies(samples: np.ndarray, phase: int, per: int) -> np.ndarray:
    """Mean-square energy of each ``per``-sample frame ``samples`` touches, when its first
    sample sits ``phase`` samples into a frame: one head, whole frames by reshaping, one
    tail (each part divided by ``per``: a partial frame adds its share)."""
    n = int(samples.size)
    x = np.asarray(samples, dtype=np.float32)
    squares = x * x
    head = min(n, (-phase) % per)
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
    return parts


class EnergyCache:
    """Frame energies of clip views (:func:`frame_energies`), computed once per (clip,
    offset, length, phase) for every session of a process, like the appends' base64
    (``scenario/clips.py`` ``AppendCache``, whose rule it follows: the clip is kept with
    its entry, so its ``id`` cannot be reused while the entry lives; bounded by ``limit``
    entries, beyond which energies are computed without being kept)."""

    def __init__(self, limit: int = 20_000) -> None:
        self._views: dict[tuple[int, int, int, int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._limit = limit

    def energies(
        self, samples: np.ndarray, origin: tuple[np.ndarray, int], phase: int, per: int
    ) -> np.ndarray:
        clip, offset = origin
        key = (id(clip), offset, int(samples.size), phase, per)
        entry = self._views.get(key)
        if entry is not None:
            return entry[1]
        parts = frame_energies(samples, phase, per)
        if len(self._views) < self._limit:
            self._views[key] = (clip, parts)
        return parts


class ConversationTimeline:
    """Mean-square energy per frame of each channel, ms from the run's origin."""

    def __init__(self, frame_ms: float = ActivityParams().frame_ms) -> None:
        self.frame_ms = frame_ms
        self._energy = [np.zeros(0), np.zeros(0)]  # grown by doubling
        self._frames = [0, 0]  # frames in use on each channel

    def add(
        self,
        channel: int,
        samples: np.ndarray,
        rate: int,
        at_ms: float,
        *,
        origin: tuple[np.ndarray, int] | None = None,
        cache: EnergyCache | None = None,
    ) -> None:
        """Place mono float ``samples`` at ``rate`` on ``channel`` starting at ``at_ms``.

        The start is rounded to a whole sample (1/16 ms at 16 kHz). ``origin`` (the clip and
        offset ``samples`` is a view of) with a ``cache`` shared by the process's sessions:
        the view's frame energies are computed once (a load speaks the same clips in every
        session, and summing them was a seventh of its CPU), then only added in place."""
        per = round(rate * self.frame_ms / 1000.0)
        start = round(at_ms * rate / 1000.0)
        if start < 0:
            samples, start = samples[-start:], 0
            origin = None  # no longer the view the cache knows
        if samples.size == 0:
            return
        if origin is not None and cache is not None:
            parts = cache.energies(samples, origin, start % per, per)
        else:
            parts = frame_energies(samples, start % per, per)
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
