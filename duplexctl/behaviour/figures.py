"""The turn-taking figures of one conversation, from voice activity on both channels.

Definitions and origins: docs/metrics.md "Conversation behaviour". Inputs are the segments
of voice activity of each channel (``timeline.py``) plus what the scenario says happened
where (pauses inside a user turn, the onsets of interruptions, the real ends of turns), all
in ms on the timeline's origin. Everything else is read off the audio.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import soundfile as sf

from duplexctl.behaviour.activity import Segment, voice_activity

#: assistant speech longer than this during a pause takes the turn (Full-Duplex-Bench v1's
#: ``turn_duration_threshold``, applied to voice activity instead of transcribed words)
TAKEOVER_MS: Final = 1000.0
#: assistant utterances shorter than this, started while the user speaks, are backchannels
BACKCHANNEL_MS: Final = 1000.0
#: how far a detected onset may be from the scripted one and still be the same speech
ONSET_MATCH_MS: Final = 150.0
#: how far after a rough turn end (an append's send) the real end of speech may lie
SNAP_MS: Final = 250.0
#: A turn end unanswered when the conversation ended less than this after it is no trial
#: (cut off, counted apart): a load session the run stopped 200 ms after the user finished
#: was not left unanswered by the server. Longer than any answer a working server takes to
#: begin, so a server that never answers still shows in every conversation that goes on.
NO_RESPONSE_WAIT_MS: Final = 5000.0

ORIGINS: Final[dict[str, str]] = {
    "takeover": "any pause trial in which the assistant spoke for more than 1 s (true/false)",
    "takeover_rate": "pause trials with assistant speech longer than 1 s starting inside the "
    "pause / pause trials (n = pause_trials)",
    "response_gap_ms": "assistant speech start - user speech end, at a real turn end (signed: "
    "negative when the assistant started before the user finished); replay: the longest",
    "no_response_rate": "real turn ends followed by no assistant speech before the user "
    "speaks again or the conversation ends / real turn ends (a turn end the conversation "
    "ended less than 5 s after, unanswered, is no trial: cut_off_turn_ends)",
    "stop_latency_ms": "end of assistant speech - onset of the user's speech over it, as "
    "heard; replay: the longest",
    "backchannels": "assistant utterances shorter than 1 s started while the user speaks",
    "backchannels_per_min": "backchannels / minutes of user speech",
    "overlap_ms": "time both channels carry voice",
    "mutual_silence_ms": "time neither carries voice, between the first and the last voice",
}


#: figures that are true or false (``takeover = false`` in a scenario's ``[expect]``)
BOOLEAN_FIGURES: Final = frozenset({"takeover"})


@dataclass(frozen=True, slots=True)
class ScriptedEvents:
    """What the script placed on the timeline (ms): pauses inside turns, the real ends of
    turns, the scripted onsets of interruptions (and what was said before and over them)."""

    pauses: Sequence[tuple[float, float]] = ()
    turn_starts: Sequence[float] = ()  # where each turn's first speech starts
    turn_ends: Sequence[float] = ()
    interruptions: Sequence[float] = ()
    interruption_ends: Sequence[float] = ()  # where the interrupting speech ends
    interruption_texts: Sequence[tuple[str, str]] = ()
    end_ms: float = math.inf  # where the conversation ended (its timeline's length)


@dataclass(slots=True)
class Figures:
    """One conversation's figures; lists keep every trial (the maxima are in ``summary``)."""

    pause_trials: int = 0
    takeovers: int = 0
    response_gaps_ms: list[float] = field(default_factory=list)
    turn_ends: int = 0
    no_response: int = 0
    cut_off_turn_ends: int = 0  # unanswered, but the conversation ended too soon to tell
    stop_latencies_ms: list[float] = field(default_factory=list)
    interrupt_overlap_ms: list[float] = field(default_factory=list)
    backchannels: int = 0
    user_speech_ms: float = 0.0
    overlap_ms: float = 0.0
    mutual_silence_ms: float = 0.0

    def summary(self) -> dict[str, Any]:
        """The run-level figures a scenario's ``[expect]`` can bound (absent: no trial)."""
        out: dict[str, Any] = {
            "pause_trials": self.pause_trials,
            "turn_ends": self.turn_ends,
            "interruptions": len(self.stop_latencies_ms),
            "backchannels": self.backchannels,
            "user_speech_ms": round(self.user_speech_ms, 1),
            "overlap_ms": round(self.overlap_ms, 1),
            "mutual_silence_ms": round(self.mutual_silence_ms, 1),
        }
        if self.pause_trials:
            out["takeover"] = self.takeovers > 0
            out["takeover_rate"] = self.takeovers / self.pause_trials
        if self.turn_ends:
            out["no_response_rate"] = self.no_response / self.turn_ends
        if self.response_gaps_ms:
            out["response_gap_ms"] = round(max(self.response_gaps_ms), 1)
        if self.stop_latencies_ms:
            out["stop_latency_ms"] = round(max(self.stop_latencies_ms), 1)
        if self.user_speech_ms > 0:
            out["backchannels_per_min"] = round(
                self.backchannels / (self.user_speech_ms / 60000.0), 3
            )
        return out

    def counts(self) -> dict[str, int]:
        """What ``load`` adds up across sessions (``behaviour.`` + name), rates with their n."""
        return {
            "behaviour.pause_trials": self.pause_trials,
            "behaviour.takeovers": self.takeovers,
            "behaviour.turn_ends": self.turn_ends,
            "behaviour.unanswered_turn_ends": self.no_response,
            "behaviour.cut_off_turn_ends": self.cut_off_turn_ends,
            "behaviour.interruptions": len(self.stop_latencies_ms),
            "behaviour.backchannels": self.backchannels,
            "behaviour.user_speech_ms": round(self.user_speech_ms),
            "behaviour.overlap_ms": round(self.overlap_ms),
            "behaviour.mutual_silence_ms": round(self.mutual_silence_ms),
        }

    def trials(self) -> dict[str, Any]:
        """Every trial of this conversation, one ``behaviour.jsonl`` line's worth: the times
        under their figures' names (what ``report --compare`` bootstraps) and the counts each
        rate is taken over (a rate's trials are its count of 1s among its n)."""
        return {
            "stop_latency_ms": [round(s, 1) for s in self.stop_latencies_ms],
            "response_gap_ms": [round(g, 1) for g in self.response_gaps_ms],
            "interrupt_overlap_ms": [round(s, 1) for s in self.interrupt_overlap_ms],
            **{k.removeprefix("behaviour."): v for k, v in self.counts().items()},
        }

    def to_json(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "trials": {
                "takeovers": self.takeovers,
                "response_gaps_ms": [round(g, 1) for g in self.response_gaps_ms],
                "no_response": self.no_response,
                "cut_off_turn_ends": self.cut_off_turn_ends,
                "stop_latencies_ms": [round(s, 1) for s in self.stop_latencies_ms],
                "interrupt_overlap_ms": [round(s, 1) for s in self.interrupt_overlap_ms],
            },
            "measurement_origins": ORIGINS,
        }


