"""Hypothesis strategies for what a broken or hostile client sends, field by field.

Shared by the engine suite (tests/test_engine_fuzz.py) and the wire suite
(tests/test_server_fuzz_wire.py). Every client event type of docs/protocol.md §3 gets its
documented fields, each drawn from values that are right, of the wrong type, or at the edges
that broke the server before (a session rate of 0, -16000 or 2**63, a clock hint of 2**64,
positions of 1e300, deep nesting, thousands of frames): random values alone almost never hit
those, a catalogue of edges does at once.

Values are what orjson can hand the server after decoding a frame: ints in
[-2**63, 2**64 - 1], finite floats, strings, lists, objects, at most 32 levels deep (the
transport answers anything else before the engine sees it).

Response and item ids are placeholders ("$response", "$item", "$assistant_item") that
:func:`resolve` turns into the ids the session actually handed out, so acks, cancels and
truncations can reach real responses.
"""

from __future__ import annotations

import base64
import contextlib
import faulthandler
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from duplexctl.protocol.names import CLIENT_EVENT_TYPES

# Every code the reference server may answer to a client (docs/protocol.md §4.5). Never
# internal_error or realtime_input_failed: those mean the server broke on the input.
DOCUMENTED = frozenset(
    {
        "bad_event", "bad_audio", "unknown_event", "unsupported_audio_format",
        "unsupported_turn_detection", "missing_item_id", "item_not_found",
        "input_audio_buffer_empty", "input_backpressure", "response_already_active",
        "response_not_active", "response_create_without_input", "text_only_turn_unsupported",
        "unsupported_native_response_options", "native_text_append_unsupported",
        "playback_item_mismatch", "playback_item_not_found", "playback_ack_too_late",
        "model_update_unsupported", "voice_update_after_audio_unsupported",
        "ref_audio_update_unsupported", "instructions_update_unsupported",
        "invalid_duplex_runtime_config", "invalid_video_frames", "invalid_image",
        "invalid_function_call_output", "barge_in_unsupported", "runtime_append_failed",
        "session_closed",
    }
)  # fmt: skip
TRANSPORT_CODES = frozenset(
    {
        "invalid_json", "event_too_large", "unknown_event", "unsupported_session_resume",
        "invalid_event_ack", "unsupported", "invalid_session_config", "invalid_session_resume",
        "session_resume_expired", "invalid_resume_token", "session_resume_conflict",
        "config_timeout",
    }
)  # fmt: skip


