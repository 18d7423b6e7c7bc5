"""Scenario data model: what a scripted conversation says, independent of how it is run.

A :class:`Scenario` is settings plus an ordered list of steps. Steps are small frozen
dataclasses, one per action, so the runner can ``match`` on them and the parser is the only
place that knows the file syntax. Every step keeps its 1-based ``index`` so an expectation
failure or a runtime problem can name the step the user wrote.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, cast

from duplexctl.audio.pacer import Pace
from duplexctl.protocol.settings import TurnEnd
from duplexctl.resolver import Settings  # the scenario's layer of the run settings

__all__ = ["Pace", "TurnEnd"]  # re-exported: one of each for every layer above


class Anchor(StrEnum):
    """What ``after_ms`` of a timed interruption counts from."""

    FIRST_AUDIO = "first_audio"  # recv of the first audio delta of the active response
    START = "start"  # the moment the step begins (the previous step ended)


class Interrupt(StrEnum):
    """How a scripted barge-in reaches the server."""

    SPEECH = "speech"  # just speak; the server's VAD/overlap policy must notice
    BARGE_IN = "barge_in"  # also send the barge_in event at speech onset
    CANCEL = "cancel"  # also send response.cancel at speech onset


OUTCOMES: Final = frozenset({"spoke", "listened", "no_response", "cancelled", "failed"})

_OPS: Final = ("<=", ">=", "==", "!=", "<", ">")
_NUM_RE: Final = re.compile(r"^\s*(<=|>=|==|!=|<|>)?\s*(-?\d+(?:\.\d+)?)\s*$")
_RANGE_RE: Final = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*\.\.\s*(-?\d+(?:\.\d+)?)\s*$")


@dataclass(frozen=True, slots=True)
class Expectation:
    """One bound on one figure of a turn: ``ttfa_ms = "<500"``, ``outcome = "spoke"``.

    Numeric forms: a bare number (equality), ``"<N"``, ``"<=N"``, ``">N"``, ``">=N"``,
    ``"==N"``, ``"!=N"``, or a closed range ``"A..B"``. Text forms: a string (equality) or a
    list of strings (any of). ``source`` keeps what the user wrote, for the failure message.
    """

    name: str
    op: str  # one of _OPS, "in" (list of strings) or "range"
    value: float | str | tuple[str, ...] | tuple[float, float]
    source: str

    def holds(self, actual: Any) -> bool:
        """Whether ``actual`` satisfies the bound; a missing figure never does."""
        if actual is None:
            return False
        if isinstance(actual, bool):
            actual = "true" if actual else "false"
        # the op decides the value's type where an Expectation is built: "in" holds the
        # strings parse._expectation checked, "range" the (lo, hi) floats and the comparisons
        # the float that parse_number read (_RANGE_RE, _NUM_RE)
        if self.op == "in":
            return str(actual) in cast(tuple[str, ...], self.value)
        if self.op == "range":
            lo, hi = cast(tuple[float, float], self.value)
            return _is_number(actual) and lo <= float(actual) <= hi
        if isinstance(self.value, str):
            equal = str(actual) == self.value
            return equal if self.op == "==" else not equal
        if not _is_number(actual):
            return False
        a, b = float(actual), float(cast(float, self.value))
        return {
            "<": a < b,
            "<=": a <= b,
            ">": a > b,
            ">=": a >= b,
            "==": math.isclose(a, b, abs_tol=1e-9),
            "!=": not math.isclose(a, b, abs_tol=1e-9),
        }[self.op]

    @staticmethod
    def parse_number(name: str, raw: Any) -> Expectation | None:
        """A numeric expectation from a TOML value, or None when ``raw`` is not numeric."""
        if isinstance(raw, bool):
            return None
        if isinstance(raw, int | float):
            return Expectation(name, "==", float(raw), str(raw))
        if not isinstance(raw, str):
            return None
        if m := _RANGE_RE.match(raw):
            lo, hi = float(m.group(1)), float(m.group(2))
            return Expectation(name, "range", (min(lo, hi), max(lo, hi)), raw)
        if m := _NUM_RE.match(raw):
            return Expectation(name, m.group(1) or "==", float(m.group(2)), raw)
        return None


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True, slots=True)
class Say:
    """Speak a file as the next user turn; silence keeps flowing after it.

    ``commit`` None = decided by the turn-ending mode (commit lane: commit ``tail_ms`` after
    the end of speech). Does not wait for the answer: follow it with ``wait`` (or a timed
    interruption of the answer).
    """

    index: int
    file: Path
    commit: bool | None = None
    tail_ms: float = 200.0
    expect: tuple[Expectation, ...] = ()


@dataclass(frozen=True, slots=True)
class Silence:
    """Let ``ms`` of silence (or of whatever is still being spoken) flow, then go on."""

    index: int
    ms: float
    expect: tuple[Expectation, ...] = ()


@dataclass(frozen=True, slots=True)
class Pause:
    """Fall silent for ``ms`` inside the current user turn, then go on with ``file``'s speech.

    The silence runs from the end of the previous step's speech to the start of ``file``'s
    (the files' own leading and trailing silence are left out), the client does not commit
    in between, and under server VAD ``ms`` must be shorter than the silence window (checked
    before the run). Each pause is one trial of the takeover figure (docs/metrics.md
    "Conversation behaviour").
    """

    index: int
    ms: float
    file: Path
    expect: tuple[Expectation, ...] = ()


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for the latest turn's answer to finish (``response.done``, and its playback).

    ``timeout_s`` None = the run's response timeout. A timeout makes the outcome
    ``no_response`` and the run goes on.
    """

    index: int
    timeout_s: float | None = None
    expect: tuple[Expectation, ...] = ()


@dataclass(frozen=True, slots=True)
class BargeIn:
    """Speak ``file`` over the assistant, ``after_ms`` after ``anchor``; a new user turn.

    ``interrupt`` None = decided at run time: ``speech`` with server VAD, else ``barge_in``
    when the server advertises ``supports_barge_in``, else ``cancel``. The step's
    expectations apply to the *interrupted* turn.
    """

    index: int
    file: Path
    after_ms: float = 500.0
    anchor: Anchor = Anchor.FIRST_AUDIO
    interrupt: Interrupt | None = None
    commit: bool | None = None
    tail_ms: float = 200.0
    expect: tuple[Expectation, ...] = ()


@dataclass(frozen=True, slots=True)
class Cancel:
    """Send ``response.cancel`` for the active answer ``after_ms`` after ``anchor``."""

    index: int
    after_ms: float = 500.0
    anchor: Anchor = Anchor.FIRST_AUDIO
    expect: tuple[Expectation, ...] = ()


@dataclass(frozen=True, slots=True)
class Drop:
    """Kill the socket ``after_ms`` after ``anchor``; ``session.resume`` ``resume_after_ms`` later."""

    index: int
    after_ms: float = 500.0
    anchor: Anchor = Anchor.FIRST_AUDIO
    resume_after_ms: float = 500.0
    expect: tuple[Expectation, ...] = ()


@dataclass(frozen=True, slots=True)
class Commit:
    """Send ``input_audio_buffer.commit`` now (``response_create`` as given)."""

    index: int
    response_create: bool = True
    expect: tuple[Expectation, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """Answer the model's next tool call (docs/protocol.md §13.4): wait up to ``timeout_s``
    (None = the response timeout) for a call of ``name`` (None = any tool) in the latest
    turn, then ``latency_ms`` later send its ``function_call_output``: ``output``, or the
    ``--tool-outputs`` entry of the tool called when None. The step's expectations apply to
    that turn (``tool_call_ms``, ``tool_answer_text_ms``, ``tool_answer_audio_ms``,
    ``task_ms`` …)."""

    index: int
    output: str | None = None
    name: str | None = None
    latency_ms: float | None = None
    timeout_s: float | None = None
    expect: tuple[Expectation, ...] = ()


Step = Say | Silence | Pause | Wait | BargeIn | Cancel | Drop | Commit | ToolOutput

ACTIONS: Final[dict[str, type]] = {
    "say": Say,
    "silence": Silence,
    "pause": Pause,
    "wait": Wait,
    "barge_in": BargeIn,
    "cancel": Cancel,
    "drop": Drop,
    "commit": Commit,
    "tool_output": ToolOutput,
}


@dataclass(frozen=True, slots=True)
class Scenario:
    """A scripted conversation: where it came from, its settings, its steps."""

    name: str
    steps: tuple[Step, ...]
    settings: Settings = field(default_factory=Settings)
    source: Path | None = None
    description: str = ""
    # run-wide bounds (top-level ``[expect]``): drops, resumes, … (report/turns.py RUN_ORIGINS)
    expect: tuple[Expectation, ...] = ()
    # the model behaviour the expectations need, as ``serve --behaviour`` spells it (the
    # reference model's default lacks it: ``--server-behaviour`` turns it on), "" = none
    needs_behaviour: str = ""

    @property
    def audio_files(self) -> list[Path]:
        """Every audio file the steps speak, in order (loaded before the run starts)."""
        return [s.file for s in self.steps if isinstance(s, Say | BargeIn | Pause)]
