"""Memory over time (issue 16, item 5): nothing a session leaves behind outlives it, and nothing
inside a long session grows with every turn.

Measured on main: ``serve``'s RSS grew 59 → 171 MB over a 5-minute, 20-session mixed run.
tracemalloc showed the live set flat (~20 MB) when a full collection ran every 10 s: the
growth was ended sessions waiting for Python's cyclic collector. Every session was a
reference cycle (the transport's ManagedSession ↔ the engine's emit; a reply ↔ its task ↔
the task's cancellation traceback; the mailbox task ↔ its session), so its journal (up to
8 MiB of frames), audio buffers and replies were freed only when a full collection ran —
which bytes and numpy buffers do not trigger. These tests run with the cyclic collector off:
whatever a closed session still holds then is held by a cycle or a leak, not by timing.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from support.engine import OPEN_TURN, Harness, pcm16, turn_config
from support.server import OPEN_SESSION, abort_client, dial, recv_until, running, send, ws_url

from duplexctl.server.registry import Emit, Engine, EngineLike, default_engine
from duplexctl.server.session import EngineSession

pytestmark = pytest.mark.realtime

SPEECH = base64.b64encode(
    (0.3 * np.sin(2 * np.pi * 300 * np.arange(4800) / 16000) * 32767).astype("<i2").tobytes()
).decode()


@pytest.fixture
def no_cycle_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _watched(config: Any, refs: list[weakref.ref[Any]]) -> Engine:
    """The real engine, with a weak reference kept to every engine and managed session."""
    real = default_engine(config)

    def create(session_id: str, session_obj: dict[str, Any] | None, emit: Emit) -> EngineLike:
        engine = real.create(session_id, session_obj, emit)
        refs.append(weakref.ref(engine))
        refs.append(weakref.ref(emit.__self__))  # type: ignore[attr-defined]
        return engine

    return Engine(validate_open=real.validate_open, create=create)


async def _turn(ws: Any, how: str) -> None:
    """One spoken turn, ended the way ``how`` says."""
    for _ in range(3):
        await send(ws, {"type": "input_audio_buffer.append", "audio": SPEECH})
    await send(ws, {"type": "input_audio_buffer.commit", "response_create": True})
    if how == "answered":
        done = (await recv_until(ws, "response.done", timeout=10))[-1]
        heard = done["response"]["metadata"]["audio_duration_ms"]
        await send(
            ws, {"type": "playback.ack", "response_id": done["response_id"], "played_ms": heard}
        )
        await recv_until(ws, "playback.acknowledged")
    elif how == "cancelled":
        await recv_until(ws, "response.output_audio.delta", timeout=10)
        await send(ws, {"type": "response.cancel"})
        await recv_until(ws, "response.done", timeout=10)
    elif how == "barge_in":
        await recv_until(ws, "response.output_audio.delta", timeout=10)
        await send(ws, {"type": "barge_in"})
        await recv_until(ws, "response.done", timeout=10)


@pytest.mark.slow
async def test_closed_and_expired_sessions_leave_nothing_behind(no_cycle_collector: None) -> None:
    refs: list[weakref.ref[Any]] = []
    from support.server import small_config

    engine = _watched(small_config(), refs)
    async with running(
        engine=engine,
        ttfa_ms=20.0,
        chunk_ms=100,
        realtime_factor=1.0,
        reply_seconds=0.6,
        disconnect_grace_s=0.2,
        model_profile="turn",
    ) as server:
        for k, how in enumerate(["answered", "cancelled", "barge_in", "answered", "dropped"] * 2):
            ws = await dial(ws_url(server))
            await send(ws, {"type": "session.update", "session": OPEN_SESSION})
            await recv_until(ws, "session.updated")
            await _turn(ws, "answered" if how == "dropped" else how)
            if how == "dropped":  # the client vanishes; the session expires after its grace
                await _turn(ws, "cancelled")
                abort_client(ws)
                continue
            await send(ws, {"type": "session.close"})
            await recv_until(ws, "session.closed", timeout=10)
            await ws.close()
            del ws
            assert k < 20
        async with asyncio.timeout(10):
            while len(server.registry) or server.registry.slots_held:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # let the handlers and writers of the last sockets end
        alive = [type(ref()).__name__ for ref in refs if ref() is not None]
        assert not alive, f"held after their sessions ended (only a cycle can hold them): {alive}"


async def test_a_long_session_does_not_grow_with_every_turn() -> None:
    """Every reply used to be kept for the session's life with its last audio delta (~13 kB
    of base64 per 200 ms chunk here, 64 kB at the 1 s default), and every cancelled reply the
    client never acknowledged in full, for good."""
    h = Harness(turn_config(realtime_factor=0.0, ttfa_ms=0.0, reply_seconds=0.4), OPEN_TURN)
    h.start()
    session: EngineSession = h.session
    for turn in range(400):
        for _ in range(2):
            await h.send({"type": "input_audio_buffer.append", "audio": pcm16(100, level=0.3)})
        await h.send({"type": "input_audio_buffer.commit", "response_create": True})
        if turn % 2:
            await h.wait_for("response.output_audio.delta")
            await h.send({"type": "response.cancel"})  # cancelled, never acknowledged
        await h.wait_for("response.done")
        done = h.of("response.done")[-1]
        if done["response"]["status"] == "completed":
            heard = done["response"]["metadata"]["audio_duration_ms"]
            await h.send(
                {"type": "playback.ack", "response_id": done["response_id"], "played_ms": heard}
            )
        h.events.clear()
    records = session._responses.records.by_id
    held_audio = sum(len(r.last_b64) for r in records.values())
    assert len(records) <= 300, len(records)
    assert held_audio < 100_000, held_audio
    assert len(session._playback._cancelled) <= 20
    await session.close("client_close")


async def test_deleted_items_free_their_history_budget() -> None:
    """conversation.item.create kept every item for the session's life: a client could hold
    15 MiB per event. Client-made items now count against max_history_bytes
    (input_backpressure, 0.30.0's code for its image budget); deleting frees the budget."""
    h = Harness(turn_config(max_history_bytes=350_000), OPEN_TURN)
    h.start()
    big = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "x" * 100_000}],
    }
    for k in range(3):
        await h.send({"type": "conversation.item.create", "item": {**big, "id": f"item_{k}"}})
    assert h.codes() == []
    await h.send({"type": "conversation.item.create", "item": {**big, "id": "item_3"}})
    err = h.of("error")[-1]["error"]
    assert (err["code"], err["type"]) == ("input_backpressure", "rate_limit_error")
    assert "delete old items" in err["message"]
    await h.send({"type": "conversation.item.delete", "item_id": "item_0"})
    await h.send({"type": "conversation.item.create", "item": {**big, "id": "item_3"}})
    assert h.codes() == ["input_backpressure"]
    assert json.dumps(h.of("conversation.item.done")[-1]["item"]["id"]) == '"item_3"'
    await h.session.close("client_close")


async def test_a_client_that_stops_reading_is_dropped_not_buffered() -> None:
    """The connection's send queue grew for as long as its session produced output when the
    client stopped reading. Past max_send_backlog_bytes the connection is now dropped and the
    session waits in its disconnect grace, as after any drop (its journal keeps what it can)."""
    async with running("stub", max_send_backlog_bytes=2 * 1024 * 1024) as server:
        ws = await dial(ws_url(server))
        await send(ws, {"type": "session.update", "session": OPEN_SESSION})
        await recv_until(ws, "session.updated")
        (managed,) = server.registry.sessions()
        meta = {"stub_events": 300, "pad": 100_000}  # 30 MB of output, never read
        await send(ws, {"type": "response.create", "response": {"metadata": meta}})
        async with asyncio.timeout(10):
            while managed.attachment is not None:
                await asyncio.sleep(0.05)
        assert not managed.finished  # in its grace: resumable
        abort_client(ws)