@contextlib.contextmanager
def exit_if_hung(config: pytest.Config, seconds: float) -> Iterator[None]:
    """End the test process if the block runs longer than ``seconds``.

    A server pinned inside C code (soxr, on main, for a session rate of 2**63) holds the GIL,
    so no timeout written in Python can fire. faulthandler's watchdog is a C thread: it prints
    every stack (to the terminal, through the descriptor pytest keeps for faulthandler) and
    exits, so such a test fails instead of hanging the suite.
    """
    from _pytest.faulthandler import fault_handler_stderr_fd_key

    fd = config.stash.get(fault_handler_stderr_fd_key, None)
    faulthandler.dump_traceback_later(seconds, exit=True, file=fd if fd is not None else sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@contextlib.contextmanager
def logged_errors() -> Iterator[list[str]]:
    """Collect what duplexctl logs at ERROR or above while the block runs (an engine that
    broke on a client's input logs a traceback there)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(logging.ERROR)
    logger = logging.getLogger("duplexctl")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def fuzz_examples(default: int) -> int:
    """Examples per property: ``default`` in CI; ``DUPLEXCTL_FUZZ_EXAMPLES=N`` for long runs."""
    return int(os.environ.get("DUPLEXCTL_FUZZ_EXAMPLES", default))


def pcm16_b64(ms: int, level: float) -> str:
    n = 16 * ms
    t = np.arange(n) / 16000
    return base64.b64encode((level * np.sin(2 * np.pi * 300 * t) * 32767).astype("<i2")).decode()


SPEECH = pcm16_b64(100, 0.3)
SILENCE = pcm16_b64(100, 0.0)
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(60)).decode()

# --- values ------------------------------------------------------------------------------

EDGES = [
    0, 0.0, -1, 1, 0.5, -16000, 4000, 7999, 8000, 16000, 16000.5, 24000, 44100, 192000,
    192001, 2**31, 2**53, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), 1e300, -1e300,
    float(2**64), 5e-324,
]  # fmt: skip
numbers = st.one_of(
    st.sampled_from(EDGES),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    numbers,
    st.text(max_size=12),
    st.sampled_from(["pcm16", "mp3", "g711_ulaw", "server_vad", "AQID", "@@", "none", "user"]),
)
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def either(*good: Any) -> st.SearchStrategy[Any]:
    """A documented value half the time, anything (edges included) otherwise."""
    return st.one_of(st.sampled_from(list(good)), numbers, junk)


rates = either(16000, 24000, 8000, 48000)
millis = either(0, 100, 1000)
flags = either(True, False)
audio = either(SPEECH, SPEECH, SILENCE, "", "@@not base64@@", "AQID", JPEG)
formats = st.one_of(
    either("pcm16", "g711_ulaw", "g711_alaw", "pcm_f32le", "mp3", "wav"),
    st.fixed_dictionaries({"type": either("audio/pcm", "audio/pcmu"), "rate": rates}),
)
response_ids = either("$response", "$response", "resp-nope")
item_ids = either("$item", "$assistant_item", "item_nope", "")


def fields(**strategies: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object carrying up to three of the given fields: one rejected field masks the
    others, so few at a time lets each one's edges reach the code that uses it."""
    names = sorted(strategies)
    return st.lists(st.sampled_from(names), max_size=3, unique=True).flatmap(
        lambda chosen: st.fixed_dictionaries({name: strategies[name] for name in chosen})
    )


turn_detection = st.one_of(
    st.none(),
    junk,
    fields(
        type=either("server_vad", "semantic_vad"),
        threshold=either(0.5, 0.2, 1.0),
        prefix_padding_ms=millis,
        silence_duration_ms=either(200, 500),
        min_speech_duration_ms=millis,
        create_response=flags,
        interrupt_response=flags,
        eagerness=junk,
    ),
)
audio_object = fields(
    input=fields(
        format=formats, sample_rate_hz=rates, sample_rate=rates, turn_detection=turn_detection
    ),
    output=fields(format=formats, sample_rate_hz=rates, voice=junk),
)
session_patch = fields(
    model=either("fake/Qwen3-Omni-duplex-peer", "other"),
    modalities=either(["audio", "text"], ["audio"], ["video"]),
    output_modalities=either(["audio"], ["text"]),
    instructions=either("Be brief.", "x" * 300),
    voice=either("alloy", None),
    input_audio_format=formats,
    output_audio_format=formats,
    response_format=formats,
    sample_rate_hz=rates,
    sample_rate=rates,
    audio=st.one_of(audio_object, junk),
    turn_detection=turn_detection,
    overlap_policy=either("listen_only", "barge_in_on_speech"),
    overlap_short_ack_ms=millis,
    overlap_barge_in_ms=millis,
    overlap_silence_rms=either(0.003, 0.5),
    playback_commit_policy=either("ack_only", "commit_all_on_done"),
    temperature=numbers,
    speed=numbers,
    max_response_output_tokens=either("inf", 100),
    idle_timeout_s=either(30, 0, -1),
    ref_audio=either("data:audio/wav;base64,UklGRg==", None),
    extra_body=st.one_of(fields(auto_response=flags, overlap_policy=junk), junk),
    unknown_key=junk,
)

# --- events ------------------------------------------------------------------------------

content_part = st.one_of(
    fields(type=either("input_text", "text"), text=either("hello", "")),
    fields(
        type=st.just("input_audio"),
        audio=audio,
        data=audio,
        format=formats,
        sample_rate_hz=rates,
    ),
    fields(type=st.just("input_image"), image_url=either(f"data:image/jpeg;base64,{JPEG}")),
    fields(
        type=st.just("output_audio"),
        audio_duration_ms=millis,
        transcript=either("an answer", ""),
    ),
    junk,
)
item = fields(
    id=either("item_client_1", "item_client_2", ""),
    type=either("message", "function_call_output"),
    role=either("user", "assistant", "system"),
    content=st.one_of(st.lists(content_part, max_size=3), junk),
    call_id=junk,
    output=junk,
    status=junk,
)
signals = either(
    "user_started", "barge_in", "response.cancel", "input.cancel", "session.update",
    "conversation.item.delete", "playback_ack", "nonsense",
)  # fmt: skip
signal_payloads = st.one_of(fields(response_id=response_ids, item_id=item_ids), session_patch)
signals = either(
    "user_started", "barge_in", "response.cancel", "input.cancel", "session.update",
    "conversation.item.delete", "playback_ack", "nonsense",
)  # fmt: skip
signal_payloads = st.one_of(fields(response_id=response_ids, item_id=item_ids), session_patch)
BODIES: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "input_audio_buffer.append": fields(
        audio=audio,
        delta=audio,
        format=formats,
        input_audio_format=formats,
        sample_rate_hz=rates,
        sample_rate=rates,
        audio_start_ms=millis,
        audio_end_ms=millis,
        duration_ms=millis,
        is_speech=flags,
        speech_probability=either(0.9, 0.1),
        vad=st.one_of(fields(is_speech=flags, speech_probability=numbers), junk),
        overlap_action=either("barge_in", "listen", "drop", "interrupt"),
        force_barge_in=flags,
        force_listen=flags,
        video_frames=st.one_of(st.lists(either(JPEG, ""), max_size=4), junk),
        max_slice_nums=either(1, None),
        text=junk,
    ),
    "input_audio_buffer.commit": fields(
        final=flags, response_create=flags, create_response=flags, is_speech=flags
    ),
    "input.commit": fields(response_create=flags, final=flags),
    "input_audio_buffer.clear": fields(extra=junk),
    "input.cancel": fields(extra=junk),
    "input.text.append": fields(text=either("hello")),
    "conversation.item.create": fields(item=st.one_of(item, junk), previous_item_id=item_ids),
    "conversation.item.retrieve": fields(item_id=item_ids),
    "conversation.item.delete": fields(item_id=item_ids),
    "conversation.item.truncate": fields(
        item_id=item_ids, audio_end_ms=millis, content_index=either(0, 1)
    ),
    "response.create": fields(
        response=st.one_of(
            fields(
                metadata=junk,
                conversation=either("none", "auto"),
                output_audio_format=formats,
                audio=junk,
                modalities=junk,
                instructions=junk,
            ),
            junk,
        )
    ),
    "response.cancel": fields(response_id=response_ids),
    "output_audio_buffer.clear": fields(response_id=response_ids),
    "barge_in": fields(extra=junk),
    "turn.signal": fields(event=signals, payload=signal_payloads),
    "playback.ack": fields(
        played_ms=millis, committed_ms=millis, response_id=response_ids, item_id=item_ids
    ),
    "audio.playback_ack": fields(played_ms=millis, response_id=response_ids),
    "session.heartbeat": fields(extra=junk),
    "session.update": fields(session=st.one_of(session_patch, junk)),
    "session.close": fields(reason=either("client_close", "", "x" * 200, "é" * 70)),
    "nonsense.event": fields(extra=junk),
}
ENGINE_TYPES = sorted(set(BODIES) - {"input.commit", "audio.playback_ack", "session.close"})
assert {t for t in ENGINE_TYPES if t in CLIENT_EVENT_TYPES} == CLIENT_EVENT_TYPES - {
    "session.resume",
    "session.event_ack",
    "session.close",
}


