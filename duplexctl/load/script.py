"""What every load session says: one :class:`Script`, built once per process.

The inputs are the same as ``replay``'s (a scenario file, or WAV files spoken one turn each),
parsed by :mod:`duplexctl.scenario.parse`, so load and replay read scenarios the one same way.
With no inputs, the bundled recordings are spoken one turn each (``interrupt.wav`` is kept
for barge-ins).

Audio is decoded, converted to the session rate and its speech bounds measured **once**
here, before the first session starts: hundreds of sessions then share the same read-only
sample arrays, and a bad file fails the run with exit code 2 instead of failing sessions.
Appends of the same clip at the same offset are base64-encoded once (:class:`AppendCache`):
at 300 sessions × 10 appends/s the encoding would otherwise be a visible part of the send
path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from duplexctl.audio import manifest, pcm
from duplexctl.audio.source import AudioClip, load_audio, speech_bounds
from duplexctl.errors import BadInput
from duplexctl.scenario.model import BargeIn, Say, Scenario, Wait
from duplexctl.scenario.parse import from_audio_files, load_inputs

INPUT_RATE: Final = 16000
BARGE_IN_CLIP: Final = "interrupt.wav"


@dataclass(frozen=True, slots=True)
class Utterance:
    """A decoded clip and where its speech starts and ends (ms from the start of the file)."""

    clip: AudioClip
    speech_start_ms: float
    speech_end_ms: float

    @property
    def name(self) -> str:
        return self.clip.name


@dataclass(frozen=True, slots=True)
class Script:
    """The scenario every session runs, with its audio preloaded."""

    scenario: Scenario
    clips: dict[Path, Utterance]
    interrupt: Utterance  # spoken by --mix barge_in
    conversions: tuple[str, ...]

    def utterance(self, path: Path) -> Utterance:
        return self.clips[path]

    @property
    def turns(self) -> int:
        """User turns per pass of the scenario (each say or barge_in opens one)."""
        return sum(isinstance(s, Say | BargeIn) for s in self.scenario.steps)


def _utterance(path: Path, rate: int) -> Utterance:
    clip = load_audio(path, rate)
    bounds = speech_bounds(clip)
    if bounds is None:
        raise BadInput(f"{path}: no speech found (t_eos would be undefined)")
    return Utterance(clip, bounds[0], bounds[1])


def bundled_scenario() -> Scenario:
    """Each bundled recording but the interruption, one turn each."""
    found = manifest.bundled()
    if found is None:
        raise BadInput(f"no bundled recordings in {manifest.recordings_dir()}")
    paths = [
        found.directory / name
        for name in found.names()
        if name != BARGE_IN_CLIP and name != "count.wav"
    ]
    scenario = from_audio_files(sorted(paths))
    return Scenario(name="bundled", steps=scenario.steps)


def build_script(inputs: list[str], *, rate: int = INPUT_RATE) -> Script:
    """Parse the inputs and preload every clip (BadInput on any problem)."""
    scenario = load_inputs([Path(p) for p in inputs]) if inputs else bundled_scenario()
    if not any(isinstance(s, Say | BargeIn) for s in scenario.steps):
        raise BadInput(f"{scenario.name}: the scenario says nothing (no say or barge_in step)")
    clips: dict[Path, Utterance] = {}
    for path in scenario.audio_files:
        if path not in clips:
            clips[path] = _utterance(path, rate)
    interrupt = _utterance(manifest.recording_path(BARGE_IN_CLIP), rate)
    conversions = tuple(u.clip.conversion for u in clips.values() if u.clip.conversion)
    return Script(scenario, clips, interrupt, conversions)


def plain_steps(scenario: Scenario) -> bool:
    """True when the scenario is only say/wait steps (mix behaviours apply to its turns)."""
    return all(isinstance(s, Say | Wait) for s in scenario.steps)


class AppendCache:
    """base64 PCM16 of chunks, computed once per (clip view, length) and shared.

    A chunk that is a view into a preloaded clip is identified by its data address and
    length (the clips live as long as the process, so the address is stable); silence by
    its length. Assembled chunks (a clip edge inside the chunk) are encoded each time.
    """

    def __init__(self, limit: int = 20_000) -> None:
        self._views: dict[tuple[int, int], str] = {}
        self._silence: dict[int, str] = {}
        self._limit = limit

    def encode(self, samples: np.ndarray, silent: bool) -> str:
        if silent:
            found = self._silence.get(samples.size)
            if found is None:
                found = self._silence[samples.size] = pcm.b64encode(
                    pcm.float_to_pcm16(np.zeros(samples.size, dtype=np.float32))
                )
            return found
        if samples.flags.owndata:
            return pcm.b64encode(pcm.float_to_pcm16(samples))
        key = (samples.__array_interface__["data"][0], samples.size)
        found = self._views.get(key)
        if found is None:
            found = pcm.b64encode(pcm.float_to_pcm16(samples))
            if len(self._views) < self._limit:
                self._views[key] = found
        return found
