"""Admission control, slot lifetime, disconnect grace and idle TTL (docs/protocol.md §6.6-6.8)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from support.server import (
    OPEN_SESSION,
    abort_client,
    closed_code,
    dial,
    open_session,
    recv,
    recv_until,
    running,
    send,
    ws_url,
)

from duplexctl.protocol.names import Dialect

Wire = Callable[[str], list[dict[str, Any]]]


async def _try_open(url: str) -> tuple[dict[str, Any], Any]:
    ws = await dial(url)
    await send(ws, {"type": "session.update", "session": OPEN_SESSION, "event_id": "evt_burst"})
    return await recv(ws), ws


async def test_burst_of_opens_never_exceeds_the_limit(engine_kind: str, load_wire: Wire) -> None:
    golden = next(
        line["frame"]
        for line in load_wire("admission_reject")
        if line["dir"] == "in" and line["frame"]["type"] == "error"
    )
    async with running(engine_kind, max_sessions=3) as server:
        url = ws_url(server)
        results = await asyncio.gather(*(_try_open(url) for _ in range(20)))
        firsts = [first for first, _ in results]
        created = [f for f in firsts if f["type"] == "session.created"]
        rejected = [f for f in firsts if f["type"] == "error"]
        assert len(created) == 3 and len(rejected) == 17
        assert server.registry.slots_held == 3
        for error in rejected:
            assert sorted(error) == sorted(golden)  # no seq
            assert sorted(error["error"]) == sorted(golden["error"])  # no echo, no retryable
            assert error["error"] == {
                "type": "rate_limit_error",
                "code": "resource_exhausted",
                "message": "duplex_session_capacity_exhausted: limit=3",
            }
        codes = await asyncio.gather(
            *(closed_code(ws) for first, ws in results if first["type"] == "error")
        )
        assert set(codes) == {(1006, "")}
        for first, ws in results:
            if first["type"] == "session.created":
                await ws.close()


async def test_slot_is_free_as_soon_as_session_closed_arrives(engine_kind: str) -> None:
    async with running(engine_kind, max_sessions=1) as server:
        ws, _, _ = await open_session(server)
        first, _ = await _try_open(ws_url(server))
        assert first["error"]["code"] == "resource_exhausted"
        await send(ws, {"type": "session.close"})
        await recv_until(ws, "session.closed")
        first, ws3 = await _try_open(ws_url(server))  # immediately: no teardown wait
        assert first["type"] == "session.created"
        await ws3.close()


async def test_dropped_session_holds_slot_until_grace_expires(engine_kind: str) -> None:
    async with running(engine_kind, max_sessions=1, disconnect_grace_s=0.4) as server:
        ws, created, _ = await open_session(server)
        abort_client(ws)
        await asyncio.sleep(0.1)
        first, _ = await _try_open(ws_url(server))
        assert first["error"]["code"] == "resource_exhausted"  # held during grace
        for _ in range(200):
            if server.registry.slots_held == 0:
                break
            await asyncio.sleep(0.02)
        assert server.registry.slots_held == 0
        # the expired session can no longer be resumed
        ws2 = await dial(ws_url(server))
        await send(
            ws2,
            {
                "type": "session.resume",
                "session_id": created["session"]["id"],
                "resume_token": created["resume_token"],
                "last_received_server_event_seq": 1,
            },
        )
        error = await recv(ws2)
        assert error["error"]["code"] == "session_resume_expired"
        first, ws3 = await _try_open(ws_url(server))
        assert first["type"] == "session.created"
        await ws3.close()


async def test_idle_ttl_expires_attached_session_and_closes_socket() -> None:
    async with running(idle_ttl_s=0.3) as server:
        ws, created, _ = await open_session(server)
        events = await recv_until(ws, "session.expired", timeout=5)
        expired = events[-1]
        assert expired["reason"] == "idle_ttl_expired"
        assert expired["session_id"] == created["session"]["id"]
        assert isinstance(expired["server_event_seq"], int)
        assert await closed_code(ws) == (1000, "idle_ttl_expired")
        assert server.registry.slots_held == 0


async def test_heartbeats_keep_idle_ttl_at_bay() -> None:
    async with running(idle_ttl_s=0.4) as server:
        ws, _, _ = await open_session(server)
        for _ in range(6):
            await asyncio.sleep(0.15)
            await send(ws, {"type": "session.heartbeat"})
            assert (await recv(ws))["type"] == "session.heartbeat_ack"
        assert server.registry.slots_held == 1
        await ws.close()


async def test_g1_admission_rejection_is_flat_duplex_session_busy() -> None:
    async with running(max_sessions=1, dialect=Dialect.G1) as server:
        ws, _, _ = await open_session(server)
        first, ws2 = await _try_open(ws_url(server))
        assert first == {
            "type": "error",
            "error": "duplex session capacity reached (max_sessions=1)",
            "code": "duplex_session_busy",
        }
        assert await closed_code(ws2) == (1006, "")
        await ws.close()


async def test_shutdown_closes_attached_sessions(engine_kind: str) -> None:
    async with running(engine_kind) as server:
        ws, _, _ = await open_session(server)
        closing = asyncio.ensure_future(recv_until(ws, "session.closed"))
        await asyncio.sleep(0.05)
        await server.close()
        assert (await closing)[-1]["reason"] == "shutdown"
        assert await closed_code(ws) == (1000, "shutdown")
