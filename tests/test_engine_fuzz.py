"""Property tests: malformed and out-of-order events never break an EngineSession.

Whatever arrives, ``receive`` raises nothing but ProtocolError, the mailbox never dies, and
every error — raised or emitted — carries a documented code (protocol.md §4.5).
"""

from __future__ import annotations

import asyncio
from typing import Any

from engine_harness import OPEN_TURN, Harness, pcm16, turn_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from duplexctl.protocol.names import CLIENT_EVENT_TYPES

DOCUMENTED = {
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
}  # fmt: skip

TYPES = [*sorted(CLIENT_EVENT_TYPES - {"session.resume", "session.event_ack"}), "nonsense"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**7), st.floats(allow_nan=True),
    st.text(max_size=12), st.sampled_from(["pcm16", "mp3", "g711_ulaw", "server_vad", "AQID"]),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = [
    "audio", "format", "sample_rate_hz", "response_id", "item_id", "played_ms", "committed_ms",
    "audio_end_ms", "content_index", "response", "session", "item", "event", "payload",
    "response_create", "is_speech", "text", "video_frames", "overlap_action", "force_barge_in",
]  # fmt: skip
events = st.builds(
    lambda t, body, good: {**body, "type": t, **({"audio": good} if good else {})},
    st.sampled_from(TYPES),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=5),
    st.sampled_from([None, pcm16(20), pcm16(20, level=0.3)]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events, max_size=25), st.sampled_from([None, {"type": "server_vad"}]))
def test_random_events_only_documented_rejections(batch: list[dict[str, Any]], td: Any) -> None:
    async def run() -> None:
        h = Harness(
            turn_config(realtime_factor=0.0, ttfa_ms=0.0, reply_seconds=0.2),
            {**OPEN_TURN, "turn_detection": td},
        )
        h.start()
        for event in batch:
            exc = await h.send(event)
            assert exc is None or exc.code in DOCUMENTED, exc
        await asyncio.sleep(0.01)
        await h.session.drain()
        assert (h.session._worker is not None and not h.session._worker.done()) or h.session.closed
        for event in h.events:
            if event["type"] == "error":
                assert event["error"]["code"] in DOCUMENTED, event
        await h.session.close("client_close")
        assert h.events[-1]["type"] == "session.closed"

    asyncio.run(run())
