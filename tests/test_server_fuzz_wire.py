"""Property test over real sockets: hostile frames on one connection never hurt another.

Hypothesis generates frames of every kind a broken or malicious client could send (non-JSON
text, JSON that is not an object, objects without a string type, every client event type
with random fields, oversize-ish audio). They go to a live session on the reference server
while a second session on the same server speaks a turn. Whatever was sent: the server
stays healthy, every error it answers carries a documented code (never
``realtime_input_failed``, which means the engine crashed), and the other session still gets
its complete response.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_support import OPEN_SESSION, closed_code, dial, running, send, ws_url
from test_engine_fuzz import DOCUMENTED
from websockets.exceptions import ConnectionClosed

from duplexctl.protocol.names import CLIENT_EVENT_TYPES

TRANSPORT_CODES = {
    "invalid_json",
    "event_too_large",
    "unknown_event",
    "unsupported_session_resume",
    "invalid_event_ack",
    "unsupported",
}
ALLOWED = DOCUMENTED | TRANSPORT_CODES

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=16),
    st.sampled_from(["pcm16", "g711_alaw", "pcm_f32le", "mp3", "AAAA", "@@", "server_vad"]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
_fields = st.dictionaries(
    st.sampled_from(
        [
            "audio", "delta", "format", "sample_rate_hz", "response_create", "response",
            "response_id", "item_id", "audio_end_ms", "played_ms", "committed_ms", "session",
            "server_event_seq", "event", "payload", "item", "reason", "final", "is_speech",
            "turn_detection", "event_id", "text",
        ]
    ),
    _values,
    max_size=5,
)  # fmt: skip
_typed = st.builds(
    lambda t, f: json.dumps({**f, "type": t}, allow_nan=True),
    st.sampled_from([*sorted(CLIENT_EVENT_TYPES), "input.commit", "close", "nonsense.event"]),
    _fields,
)
frames = st.one_of(
    _typed,
    _typed,
    st.text(max_size=40),
    st.builds(lambda v: json.dumps(v, allow_nan=True), _values),
    st.builds(
        lambda n: json.dumps({"type": "input_audio_buffer.append", "audio": "A" * n}),
        st.integers(0, 200_000),
    ),
)

SPEECH = base64.b64encode(
    (0.3 * np.sin(2 * np.pi * 300 * np.arange(8000) / 16000) * 32767).astype("<i2").tobytes()
).decode()


async def _speak_one_turn(server: Any) -> list[str]:
    ws = await dial(ws_url(server, "duplex=1&autostart=0"))
    await send(ws, {"type": "session.update", "session": OPEN_SESSION})
    types: list[str] = []
    await send(ws, {"type": "input_audio_buffer.append", "audio": SPEECH})
    await send(ws, {"type": "input_audio_buffer.commit", "response_create": True})
    async with asyncio.timeout(20):
        async for raw in ws:
            event = json.loads(raw)
            types.append(event["type"])
            if event["type"] == "response.done":
                break
    await send(ws, {"type": "session.close"})
    await closed_code(ws)
    return types


async def _hostile(server: Any, batch: list[str]) -> list[str]:
    ws = await dial(ws_url(server, "duplex=1&autostart=0"))
    await send(ws, {"type": "session.update", "session": OPEN_SESSION})
    codes: list[str] = []
    for frame in batch:
        await ws.send(frame)
    await send(ws, {"type": "session.heartbeat", "event_id": "evt_probe_end"})
    try:
        async with asyncio.timeout(10):
            async for raw in ws:
                event = json.loads(raw)
                if event.get("type") == "error":
                    err = event["error"]
                    codes.append(err["code"] if isinstance(err, dict) else event.get("code"))
                if event.get("type") in ("session.heartbeat_ack", "session.closed"):
                    break
    except (TimeoutError, ConnectionClosed):  # the hostile batch may end the session
        pass
    await ws.close()
    return codes


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(frames, min_size=1, max_size=12))
def test_hostile_frames_never_hurt_another_session(batch: list[str]) -> None:
    async def scenario() -> None:
        async with running("real", ttfa_ms=10.0, realtime_factor=0.0, reply_seconds=0.2) as srv:
            codes, turn = await asyncio.gather(_hostile(srv, batch), _speak_one_turn(srv))
            assert set(codes) <= ALLOWED, codes
            assert "response.done" in turn and "response.created" in turn, turn
            # and the server still admits and serves a fresh session afterwards
            assert "response.done" in await _speak_one_turn(srv)

    asyncio.run(scenario())
