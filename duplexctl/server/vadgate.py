"""Server VAD for one session (``turn_detection: {"type": "server_vad", …}``, §6.2).

A thin adapter from the session's normalised ``turn_detection`` object to the shared energy
detector in :mod:`duplexctl.audio.vad`: Silero's probability ``threshold`` becomes a dBFS
level, ``min_speech_duration_ms`` is floored at 32 ms like the real detector, and the
detector runs on the session's 16 kHz input clock, so ``audio_start_ms`` / ``audio_end_ms``
are "ms of audio received" exactly as 0.30.0 reports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from duplexctl.audio.vad import StreamingVad, VadEvent, VadParams, threshold_to_db

RATE = 16000


@dataclass(frozen=True, slots=True)
class VadVerdict:
    """What the detector says about one append."""

    started: VadEvent | None
    stopped: VadEvent | None
    speaking: bool  # speech active after this chunk (an utterance is ongoing)

    @property
    def is_speech(self) -> bool:
        """The chunk counts as speech for overlap and buffering decisions."""
        return self.speaking or self.started is not None or self.stopped is not None


class VadGate:
    """Streaming speech start/stop on the session's 16 kHz input clock."""

    def __init__(self, turn_detection: dict[str, Any]) -> None:
        self.params = VadParams(
            threshold_db=threshold_to_db(float(turn_detection.get("threshold", 0.5))),
            min_speech_ms=max(32, int(turn_detection.get("min_speech_duration_ms", 96))),
            silence_ms=int(turn_detection.get("silence_duration_ms", 500)),
            prefix_padding_ms=int(turn_detection.get("prefix_padding_ms", 300)),
        )
        self._vad = StreamingVad(RATE, self.params)

    @property
    def speaking(self) -> bool:
        return self._vad.speaking

    @property
    def position_ms(self) -> float:
        return self._vad.position_ms

    @property
    def speech_end_ms(self) -> float:
        """End of the last loud frame on the input clock (where speech last ended)."""
        return self._vad.last_loud_end_ms

    def feed(self, samples: np.ndarray) -> VadVerdict:
        started = stopped = None
        for event in self._vad.feed(samples):
            if event.kind == "start":
                started, stopped = event, None
            else:
                stopped = event
        return VadVerdict(started, stopped, self._vad.speaking)

    def reset(self) -> None:
        """Forget the current utterance (after each commit, like the real server)."""
        self._vad.reset()
