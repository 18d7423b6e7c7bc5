"""What every load session says: one :class:`Script`, built once per process.

The inputs are the same as ``replay``'s (a scenario file, or WAV files spoken one turn each),
parsed by :mod:`duplexctl.scenario.parse`, so load and replay read scenarios the one same way.
With no inputs, the bundled recordings are spoken one turn each (``interrupt.wav`` is kept
for barge-ins).

Audio is decoded, converted to the session rate and its speech bounds measured **once**
here, before the first session starts (:mod:`duplexctl.scenario.clips`, as ``replay`` does):
hundreds of sessions then share the same read-only sample arrays, and a bad file fails the
run with exit code 2 instead of failing sessions. The appends cut from them are
base64-encoded once per process by the :class:`AppendCache` each session's runner is given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from duplexctl.audio import manifest
from duplexctl.errors import BadInput
from duplexctl.scenario.clips import AppendCache, SpokenClip, spoken_clip
from duplexctl.scenario.model import BargeIn, Pause, Say, Scenario, Silence, Step, Wait
from duplexctl.scenario.parse import from_audio_files, load_inputs

__all__ = [
    "AppendCache",
    "Script",
    "build_script",
    "bundled_scenario",
    "plain_steps",
    "scenario_for",
]

INPUT_RATE: Final = 16000
BARGE_IN_CLIP: Final = "interrupt.wav"
#: what one answer takes, unknown before the run: the reference server's default (0.3 s to
#: first audio, 2 s of audio played out) and a little room; a turn is over when its answer
#: has played out (docs/metrics.md "Turn latency")
ANSWER_ALLOWANCE_S: Final = 3.0


@dataclass(frozen=True, slots=True)
class Script:
    """The scenario every session runs, with its audio preloaded.

    ``clips`` holds every file a session may speak, the ``--mix barge_in`` clip
    (``interrupt_path``) last, so a session's runner finds all of them in one dict.
    """

    scenario: Scenario
    clips: dict[Path, SpokenClip]
    interrupt: SpokenClip  # spoken by --mix barge_in
    conversions: tuple[str, ...]
    interrupt_path: Path

    def first_turn(self) -> tuple[float, str]:
        """How long a session takes to complete its first turn, estimated before the run:
        the user's speech up to the first step that waits for an answer (a ``say``'s file
        to its end of speech, each ``pause`` and the speech after it), plus
        :data:`ANSWER_ALLOWANCE_S`; and the words that say so (``followup.wav speaks
        until 3.1 s``)."""
        speech_ms, names = 0.0, []
        for step in self.scenario.steps:
            if isinstance(step, Say):
                clip = self.clips[step.file]
                speech_ms += clip.speech_end_ms
                names.append(step.file.name)
            elif isinstance(step, Pause):
                clip = self.clips[step.file]
                speech_ms += step.ms + clip.speech_end_ms - clip.speech_start_ms
            elif names:
                break
        seconds = speech_ms / 1000 + ANSWER_ALLOWANCE_S
        said = f"{' + '.join(dict.fromkeys(names)) or 'the first turn'} speaks until {speech_ms / 1000:.1f} s"
        return seconds, f"{said}, then about {ANSWER_ALLOWANCE_S:g} s for its answer"

    @property
    def turns(self) -> int:
        """User turns per pass of the scenario (each say or barge_in opens one)."""
        return sum(isinstance(s, Say | BargeIn) for s in self.scenario.steps)

    def step_seconds(self, step: Step) -> float:
        """How long one step takes, estimated before the run (as :meth:`first_turn`): a
        ``say`` to its file's end of speech, a ``pause`` its silence and speech, a
        ``silence`` its length, a ``wait`` :data:`ANSWER_ALLOWANCE_S`; the rest nothing."""
        if isinstance(step, Say):
            return self.clips[step.file].speech_end_ms / 1000
        if isinstance(step, Pause):
            clip = self.clips[step.file]
            return (step.ms + clip.speech_end_ms - clip.speech_start_ms) / 1000
        if isinstance(step, Silence):
            return step.ms / 1000
        if isinstance(step, Wait):
            return ANSWER_ALLOWANCE_S
        return 0.0

    def staggered(
        self, scenario: Scenario, begins: Sequence[str | None], fraction: float
    ) -> tuple[Scenario, list[str | None]]:
        """``scenario`` begun at ``fraction`` (0 ≤ f < 1) of one pass (``--stagger``:
        AIPerf's "virtual history", docs/metrics.md "A steady start").

        A pass is cut into segments at its idle points: the start, and every step after a
        ``wait`` (the user has heard the answer). The position f × pass falls in segment k,
        some way into it; a session cannot speak half a turn it did not start, so it is
        silent for the rest of segment k (a ``silence`` step: the microphone keeps sending
        silence) and then speaks from segment k+1 on, around to segment k: every turn of the
        pass once, in the same order, started from elsewhere. ``begins`` (the ``--mix``
        behaviour each step begins) is rotated with the steps. A position at a segment's
        very start begins there, without silence.
        """
        steps = list(scenario.steps)
        cuts = [j for j in range(len(steps)) if j == 0 or isinstance(steps[j - 1], Wait)]
        spans = [
            sum(self.step_seconds(s) for s in steps[a:b])
            for a, b in zip(cuts, [*cuts[1:], len(steps)], strict=True)
        ]
        total = sum(spans)
        if total <= 0 or not 0 < fraction < 1:
            return scenario, list(begins)
        at = fraction * total
        k, start = 0, 0.0
        while k < len(spans) - 1 and start + spans[k] <= at:
            start += spans[k]
            k += 1
        rest_ms = round((start + spans[k] - at) * 1000)
        first = k if at - start < 1e-9 else (k + 1) % len(cuts)
        if first == k:
            rest_ms = 0
        j = cuts[first]
        order = steps[j:] + steps[:j]
        marks = list(begins[j:]) + list(begins[:j]) if begins else []
        if rest_ms > 0:
            order.insert(0, Silence(index=0, ms=float(rest_ms)))
            marks = [None, *marks] if marks else []
        return dataclasses.replace(scenario, steps=tuple(order)), marks


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


def scenario_for(inputs: list[str]) -> Scenario:
    """The scenario the inputs name (parsed, no audio decoded): the bundled one for none."""
    return load_inputs([Path(p) for p in inputs]) if inputs else bundled_scenario()


def build_script(inputs: list[str], *, rate: int = INPUT_RATE) -> Script:
    """Parse the inputs and preload every clip at ``rate`` (BadInput on any problem)."""
    scenario = scenario_for(inputs)
    if not any(isinstance(s, Say | BargeIn) for s in scenario.steps):
        raise BadInput(f"{scenario.name}: the scenario says nothing (no say or barge_in step)")
    clips: dict[Path, SpokenClip] = {}
    for path in scenario.audio_files:
        if path not in clips:
            clips[path] = spoken_clip(path, rate)
    conversions = tuple(u.clip.conversion for u in clips.values() if u.clip.conversion)
    interrupt_path = manifest.recording_path(BARGE_IN_CLIP)
    if interrupt_path not in clips:
        clips[interrupt_path] = spoken_clip(interrupt_path, rate)
    return Script(scenario, clips, clips[interrupt_path], conversions, interrupt_path)


def plain_steps(scenario: Scenario) -> bool:
    """True when the scenario is only say/wait steps (mix behaviours apply to its turns)."""
    return all(isinstance(s, Say | Wait) for s in scenario.steps)
