"""The local barge-in detector: the user started speaking over the assistant.

Why local: a server's VAD needs the audio first (one append period on the wire) and then
its own decision time (vLLM-Omni's Silero barge-in fired ~0.9 s after the interruption
began, docs/protocol.md §6.3). A listener expects the assistant to stop within a breath, so
``talk`` decides on the client — the same energy detector as ``audio/vad.py``, tuned for a
short onset (32 ms of loud audio instead of 96: with echo cancellation the stop after user
speech measured 105-124 ms with it, 120-160 with 48 ms) — and flushes the speaker itself; the
server is then told what was heard and asked to cancel (or, with ``--barge-in server``,
left to cancel by its own VAD).

The detector sees *all* input, armed or not, so its clock stays the user timeline and an
utterance already in progress when the assistant starts is not a new onset. It only
*reports* an onset while armed (assistant audio audible or queued).

It decides on the cancelled microphone when echo cancellation runs (``--aec on``,
``talk/echo.py``), so the assistant's own voice through a speaker is not an onset; without
it (``--aec off``, or the ``aec`` extra missing) a loud speaker next to the microphone is
heard as speech: use headphones, or raise ``--barge-threshold-db``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from duplexctl.audio.vad import StreamingVad, VadParams
from duplexctl.talk.inputs import InputBlock

BARGE_PARAMS = VadParams(
    threshold_db=-40.0, hysteresis_db=6.0, min_speech_ms=32, silence_ms=300, prefix_padding_ms=0
)


@dataclass(frozen=True, slots=True)
class Onset:
    """Interrupting speech: its first loud sample at ``u_ms`` on the user timeline, captured
    at ``t_onset``; detected at ``t_detected`` (monotonic seconds)."""

    u_ms: float
    t_onset: float
    t_detected: float


class BargeInDetector:
    def __init__(self, rate: int, threshold_db: float = BARGE_PARAMS.threshold_db) -> None:
        params = VadParams(
            threshold_db=threshold_db,
            hysteresis_db=BARGE_PARAMS.hysteresis_db,
            min_speech_ms=BARGE_PARAMS.min_speech_ms,
            silence_ms=BARGE_PARAMS.silence_ms,
            prefix_padding_ms=0,
        )
        self.rate = rate
        self.vad = StreamingVad(rate, params)
        self._recent: deque[InputBlock] = deque(maxlen=32)  # to date an onset a few blocks back

    def feed(self, block: InputBlock, *, armed: bool, now: float) -> Onset | None:
        """Feed one input block; an :class:`Onset` when speech starts while ``armed``."""
        self._recent.append(block)
        onset: Onset | None = None
        for event in self.vad.feed(block.samples):
            if event.kind == "start" and armed:
                onset = Onset(event.onset_ms, self._time_of(event.onset_ms), now)
        return onset

    def _time_of(self, u_ms: float) -> float:
        for block in reversed(self._recent):
            if block.start_ms <= u_ms:
                return block.time_of(u_ms, self.rate)
        return self._recent[0].time_of(u_ms, self.rate)

    @property
    def speaking(self) -> bool:
        return self.vad.speaking
