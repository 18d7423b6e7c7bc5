"""The Full-Duplex-Bench export's windows: each sample starts where the script's speech
before its event starts (a turn's start or the end of the pause before it), not at the
last gap voice activity finds inside that speech — espeak's sentences, like people's, have
silences of 150 ms and more between words that are no turn's start."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from duplexctl.behaviour.activity import Segment as S
from duplexctl.behaviour.fdb import EXPORT_DIR, RATE, export
from duplexctl.behaviour.figures import ScriptedEvents

# the user: speech 300-1200 and 1400-2500 ms (a 200 ms gap inside the sentence), a pause to
# 4000, speech to 5000 (the turn's end); later an interruption at 6500 over the answer
USER = [S(300, 1200), S(1400, 2500), S(4000, 5000), S(6500, 7300)]
ASSISTANT = [S(5500, 6000), S(6200, 6700)]  # the answer (with a gap of its own), cut at 6700
EVENTS = ScriptedEvents(
    pauses=[(2500.0, 4000.0)],
    turn_starts=[300.0, 6500.0],
    turn_ends=[5000.0, 7300.0],
    interruptions=[6500.0],
    interruption_ends=[7300.0],
    interruption_texts=[("the question", "the interruption")],
)


def _conversation(path: Path, length_ms: float = 9000.0) -> Path:
    t = np.arange(int(RATE * length_ms / 1000)) / RATE
    tone = (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    channels = np.zeros((t.size, 2), dtype=np.float32)
    for c, segments in ((0, USER), (1, ASSISTANT)):
        for seg in segments:
            lo, hi = int(seg.start_ms * RATE / 1000), int(seg.end_ms * RATE / 1000)
            channels[lo:hi, c] = tone[lo:hi]
    sf.write(str(path), channels, RATE)
    return path


def _meta(folder: Path, name: str) -> dict:
    (entry,) = json.loads((folder / name).read_text())
    return entry


def test_samples_start_where_the_scripts_speech_before_the_event_starts(tmp_path: Path) -> None:
    export(_conversation(tmp_path / "conversation.wav"), tmp_path, USER, ASSISTANT, EVENTS)
    root = tmp_path / EXPORT_DIR
    # the pause: from the turn's start (300), not the gap at 1200-1400
    pause = _meta(root / "pause_handling" / "1", "pause.json")
    assert pause["timestamp"] == [2.2, 3.7]
    user, rate = sf.read(str(root / "pause_handling" / "1" / "input.wav"))
    assert rate == RATE and abs(user[: int(0.05 * RATE)]).max() > 0.1  # speech from the start
    # the turn's end: from the end of the pause before it (4000)
    first_end = _meta(root / "smooth_turn_taking" / "1", "turn_taking.json")
    assert first_end["timestamp"][0] == 1.0
    # the interruption: from the speech of the turn the interrupted answer answers (4000,
    # after the pause), so input.wav holds the question and output.wav the whole answer
    interrupt = _meta(root / "user_interruption" / "1", "interrupt.json")
    assert interrupt["timestamp"] == [2.5, 3.3]
    assert interrupt["context"] == "the question"
    model, _ = sf.read(str(root / "user_interruption" / "1" / "output.wav"))
    assert abs(model[int(1.5 * RATE) : int(1.55 * RATE)]).max() > 0.1  # the answer's start
