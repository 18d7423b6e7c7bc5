"""Event type names and the two dialects' spellings (docs/protocol.md §0, §10).

G2 (vLLM-Omni 0.30.0 and later) emits only the GA audio names; G1 servers emit only the beta
names. A server emits exactly one spelling; a client must accept both, so the client maps
every incoming name to its G2 spelling with :func:`canonical` before looking at it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Dialect(StrEnum):
    G2 = "g2"
    G1 = "g1"


# Server -> client audio event names: GA (G2) spelling -> beta (G1) spelling.
GA_TO_BETA: Final[dict[str, str]] = {
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
}
BETA_TO_GA: Final[dict[str, str]] = {beta: ga for ga, beta in GA_TO_BETA.items()}

# Client -> server aliases accepted by the G2 translator, mapped to their canonical names.
CLIENT_ALIASES: Final[dict[str, str]] = {
    "input.commit": "input_audio_buffer.commit",
    "audio.playback_ack": "playback.ack",
    "signal_turn": "turn.signal",
    "close": "session.close",
    "close_session": "session.close",
    "input_text.append": "input.text.append",
    "push_text": "input.text.append",
}

# Client event types the reference server understands (after alias mapping).
CLIENT_EVENT_TYPES: Final[frozenset[str]] = frozenset(
    {
        "session.update",
        "session.resume",
        "session.heartbeat",
        "session.event_ack",
        "session.close",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "input.cancel",
        "input.text.append",
        "conversation.item.create",
        "conversation.item.retrieve",
        "conversation.item.delete",
        "conversation.item.truncate",
        "response.create",
        "response.cancel",
        "output_audio_buffer.clear",
        "barge_in",
        "turn.signal",
        "playback.ack",
    }
)

AUDIO_DELTA: Final = "response.output_audio.delta"
AUDIO_DONE: Final = "response.output_audio.done"
TRANSCRIPT_DELTA: Final = "response.output_audio_transcript.delta"
TRANSCRIPT_DONE: Final = "response.output_audio_transcript.done"
TEXT_DELTA: Final = "response.output_text.delta"

# Error codes that mean "the server is full" (docs/metrics.md: admission = rejected_capacity).
CAPACITY_CODES: Final[frozenset[str]] = frozenset(
    {"resource_exhausted", "duplex_session_busy", "rate_limit_error"}
)

# Resume answers after which retrying cannot help (what DuplexClient treats as fatal).
FATAL_RESUME_CODES: Final[frozenset[str]] = frozenset(
    {
        "invalid_session_resume",
        "session_resume_expired",
        "unsupported_session_resume",
        "invalid_resume_token",
        "session_resume_conflict",
    }
)


def canonical(event_type: str) -> str:
    """The G2 spelling of a server event name (beta audio names become GA)."""
    return BETA_TO_GA.get(event_type, event_type)


def spell(event_type: str, dialect: Dialect) -> str:
    """The spelling a server of ``dialect`` uses for a G2 event name."""
    if dialect is Dialect.G1:
        return GA_TO_BETA.get(event_type, event_type)
    return event_type


def canonical_client(event_type: str) -> str:
    """The canonical name of a client event (aliases resolved)."""
    return CLIENT_ALIASES.get(event_type, event_type)
