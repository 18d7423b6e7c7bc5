"""``--out``'s conversation in Full-Duplex-Bench's own layout, so its scripts score it unchanged.

Full-Duplex-Bench (v1 / v1.5, github.com/DanielLin94144/Full-Duplex-Bench) evaluates one
*sample* per folder: ``{root}/{sample}/input.wav`` (the user), ``output.wav`` (the model, on
the same timeline) and the metadata its task reads: ``pause.json`` (pause handling:
``[{"text": "[PAUSE]", "timestamp": [start_s, end_s]}]``), ``turn_taking.json`` (smooth
turn-taking: ``[{"text": "[TURN-TAKING]", "timestamp": [end_of_user_s, ...]}]``) and
``interrupt.json`` (user interruption: ``[{"context", "interrupt", "timestamp": [onset_s,
end_s]}]``). Its ``get_transcript/asr.py`` then writes ``output.json`` next to each
``output.wav`` and ``evaluation/evaluate.py --task TASK --root_dir ROOT`` scores a task's
folders.

A duplexctl conversation holds many such events, and the benchmark reads everything in a
sample's ``output.wav`` as the model's reaction (pause handling: any speech of 1 s or more is
a takeover). So each event becomes one sample cut out of the conversation: from where the
script's speech before the event starts (the user's turn, or the end of the pause before
it; for an interruption, the speech of the turn the interrupted answer answers), or later
the end of any assistant utterance begun before it (nothing the assistant said earlier is
in the window), to the moment the user speaks again (turn end,
interruption), the end of the speech resumed after it (pause), or the run's end; both
channels at 16 kHz mono, the benchmark's output rate. Folders:
``full_duplex_bench/pause_handling/N``, ``smooth_turn_taking/N``, ``user_interruption/N``
(docs/metrics.md "Full-Duplex-Bench export").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import soundfile as sf

from duplexctl.audio.resample import resample
from duplexctl.behaviour.activity import Segment
from duplexctl.behaviour.figures import ONSET_MATCH_MS, ScriptedEvents

EXPORT_DIR = "full_duplex_bench"
RATE = 16000


def _window_start(user_start: float, event: float, assistant: Sequence[Segment]) -> float:
    """From the user's turn start, after every assistant utterance begun before it (so
    nothing the assistant said earlier is in the sample), never after the event itself."""
    ends = [a.end_ms for a in assistant if a.start_ms < user_start]
    return min(event, max([user_start, *ends]))


def _next_user(user: Sequence[Segment], after: float, default: float) -> float:
    later = [u.start_ms for u in user if u.start_ms > after + ONSET_MATCH_MS]
    return min(later) if later else default


def _speech_start(events: ScriptedEvents, at: float, *, before: bool = False) -> float:
    """Where the scripted speech leading up to ``at`` starts: the latest turn start or
    pause end at (or, ``before``, strictly before) ``at``; ``at`` itself if none. From the
    script, not from voice activity: speech has gaps of its own (between words, between
    sentences) that are no turn's start."""
    starts = [*events.turn_starts, *(p1 for _, p1 in events.pauses)]
    earlier = [t for t in starts if (t < at if before else t <= at)]
    return max(earlier) if earlier else at


def _containing(user: Sequence[Segment], at: float) -> Segment | None:
    """The user segment holding (or ending nearest before) ``at``."""
    before = [u for u in user if u.start_ms <= at + ONSET_MATCH_MS]
    return before[-1] if before else None


def export(
    conversation_wav: Path,
    out_dir: Path,
    user: Sequence[Segment],
    assistant: Sequence[Segment],
    events: ScriptedEvents,
) -> list[Path]:
    """Write one sample folder per scripted event; returns the folders written."""
    data, rate = sf.read(str(conversation_wav), dtype="float32", always_2d=True)
    if data.shape[0] == 0:
        return []
    channels = [resample(np.ascontiguousarray(data[:, c]), rate, RATE) for c in (0, 1)]
    end_ms = 1000.0 * channels[0].size / RATE
    root = out_dir / EXPORT_DIR
    written: list[Path] = []

    def sample(task: str, w0: float, w1: float, meta_name: str, meta: list[dict]) -> None:
        folder = root / task / str(sum(1 for p in written if p.parent.name == task) + 1)
        folder.mkdir(parents=True, exist_ok=True)
        lo, hi = round(w0 * RATE / 1000), round(w1 * RATE / 1000)
        sf.write(str(folder / "input.wav"), channels[0][lo:hi], RATE, subtype="PCM_16")
        sf.write(str(folder / "output.wav"), channels[1][lo:hi], RATE, subtype="PCM_16")
        (folder / meta_name).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        written.append(folder)

    def s(ms: float, w0: float) -> float:
        return round((ms - w0) / 1000.0, 3)

    for p0, p1 in events.pauses:
        w0 = _window_start(_speech_start(events, p0), p0, assistant)
        resumed = _containing(user, p1)  # the window runs to the end of the resumed speech
        w1 = resumed.end_ms if resumed is not None and resumed.end_ms > p1 else p1
        sample(
            "pause_handling",
            w0,
            w1,
            "pause.json",
            [{"text": "[PAUSE]", "timestamp": [s(p0, w0), s(p1, w0)]}],
        )
    for end in events.turn_ends:
        w0 = _window_start(_speech_start(events, end), end, assistant)
        w1 = _next_user(user, end, end_ms)
        meta = [{"text": "[TURN-TAKING]", "timestamp": [s(end, w0), s(w1, w0)]}]
        sample("smooth_turn_taking", w0, w1, "turn_taking.json", meta)
    interrupts = zip(
        events.interruptions, events.interruption_ends, events.interruption_texts, strict=True
    )
    for onset, spoken_end, (context, said) in interrupts:
        # from the speech the interrupted answer answers (its turn, not the interruption's)
        w0 = _window_start(_speech_start(events, onset, before=True), onset, assistant)
        w1 = _next_user(user, spoken_end, end_ms)
        meta = [
            {"context": context, "interrupt": said, "timestamp": [s(onset, w0), s(spoken_end, w0)]}
        ]
        sample("user_interruption", w0, w1, "interrupt.json", meta)
    return written
