"""What every server event must carry for the client to act on it — the table, as data.

The client validates each server frame against :data:`SERVER_EVENTS` before anything uses it
(issue 16.1): a frame that breaks the table is a recorded violation with the frame as
evidence, never an exception, and the client does not act on it. This is the one place that
says which fields are required; :class:`~duplexctl.protocol.client_state.ClientSession` reads
fields with tolerant accessors only *after* the frame passed.

How the table was decided (docs/protocol.md §2, §4 and the 19 wire transcripts recorded from
vLLM-Omni 0.30.0 in tests/fixtures/wire, where every field listed as required is present in
every frame of its type):

* **required** — what the client needs to act on the event at all: the response id of every
  response event (top-level ``response_id``; ``response.id`` is accepted where G1 or a
  Realtime-shaped server puts it), the payload of a delta, the session object of the
  session events, the resume credentials of ``session.resumed``, the status of
  ``response.done``, an error's code (either error shape, §4.4).
* **typed when present** — fields the client reads but can do without (``format``,
  ``sample_rate_hz``, ``metadata.epoch`` …): absent is fine, the wrong type is a violation.
* everything else (``event_id``, ``output_index``, the items of ``conversation.item.*`` …)
  is not the client's business and is not checked; unknown event types are not checked at
  all (servers add events freely, §4.2 "Catch-all").

Numbers the client computes with are range-checked here too (a sample rate of 0 or an audio
duration of 1e308 are not numbers a server can mean), so arithmetic downstream never sees
them. Names are canonical (GA, :func:`duplexctl.protocol.names.canonical`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from duplexctl.protocol import names

#: Largest sample rate a delta may state (Hz) and longest audio position (ms: ~11 days).
MAX_RATE_HZ: Final = 1_000_000
MAX_MS: Final = 1e9


class Kind(Enum):
    STR = "a string"
    STR_OR_NULL = "a string or null"
    INT = "an integer"
    SEQ = "an integer >= 1"
    RATE = f"an integer sample rate in 1..{MAX_RATE_HZ}"
    MS = f"a number of ms in 0..{MAX_MS:g}"
    NUMBER = "a finite number"
    OBJECT = "an object"
    LIST = "a list"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


_CHECKS: Final = {
    Kind.STR: lambda v: isinstance(v, str),
    Kind.STR_OR_NULL: lambda v: v is None or isinstance(v, str),
    Kind.INT: _is_int,
    Kind.SEQ: lambda v: _is_int(v) and v >= 1,
    Kind.RATE: lambda v: _is_int(v) and 1 <= v <= MAX_RATE_HZ,
    Kind.MS: lambda v: _is_number(v) and 0 <= v <= MAX_MS,
    Kind.NUMBER: _is_number,
    Kind.OBJECT: lambda v: isinstance(v, dict),
    Kind.LIST: lambda v: isinstance(v, list),
}


@dataclass(frozen=True, slots=True)
class Field:
    """One field of an event: ``path`` is dotted into nested objects (``response.status``);
    a required field may be satisfied by ``alt`` instead (another path, same kind)."""

    path: str
    kind: Kind
    required: bool
    alt: str | None = None


def req(path: str, kind: Kind, alt: str | None = None) -> Field:
    return Field(path, kind, True, alt)


def opt(path: str, kind: Kind) -> Field:
    return Field(path, kind, False)


_RID: Final = req("response_id", Kind.STR, alt="response.id")
_DELTA_TEXT: Final = (_RID, req("delta", Kind.STR))
_SESSION: Final = (req("session", Kind.OBJECT), opt("session.id", Kind.STR))

#: Every field every server event (docs/protocol.md §2) may carry.
ENVELOPE: Final = (
    req("type", Kind.STR),
    opt("event_id", Kind.STR),
    opt("server_event_seq", Kind.SEQ),
)

#: Per event type (canonical name), docs/protocol.md §4.1-§4.2.
SERVER_EVENTS: Final[dict[str, tuple[Field, ...]]] = {
    # §4.1 session lifecycle
    "session.created": (
        *_SESSION,
        opt("resume_token", Kind.STR),
        opt("attachment_generation", Kind.INT),
    ),
    "session.updated": _SESSION,
    "session.resumed": (
        *_SESSION,
        req("resume_token", Kind.STR),
        opt("session_id", Kind.STR),
        opt("attachment_generation", Kind.INT),
    ),
    "session.closed": (opt("reason", Kind.STR), opt("event", Kind.OBJECT)),
    "session.expired": (opt("reason", Kind.STR),),
    "session.replaced": (opt("attachment_generation", Kind.INT),),
    "session.resync_required": (req("reason", Kind.STR),),
    "session.heartbeat_ack": (),
    # §4.4 either shape: {"error": {"code": …}} or flat {"error": "…", "code": …}
    "error": (req("error.code", Kind.STR, alt="code"), opt("error.message", Kind.STR)),
    # §4.2 input buffer
    "input_audio_buffer.speech_started": (
        req("audio_start_ms", Kind.MS),
        opt("item_id", Kind.STR),
    ),
    "input_audio_buffer.speech_stopped": (req("audio_end_ms", Kind.MS), opt("item_id", Kind.STR)),
    "input_audio_buffer.committed": (
        req("item_id", Kind.STR),
        opt("previous_item_id", Kind.STR_OR_NULL),
        opt("event", Kind.OBJECT),
        opt("event.epoch", Kind.INT),
    ),
    # §4.2 response envelope
    "response.created": (_RID, opt("response", Kind.OBJECT), opt("response.metadata", Kind.OBJECT)),
    "response.speak": (_RID, opt("metadata", Kind.OBJECT)),
    names.AUDIO_DELTA: (
        _RID,
        req("delta", Kind.STR, alt="audio"),
        opt("item_id", Kind.STR),
        opt("format", Kind.STR),
        opt("sample_rate_hz", Kind.RATE),
        opt("metadata", Kind.OBJECT),
        opt("metadata.epoch", Kind.INT),
        opt("metadata.audio_duration_ms", Kind.MS),
    ),
    names.TRANSCRIPT_DELTA: (*_DELTA_TEXT, opt("metadata", Kind.OBJECT)),
    names.TEXT_DELTA: _DELTA_TEXT,
    "response.done": (_RID, req("response", Kind.OBJECT), req("response.status", Kind.STR)),
    # §13.4 tool calls: the call id is what the client must answer
    "response.function_call_arguments.done": (
        _RID,
        req("call_id", Kind.STR),
        opt("arguments", Kind.STR),
        opt("name", Kind.STR),
        opt("item_id", Kind.STR),
    ),
    # §4.2 Tier-3 turn-taking
    "response.listen": (
        opt("response_id", Kind.STR),
        opt("epoch", Kind.INT),
        opt("response", Kind.OBJECT),
    ),
    "overlap.decision": (
        opt("epoch", Kind.INT),
        opt("action", Kind.STR),
        opt("metadata", Kind.OBJECT),
    ),
    "playback.acknowledged": (
        req("event", Kind.OBJECT),
        opt("event.played_ms", Kind.MS),
        opt("event.committed_ms", Kind.MS),
        opt("event.item_id", Kind.STR),
    ),
}

_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class FrameCheck:
    """How one frame measured against the table.

    ``broken``: a required field is missing or wrong — the client must not act on the frame.
    Otherwise ``clean`` is the frame to act on: the frame itself, or (when an optional field
    had the wrong type or range) a copy without those fields, so nothing downstream ever
    computes with a value the table refused.
    """

    problems: list[str]
    broken: bool
    clean: dict[str, Any]


def _get(frame: dict[str, Any], keys: tuple[str, ...]) -> Any:
    value: Any = frame
    for key in keys:
        if not isinstance(value, dict):
            return _MISSING
        value = value.get(key, _MISSING)
    return value


def _without(frame: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """A copy of ``frame`` without the field at ``keys`` (objects on the path are copied)."""
    out = dict(frame)
    if len(keys) == 1:
        out.pop(keys[0], None)
    else:
        inner = out.get(keys[0])
        if isinstance(inner, dict):
            out[keys[0]] = _without(inner, keys[1:])
    return out


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    shown = text if len(text) <= 40 else text[:37] + "..."
    return f"{type(value).__name__} {shown}"


# (field, its keys, its alt's keys), compiled once: this runs on every received frame
_Rule = tuple[Field, tuple[str, ...], tuple[str, ...] | None]


def _compile(fields: tuple[Field, ...]) -> tuple[_Rule, ...]:
    return tuple(
        (f, tuple(f.path.split(".")), tuple(f.alt.split(".")) if f.alt else None) for f in fields
    )


_ENVELOPE_RULES: Final = _compile(ENVELOPE)
_RULES: Final = {etype: _compile(ENVELOPE + fields) for etype, fields in SERVER_EVENTS.items()}


def check(frame: dict[str, Any]) -> FrameCheck:
    """Measure one decoded server frame against :data:`ENVELOPE` and :data:`SERVER_EVENTS`."""
    etype = frame.get("type")
    rules = _ENVELOPE_RULES
    if isinstance(etype, str):
        rules = _RULES.get(etype) or _RULES.get(names.canonical(etype), _ENVELOPE_RULES)
    problems: list[str] = []
    broken = False
    clean = frame
    for field, keys, alt_keys in rules:
        value = frame.get(keys[0], _MISSING) if len(keys) == 1 else _get(frame, keys)
        path = field.path
        if value is _MISSING and alt_keys is not None:
            value = _get(frame, alt_keys)
            path = field.alt or path
        if value is _MISSING:
            if field.required:
                either = f" (or {field.alt})" if field.alt else ""
                problems.append(f"{field.path}{either} is missing")
                broken = True
            continue
        if _CHECKS[field.kind](value):
            continue
        problems.append(f"{path} is {_describe(value)}, expected {field.kind.value}")
        if field.required:
            broken = True
        else:
            clean = _without(clean, keys)
    return FrameCheck(problems, broken, clean)


def problems(frame: dict[str, Any]) -> list[str]:
    """Every way ``frame`` breaks the table; [] when it follows it."""
    return check(frame).problems