def event_of(types: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """One client event of one of ``types``, with an event_id now and then."""
    return st.sampled_from(types).flatmap(
        lambda etype: st.builds(
            lambda body, eid: {**body, "type": etype, **({"event_id": eid} if eid else {})},
            BODIES[etype],
            st.sampled_from([None, "evt_fuzz"]),
        )
    )


# the well-formed traffic that drives a session into responses, so hostile events meet
# every state (a turn buffered, a response running, playback unacknowledged)
good_events = st.sampled_from(
    [
        {"type": "input_audio_buffer.append", "audio": SPEECH},
        {"type": "input_audio_buffer.append", "audio": SPEECH},
        {"type": "input_audio_buffer.append", "audio": SILENCE},
        {"type": "input_audio_buffer.commit", "response_create": True},
        {"type": "response.create"},
        {"type": "playback.ack", "response_id": "$response", "played_ms": 200},
        {"type": "response.cancel"},
    ]
)


def resolve(event: Any, emitted: list[dict[str, Any]]) -> Any:
    """Replace id placeholders with the latest ids the session handed out."""
    latest: dict[str, str] = {}
    for sent in emitted:
        rid = sent.get("response_id")
        if isinstance(rid, str):
            latest["$response"] = rid
            latest["$assistant_item"] = f"item_{rid}"
        item_id = sent.get("item_id")
        if isinstance(item_id, str) and not item_id.startswith("item_resp"):
            latest["$item"] = item_id

    def walk(value: Any) -> Any:
        if isinstance(value, str) and value in ("$response", "$item", "$assistant_item"):
            return latest.get(value, value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(event)
