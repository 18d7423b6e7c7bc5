"""The simulated model's conversational behaviours, with known ground truth.

``duplexctl serve --behaviour takeover-on-pause=P,stop-latency-ms=M,response-gap-ms=G`` (the
option is repeatable; later keys win) makes the reference model behave like a real one does
badly or well, so that duplexctl's behaviour figures (docs/metrics.md "Conversation
behaviour") are proven against a truth that is known, not guessed:

* ``takeover-on-pause=P``: when the user falls silent inside an utterance for
  ``TAKEOVER_DECIDE_MS`` (not yet the server VAD's silence window), the model takes the turn
  with probability P: the utterance is committed there and answered at once;
* ``stop-latency-ms=M``: after server VAD hears the user start speaking over a reply, the
  model keeps speaking until M ms after the onset of that speech, then the reply is cut;
* ``backchannel-rate=R``: while the user speaks, the model utters short acknowledgements
  ("mm-hm": ``BACKCHANNEL_MS`` of audio, a response marked ``metadata.backchannel``, outside
  the conversation, first audio at once) at random, R per minute of the user's speech (a
  Poisson process over the appends that end in speech);
* ``response-gap-ms=G``: a reply's first audio leaves the server G ms after the end of the
  user's speech (instead of ``ttfa_ms`` after the commit), when the commit came earlier.

Times are placed on the user's clock as the client sends it: an append arrives when the
sender's clock reaches its first sample (duplexctl paces appends at ``t0 + k x chunk``), so
input position ``p`` of an append received at ``t`` that starts at position ``s`` happens at
``t + (p - s)``. The behaviours need server VAD (the turn lane with ``turn_detection``):
without it the server does not know where speech starts and ends.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

VAD_RATE = 16000  # the server VAD's input clock

#: how long a backchannel is (well under the 1 s that tells a backchannel from a turn)
BACKCHANNEL_MS = 400.0

#: silence inside an utterance after which the model decides whether to take over
TAKEOVER_DECIDE_MS = 200.0


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What ``--behaviour`` asked for; the defaults are the model's behaviour without it."""

    takeover_on_pause: float = 0.0
    backchannel_rate: float = 0.0
    stop_latency_ms: float = 0.0
    response_gap_ms: float | None = None

    def with_spec(self, spec: str) -> Behaviour:
        """This behaviour with ``key=value[,key=value…]`` applied; ValueError names the
        problem."""
        values = {
            "takeover-on-pause": self.takeover_on_pause,
            "backchannel-rate": self.backchannel_rate,
            "stop-latency-ms": self.stop_latency_ms,
            "response-gap-ms": self.response_gap_ms,
        }
        for part in spec.split(","):
            key, sep, raw = part.strip().partition("=")
            if key not in values:
                known = ", ".join(values)
                raise ValueError(f"unknown behaviour {key!r} (known: {known})")
            if not sep:
                raise ValueError(f"behaviour {key!r} needs a value: {key}=N")
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"behaviour {key!r}: {raw!r} is not a number") from None
            if not value >= 0 or value == float("inf"):
                raise ValueError(f"behaviour {key!r}: {raw!r} must be a finite number >= 0")
            if key == "takeover-on-pause" and value > 1:
                raise ValueError(f"behaviour {key!r}: {raw!r} is a probability (0..1)")
            values[key] = value
        return Behaviour(
            takeover_on_pause=float(values["takeover-on-pause"] or 0.0),
            backchannel_rate=float(values["backchannel-rate"] or 0.0),
            stop_latency_ms=float(values["stop-latency-ms"] or 0.0),
            response_gap_ms=values["response-gap-ms"],
        )


def parse_behaviours(specs: list[str]) -> Behaviour:
    """Every ``--behaviour`` given, in order."""
    behaviour = Behaviour()
    for spec in specs:
        behaviour = behaviour.with_spec(spec)
    return behaviour


class SessionBehaviour:
    """One session's behaviour state: the clock mapping, the speech end, the takeover draw.

    Each session draws from its own generator (seeded from ``--seed`` and the session id
    when a seed is given), so concurrent sessions are independent trials.
    """

    def __init__(self, behaviour: Behaviour, *, seed: int | None, session_id: str) -> None:
        self.behaviour = behaviour
        self._rng = random.Random(f"{seed}:{session_id}" if seed is not None else None)
        self._position_ms = 0.0  # input fed to the server VAD so far (its clock)
        self._append_at = 0.0  # monotonic time the current append arrived
        self._append_start_ms = 0.0  # its first sample on the input clock
        self.speech_end_at: float | None = None  # monotonic time of the last speech end
        self._decided_end_ms: float | None = None  # the silence already decided upon

    def heard(self, now: float, n_samples: int) -> float:
        """An append of ``n_samples`` (16 kHz, what the server VAD was fed) arrived at
        ``now``; returns the input position at its end."""
        self._append_at = now
        self._append_start_ms = self._position_ms
        self._position_ms += 1000.0 * n_samples / VAD_RATE
        return self._position_ms

    def at(self, position_ms: float) -> float:
        """Monotonic time of input position ``position_ms`` on the sender's clock."""
        return self._append_at + (position_ms - self._append_start_ms) / 1000.0

    def speech_ended(self, position_ms: float) -> None:
        self.speech_end_at = self.at(position_ms)

    def takes_over(self, speech_end_ms: float, position_ms: float) -> bool:
        """Silence since ``speech_end_ms`` reached the decision point: draw once per pause."""
        p = self.behaviour.takeover_on_pause
        if p <= 0 or position_ms - speech_end_ms < TAKEOVER_DECIDE_MS:
            return False
        if self._decided_end_ms == speech_end_ms:
            return False
        self._decided_end_ms = speech_end_ms
        return self._rng.random() < p

    def backchannels(self, speech_ms: float) -> bool:
        """Whether the model backchannels during ``speech_ms`` of the user's speech."""
        rate = self.behaviour.backchannel_rate
        if rate <= 0:
            return False
        return self._rng.random() < 1.0 - math.exp(-rate * speech_ms / 60000.0)

    def first_audio_at(self) -> float | None:
        """When a reply to the speech that just ended must be heard from (``response-gap``)."""
        gap, end = self.behaviour.response_gap_ms, self.speech_end_at
        self.speech_end_at = None  # one reply per speech end: a stale end answers nothing
        if gap is None or end is None:
            return None
        return end + gap / 1000.0

    def cut_at(self, onset_ms: float) -> float | None:
        """When a reply interrupted by speech starting at ``onset_ms`` stops, if later."""
        if self.behaviour.stop_latency_ms <= 0:
            return None
        return self.at(onset_ms) + self.behaviour.stop_latency_ms / 1000.0
