"""The audio a scenario speaks, decoded once, and the appends cut from it, encoded once.

Both ``replay`` and ``load`` decode every clip before the first socket opens: bad audio is a
one-line exit 2, never a broken session. ``load`` then shares one :class:`SpokenClip` per
file between hundreds of sessions (read-only arrays) and one :class:`AppendCache`, so a
chunk of a clip at a given offset is converted and base64-encoded once per process instead
of once per session and append: at 300 sessions × 10 appends/s that encoding would
otherwise be a visible part of the send path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duplexctl.audio import pcm
from duplexctl.audio.source import AudioClip, load_audio, no_speech_message, speech_bounds
from duplexctl.errors import BadInput
from duplexctl.scenario.model import Scenario


@dataclass(frozen=True, slots=True)
class SpokenClip:
    """A decoded clip and where its speech starts and ends (ms from the start of the file);
    the bounds place ``t_speech_start`` and ``t_eos`` on the user timeline."""

    clip: AudioClip
    speech_start_ms: float
    speech_end_ms: float

    @property
    def name(self) -> str:
        return self.clip.name


def spoken_clip(path: Path, rate: int, wire_format: str = "pcm16") -> SpokenClip:
    """Decode ``path`` at ``rate`` and find its speech (BadInput when there is none)."""
    clip = load_audio(path, rate, wire_format=wire_format)
    bounds = speech_bounds(clip)
    if bounds is None:
        raise BadInput(f"{path}: {no_speech_message(clip)}")
    return SpokenClip(clip, bounds[0], bounds[1])


def load_clips(scenario: Scenario, rate: int, wire_format: str) -> dict[Path, SpokenClip]:
    """Decode every audio file before connecting: bad audio is exit 2, not a broken run."""
    clips: dict[Path, SpokenClip] = {}
    for path in scenario.audio_files:
        if path not in clips:
            clips[path] = spoken_clip(path, rate, wire_format)
    return clips


class AppendCache:
    """base64 of append chunks in one wire format, computed once per (clip, offset, length).

    A chunk that is a view into a preloaded clip comes with its origin (the clip array and
    the offset of its first sample, :attr:`~duplexctl.audio.pacer.Chunk.origin`); the cache
    keeps a reference to the clip it saw, so that clip's ``id`` cannot be reused by another
    array while the entry lives. Silence is keyed by its length alone. Chunks without an
    origin (a clip edge inside the chunk: they own their data) are encoded each time.
    Bounded by ``limit`` entries: beyond it, chunks are encoded without being kept.
    """

    def __init__(self, wire_format: str = "pcm16", limit: int = 20_000) -> None:
        self.wire_format = wire_format
        self._views: dict[tuple[int, int, int], tuple[np.ndarray, str]] = {}
        self._silence: dict[int, str] = {}
        self._limit = limit

    def _encode(self, samples: np.ndarray) -> str:
        return pcm.b64encode(pcm.encode(samples, self.wire_format))

    def encode(
        self, samples: np.ndarray, silent: bool, origin: tuple[np.ndarray, int] | None = None
    ) -> str:
        """The append's ``audio`` field for ``samples`` (``silent``: all zeros; ``origin``:
        the clip and offset ``samples`` is a view of, if it is one)."""
        if silent:
            found = self._silence.get(samples.size)
            if found is None:
                zeros = np.zeros(samples.size, dtype=np.float32)
                found = self._silence[samples.size] = self._encode(zeros)
            return found
        if origin is None:
            return self._encode(samples)
        clip, offset = origin
        key = (id(clip), offset, samples.size)
        entry = self._views.get(key)
        if entry is not None:
            return entry[1]
        text = self._encode(samples)
        if len(self._views) < self._limit:
            self._views[key] = (clip, text)
        return text
