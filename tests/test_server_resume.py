"""Resume, replay, takeover and the journal on the wire (docs/protocol.md §6.6, golden transcripts
``journal_gap``, ``resume_takeover``, ``resume_expired``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from support.server import (
    StubEngine,
    abort_client,
    closed_code,
    dial,
    open_session,
    recv,
    recv_until,
    running,
    send,
    stub_engine,
    ws_url,
)

from duplexctl.server.registry import Emit, Engine

Wire = Callable[[str], list[dict[str, Any]]]


def golden_in(load_wire: Wire, name: str) -> list[dict[str, Any]]:
    return [line["frame"] for line in load_wire(name) if line["dir"] == "in"]


def resume_event(created: dict[str, Any], last: int, token: str | None = None) -> dict[str, Any]:
    return {
        "type": "session.resume",
        "session_id": created["session"]["id"],
        "resume_token": token if token is not None else created["resume_token"],
        "last_received_server_event_seq": last,
        "event_id": "evt_resume",
    }


async def resume(server: Any, event: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    ws = await dial(ws_url(server))
    await send(ws, event)
    return ws, await recv(ws)


async def heartbeats(ws: Any, n: int) -> list[dict[str, Any]]:
    acks = []
    for _ in range(n):
        await send(ws, {"type": "session.heartbeat"})
        acks.append((await recv_until(ws, "session.heartbeat_ack"))[-1])
    return acks


async def wait_detached(server: Any, session_id: str) -> None:
    managed = server.registry.get(session_id)
    for _ in range(200):
        if managed is None or managed.attachment is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("session never detached")


async def test_resume_replays_original_frames_without_gap_or_duplicate(engine_kind: str) -> None:
    async with running(engine_kind) as server:
        ws, created, updated = await open_session(server)
        seen = [updated, *await heartbeats(ws, 3)]
        assert [e["server_event_seq"] for e in seen] == [1, 2, 3, 4]
        abort_client(ws)
        await wait_detached(server, created["session"]["id"])
        ws2, resumed = await resume(server, resume_event(created, 1))
        assert resumed["type"] == "session.resumed"
        assert sorted(resumed) == [
            "attachment_generation",
            "event_id",
            "resume_token",
            "session",
            "session_id",
            "type",
        ]
        assert "server_event_seq" not in resumed
        assert resumed["attachment_generation"] == 2
        assert resumed["resume_token"] != created["resume_token"]
        assert resumed["session"]["id"] == created["session"]["id"]
        replay = [await recv(ws2) for _ in range(3)]
        assert replay == seen[1:]  # original seq and event_id, in order
        live = await heartbeats(ws2, 1)
        assert live[0]["server_event_seq"] == 5
        await send(ws2, {"type": "session.close"})
        assert (await recv_until(ws2, "session.closed"))[-1]["server_event_seq"] == 6
        assert await closed_code(ws2) == (1000, "client_close")


async def test_events_emitted_while_detached_are_replayed() -> None:
    async with running() as server:
        ws, created, _ = await open_session(server)
        abort_client(ws)
        sid = created["session"]["id"]
        await wait_detached(server, sid)
        managed = server.registry.get(sid)
        assert managed is not None and managed.engine is not None
        managed.engine.receive(
            {"type": "response.create", "response": {"metadata": {"stub_events": 3}}}
        )
        ws2, resumed = await resume(server, resume_event(created, 1))
        assert resumed["type"] == "session.resumed"
        replay = [await recv(ws2) for _ in range(3)]
        assert [e["server_event_seq"] for e in replay] == [2, 3, 4]
        assert [e["k"] for e in replay] == [0, 1, 2]
        await ws2.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"resume_token": None},
        {"resume_token": ""},
        {"session_id": 7},
        {"last_received_server_event_seq": -1},
        {"last_received_server_event_seq": "3"},
        {"last_received_server_event_seq": 1.5},
    ],
)
async def test_malformed_resume_is_invalid_session_resume(bad: dict[str, Any]) -> None:
    async with running() as server:
        ws, created, _ = await open_session(server)
        event = {**resume_event(created, 1), **bad}
        ws2, error = await resume(server, event)
        assert error["error"]["code"] == "invalid_session_resume"
        assert "event_id" not in error["error"]
        assert await closed_code(ws2) == (1006, "")
        await ws.close()


async def test_resume_unknown_session_is_expired(load_wire: Wire) -> None:
    golden = golden_in(load_wire, "resume_expired")[-1]
    async with running() as server:
        ws2, error = await resume(
            server,
            {"type": "session.resume", "session_id": "duplex-nope", "resume_token": "t"},
        )
        assert sorted(error["error"]) == sorted(golden["error"])
        assert error["error"]["code"] == "session_resume_expired"
        assert error["error"]["message"] == "Unknown or expired duplex session: duplex-nope"
        assert await closed_code(ws2) == (1006, "")


async def test_journal_gap_and_conflict_leave_session_and_token_intact(
    engine_kind: str, load_wire: Wire
) -> None:
    golden = golden_in(load_wire, "journal_gap")
    golden_gap = next(f for f in golden if f["type"] == "session.resync_required")
    golden_conflict = next(f for f in golden if f["type"] == "error")
    async with running(engine_kind) as server:
        ws, created, _ = await open_session(server)
        await heartbeats(ws, 3)
        await send(ws, {"type": "session.event_ack", "server_event_seq": 4})
        await asyncio.sleep(0.05)
        abort_client(ws)
        await wait_detached(server, created["session"]["id"])

        ws2, gap = await resume(server, resume_event(created, 2))
        assert sorted(gap) == sorted(golden_gap)
        assert gap["reason"] == "journal_gap" and "server_event_seq" not in gap
        assert gap["session_id"] == created["session"]["id"]
        assert await closed_code(ws2) == (1006, "")

        ws3, conflict = await resume(server, resume_event(created, 104))
        assert conflict["error"] == golden_conflict["error"]
        assert await closed_code(ws3) == (1006, "")

        ws4, resumed = await resume(server, resume_event(created, 4))  # same token still works
        assert resumed["type"] == "session.resumed"
        assert resumed["attachment_generation"] == 2
        await send(ws4, {"type": "session.close"})
        closed = (await recv_until(ws4, "session.closed"))[-1]
        assert closed["server_event_seq"] == 5
        assert await closed_code(ws4) == (1000, "client_close")


async def test_takeover_replaces_old_socket(engine_kind: str, load_wire: Wire) -> None:
    golden = golden_in(load_wire, "resume_takeover")
    golden_replaced = next(f for f in golden if f["type"] == "session.replaced")
    golden_bad_token = next(f for f in golden if f["type"] == "error")
    async with running(engine_kind) as server:
        ws1, created, _ = await open_session(server)
        await heartbeats(ws1, 1)
        ws2, resumed = await resume(server, resume_event(created, 2))
        assert resumed["attachment_generation"] == 2
        replaced = await recv(ws1)
        assert sorted(replaced) == sorted(golden_replaced)
        assert replaced["attachment_generation"] == 1
        assert replaced["session_id"] == created["session"]["id"]
        assert "server_event_seq" not in replaced
        assert await closed_code(ws1) == (1000, "session_replaced")

        ws3, error = await resume(server, resume_event(created, 2))  # the old token
        assert error["error"] == golden_bad_token["error"]
        assert await closed_code(ws3) == (1006, "")

        assert (await heartbeats(ws2, 1))[0]["server_event_seq"] == 3
        await send(ws2, {"type": "session.close"})
        assert (await recv_until(ws2, "session.closed"))[-1]["server_event_seq"] == 4
        assert await closed_code(ws2) == (1000, "client_close")


async def test_rotated_token_chain() -> None:
    async with running() as server:
        ws, created, _ = await open_session(server)
        token = created["resume_token"]
        for generation in (2, 3, 4):
            ws_next, resumed = await resume(server, resume_event(created, 1, token))
            assert resumed["attachment_generation"] == generation
            assert await closed_code(ws) == (1000, "session_replaced")
            ws, token = ws_next, resumed["resume_token"]
        await ws.close()


async def test_journal_overflow_notice_then_unsequenced_live_events() -> None:
    async with running(resume_replay_max_bytes=3000) as server:
        ws, created, _ = await open_session(server)
        await send(
            ws,
            {"type": "response.create", "response": {"metadata": {"stub_events": 8, "pad": 400}}},
        )
        events = [await recv(ws) for _ in range(9)]  # 8 deltas + one resync notice
        notices = [e for e in events if e["type"] == "session.resync_required"]
        assert len(notices) == 1
        assert notices[0]["reason"] == "journal_overflow"
        assert notices[0]["session_id"] == created["session"]["id"]
        assert "server_event_seq" not in notices[0]
        at = events.index(notices[0])
        deltas = [e for e in events if e["type"] == "response.output_audio.delta"]
        assert [e["k"] for e in deltas] == list(range(8))  # nothing lost on the live socket
        assert all("server_event_seq" in e for e in events[:at])
        assert all("server_event_seq" not in e for e in events[at + 1 :])
        ack = (await heartbeats(ws, 1))[0]
        assert "server_event_seq" not in ack  # the socket stays open, journaling stays off
        head = events[at - 1]["server_event_seq"]
        abort_client(ws)
        await wait_detached(server, created["session"]["id"])
        ws2, gap = await resume(server, resume_event(created, head))
        assert gap["type"] == "session.resync_required" and gap["reason"] == "journal_gap"
        assert await closed_code(ws2) == (1006, "")


@pytest.mark.timing  # a 0.2 s journal TTL against a 0.3 s sleep: late wake-ups reorder them
async def test_replay_ttl_prunes_into_a_gap() -> None:
    async with running(resume_replay_ttl_s=0.2) as server:
        ws, created, _ = await open_session(server)
        await heartbeats(ws, 1)
        await asyncio.sleep(0.3)
        await heartbeats(ws, 1)  # recording prunes seq 1 and 2
        abort_client(ws)
        await wait_detached(server, created["session"]["id"])
        ws2, gap = await resume(server, resume_event(created, 1))
        assert gap["type"] == "session.resync_required"
        assert await closed_code(ws2) == (1006, "")
        ws3, resumed = await resume(server, resume_event(created, 2))
        assert resumed["type"] == "session.resumed"
        await ws3.close()


async def test_session_without_resume_support_closes_on_disconnect() -> None:
    made: list[StubEngine] = []
    base = stub_engine(made)

    def create(session_id: str, session_obj: dict[str, Any] | None, emit: Emit) -> StubEngine:
        engine = base.create(session_id, session_obj, emit)
        assert isinstance(engine, StubEngine)
        engine.capabilities["supports_session_resume"] = False
        return engine

    async with running(engine=Engine(base.validate_open, create), max_sessions=1) as server:
        ws, created, _ = await open_session(server)
        ws2, error = await resume(server, resume_event(created, 1))
        assert error["error"]["code"] == "unsupported_session_resume"
        assert await closed_code(ws2) == (1006, "")
        abort_client(ws)
        for _ in range(200):
            if server.registry.slots_held == 0:
                break
            await asyncio.sleep(0.01)
        assert server.registry.slots_held == 0  # no grace: closed with reason "disconnect"
        assert made[0].closed