def _overlap(a: Sequence[Segment], b: Sequence[Segment]) -> float:
    total, j = 0.0, 0
    for seg in a:
        while j < len(b) and b[j].end_ms <= seg.start_ms:
            j += 1
        k = j
        while k < len(b) and b[k].start_ms < seg.end_ms:
            total += min(seg.end_ms, b[k].end_ms) - max(seg.start_ms, b[k].start_ms)
            k += 1
    return total


def _union(a: Sequence[Segment], b: Sequence[Segment]) -> list[Segment]:
    out: list[Segment] = []
    for seg in sorted([*a, *b], key=lambda s: s.start_ms):
        if out and seg.start_ms <= out[-1].end_ms:
            out[-1] = Segment(out[-1].start_ms, max(out[-1].end_ms, seg.end_ms))
        else:
            out.append(seg)
    return out


def _onset(user: Sequence[Segment], scripted_ms: float) -> float:
    """The detected onset of the user speech the script started at ``scripted_ms``."""
    near = [s.start_ms for s in user if abs(s.start_ms - scripted_ms) <= ONSET_MATCH_MS]
    return min(near, key=lambda t: abs(t - scripted_ms)) if near else scripted_ms


def conversation_figures(
    user: Sequence[Segment],
    assistant: Sequence[Segment],
    events: ScriptedEvents,
) -> Figures:
    """The figures (docs/metrics.md "Conversation behaviour") of one conversation."""
    f = Figures()
    for p0, p1 in events.pauses:
        f.pause_trials += 1
        if any(p0 <= a.start_ms <= p1 and a.duration_ms > TAKEOVER_MS for a in assistant):
            f.takeovers += 1
    for end in events.turn_ends:
        later_user = [u.start_ms for u in user if u.start_ms > end + ONSET_MATCH_MS]
        horizon = min(later_user) if later_user else math.inf
        starts = [a.start_ms for a in assistant if a.end_ms > end and a.start_ms < horizon]
        if not starts and not later_user and events.end_ms - end < NO_RESPONSE_WAIT_MS:
            f.cut_off_turn_ends += 1  # no trial: the conversation ended before an answer
            continue
        f.turn_ends += 1
        if not starts:
            f.no_response += 1
            continue
        f.response_gaps_ms.append(min(starts) - end)
    for scripted in events.interruptions:
        onset = _onset(user, scripted)
        playing = [a for a in assistant if a.start_ms <= onset < a.end_ms]
        if not playing:
            continue
        stop = playing[0].end_ms
        f.stop_latencies_ms.append(stop - onset)
        f.interrupt_overlap_ms.append(_overlap([Segment(onset, stop)], user))
    for a in assistant:
        if a.duration_ms < BACKCHANNEL_MS and any(
            u.start_ms <= a.start_ms < u.end_ms for u in user
        ):
            f.backchannels += 1
    f.user_speech_ms = sum(u.duration_ms for u in user)
    f.overlap_ms = _overlap(user, assistant)
    voice = _union(user, assistant)
    if voice:
        span = voice[-1].end_ms - voice[0].start_ms
        f.mutual_silence_ms = span - sum(s.duration_ms for s in voice)
    return f


