"""Property test over real sockets: hostile frames on one connection never hurt another.

Hypothesis generates frames of every kind a broken or malicious client could send: every
client event type with hostile fields (tests/support/hostile_clients.py), ``session.resume`` and
``session.event_ack`` with bad values, non-JSON text, JSON that is not an object, binary
frames, JSON nested far too deep, ``NaN`` literals and oversize-ish audio; the opening frame
itself may be hostile. They go to a live session on the reference server while a second
session on the same server speaks a turn. Whatever was sent:

* every error the server answers carries a documented code (never ``internal_error`` or
  ``realtime_input_failed``, which mean the server broke on the input), and nothing is
  logged at ERROR;
* the hostile connection is answered or closed in bounded time: a heartbeat sent after the
  batch gets its ack, or the connection ends (no hung session);
* the other session still gets its complete response, and a fresh session is served after.

CI runs a bounded number of examples; ``DUPLEXCTL_FUZZ_EXAMPLES=2000`` runs more.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile_clients import (
    DOCUMENTED,
    TRANSPORT_CODES,
    event_of,
    exit_if_hung,
    fuzz_examples,
    junk,
    logged_errors,
    session_patch,
)
from support.server import OPEN_SESSION, closed_code, dial, running, send, ws_url
from websockets.exceptions import ConnectionClosed

ALLOWED = DOCUMENTED | TRANSPORT_CODES


def _nested(depth: int) -> Any:
    value: Any = 0
    for k in range(depth):
        value = [value] if k % 2 else {"k": value}
    return value


_typed = event_of(
    [
        "input_audio_buffer.append", "input_audio_buffer.commit", "input.commit",
        "input_audio_buffer.clear", "input.cancel", "input.text.append",
        "conversation.item.create", "conversation.item.retrieve", "conversation.item.delete",
        "conversation.item.truncate", "response.create", "response.cancel",
        "output_audio_buffer.clear", "barge_in", "turn.signal", "playback.ack",
        "audio.playback_ack", "session.heartbeat", "session.update", "session.close", "nonsense.event",
    ]
).map(lambda e: json.dumps(e))  # fmt: skip
_envelope = st.one_of(
    st.builds(
        lambda seq: json.dumps({"type": "session.event_ack", "server_event_seq": seq}),
        st.one_of(junk, st.integers(-5, 2**64 - 1)),
    ),
    st.builds(
        lambda sid, tok, last: json.dumps(
            {
                "type": "session.resume",
                "session_id": sid,
                "resume_token": tok,
                "last_received_server_event_seq": last,
            }
        ),
        junk,
        junk,
        junk,
    ),
)
frames = st.one_of(
    _typed,
    _typed,
    _typed,
    _envelope,
    st.text(max_size=40),
    st.builds(lambda v: json.dumps(v), junk),
    st.binary(max_size=64),
    st.builds(lambda d: json.dumps({"type": "session.update", "x": _nested(d)}), st.integers(20, 900)),
    st.sampled_from(['{"type":"playback.ack","played_ms":NaN}', '{"type":"session.heartbeat"', "[]"]),
    st.builds(
        lambda n, c: json.dumps({"type": "session.close", "reason": c * n}),
        st.integers(0, 200),
        st.sampled_from(["x", "é", "你"]),
    ),
    st.builds(
        lambda n: json.dumps({"type": "input_audio_buffer.append", "audio": "A" * n}),
        st.integers(0, 200_000),
    ),
)  # fmt: skip
openings = st.one_of(
    st.builds(lambda p: json.dumps({"type": "session.update", "session": {**OPEN_SESSION, **p}}),
              session_patch),
    st.just(json.dumps({"type": "session.update", "session": OPEN_SESSION})),
    frames,
)  # fmt: skip

SPEECH = base64.b64encode(
    (0.3 * np.sin(2 * np.pi * 300 * np.arange(8000) / 16000) * 32767).astype("<i2").tobytes()
).decode()


@pytest.fixture(autouse=True)
def watchdog(request: pytest.FixtureRequest) -> Iterator[None]:
    with exit_if_hung(request.config, 240):
        yield


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


async def _hostile(server: Any, opening: str | bytes, batch: list[str | bytes]) -> list[str]:
    """Send the batch; return the error codes seen. Fails if the connection hangs."""
    ws = await dial(ws_url(server, "duplex=1&autostart=0"))
    codes: list[str] = []
    answered = False
    try:
        await ws.send(opening)
        for frame in batch:
            await ws.send(frame)
        await send(ws, {"type": "session.heartbeat", "event_id": "evt_probe_end"})
        async with asyncio.timeout(15):
            async for raw in ws:
                event = json.loads(raw)
                if event.get("type") == "error":
                    err = event["error"]
                    codes.append(err["code"] if isinstance(err, dict) else event.get("code"))
                if event.get("type") in ("session.heartbeat_ack", "session.closed"):
                    answered = True
                    break
    except ConnectionClosed:  # the server may end the connection (a refused opening, a close)
        answered = True
    await ws.close()
    assert answered, f"hostile connection neither answered nor closed; codes {codes}"
    return codes


@settings(
    max_examples=fuzz_examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(openings, st.lists(frames, min_size=1, max_size=12))
def test_hostile_frames_never_hurt_another_session(
    opening: str | bytes, batch: list[str | bytes]
) -> None:
    async def scenario() -> None:
        async with running("real", ttfa_ms=10.0, realtime_factor=0.0, reply_seconds=0.2) as srv:
            codes, turn = await asyncio.gather(_hostile(srv, opening, batch), _speak_one_turn(srv))
            assert set(codes) <= ALLOWED, codes
            assert "response.done" in turn and "response.created" in turn, turn
            # and the server still admits and serves a fresh session afterwards
            assert "response.done" in await _speak_one_turn(srv)

    with logged_errors() as errors:
        asyncio.run(scenario())
    assert not errors, errors