def summary_line(behaviour: dict[str, Any]) -> str:
    """One line of a report's ``behaviour`` section, the figures that have trials."""
    bits = ["behaviour:"]
    if behaviour.get("pause_trials"):
        bits.append(
            f"takeover {behaviour['trials']['takeovers']}/{behaviour['pause_trials']} pauses"
        )
    if "response_gap_ms" in behaviour:
        bits.append(f"response_gap_ms max {behaviour['response_gap_ms']:g}")
    if behaviour.get("turn_ends"):
        unanswered = behaviour["trials"]["no_response"]
        bits.append(f"unanswered turn ends {unanswered}/{behaviour['turn_ends']}")
    if "stop_latency_ms" in behaviour:
        bits.append(f"stop_latency_ms max {behaviour['stop_latency_ms']:g}")
    per_min = behaviour.get("backchannels_per_min")
    backchannels = f"backchannels {behaviour.get('backchannels', 0)}"
    bits.append(backchannels + (f" ({per_min:g}/min)" if per_min is not None else ""))
    bits.append(f"overlap_ms {behaviour.get('overlap_ms', 0):g}")
    bits.append(f"mutual_silence_ms {behaviour.get('mutual_silence_ms', 0):g}")
    return " ".join(bits[:1]) + " " + ", ".join(bits[1:])


def recorded_figures(conversation_wav: Path, approximate_turn_ends: Sequence[float]) -> Figures:
    """The figures of a recorded conversation (``talk --record``'s ``conversation.wav``:
    user left, assistant right, ms from its start) whose turn ends are known only roughly
    (the send of the append that carried each, up to one append early): each is taken as
    the end of the user's detected speech nearest after it, within ``SNAP_MS``."""
    data, rate = sf.read(str(conversation_wav), dtype="float32", always_2d=True)
    if data.shape[0] == 0 or data.shape[1] < 2:
        return Figures()
    user = voice_activity(np.ascontiguousarray(data[:, 0]), int(rate))
    assistant = voice_activity(np.ascontiguousarray(data[:, 1]), int(rate))
    ends = []
    for rough in approximate_turn_ends:
        near = [u.end_ms for u in user if rough - ONSET_MATCH_MS <= u.end_ms <= rough + SNAP_MS]
        ends.append(min(near, key=lambda e: abs(e - rough)) if near else rough)
    length_ms = 1000.0 * data.shape[0] / rate
    return conversation_figures(user, assistant, ScriptedEvents(turn_ends=ends, end_ms=length_ms))
