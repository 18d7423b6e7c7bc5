"""The server transport over real websockets on loopback: routes, handshake, read loop.

Shapes, codes and messages are checked against the golden transcripts recorded from the real
vLLM-Omni 0.30.0 server (tests/fixtures/wire). Tests marked with the ``engine_kind`` fixture
run twice: against the private stub engine and against the real EngineSession.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from support.server import (
    OPEN_SESSION,
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

from duplexctl.protocol import ids
from duplexctl.protocol.names import Dialect
from duplexctl.server.config import Fault, MiB
from duplexctl.server.registry import Emit, Engine

Wire = Callable[[str], list[dict[str, Any]]]


def golden_frames(load_wire: Wire, name: str, direction: str = "in") -> list[dict[str, Any]]:
    return [line["frame"] for line in load_wire(name) if line["dir"] == direction]


def error_keys(event: dict[str, Any]) -> tuple[list[str], list[str]]:
    return sorted(event), sorted(event["error"])


async def http_get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    def get() -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    return await asyncio.to_thread(get)


# -- routes ---------------------------------------------------------------------------------


async def test_health_ready_and_unknown_paths() -> None:
    async with running() as server:
        assert await http_get(server.port, "/health") == (200, {"status": "healthy"})
        assert await http_get(server.port, "/ready") == (200, {"status": "ready"})
        status, _ = await http_get(server.port, "/v1/chat/nothing")
        assert status == 404


@pytest.mark.parametrize("value", ["0", "false", "off", "yes", "2", ""])
async def test_duplex_opt_out_is_refused_flat_then_close_1000(value: str, load_wire: Wire) -> None:
    golden = golden_frames(load_wire, "open_rejected")[-1]
    async with running() as server:
        ws = await dial(ws_url(server, f"duplex={value}"))
        refusal = await recv(ws)
        assert (
            refusal
            == golden
            == {
                "type": "error",
                "error": "Realtime API is not available",
                "code": "unsupported",
            }
        )
        assert await closed_code(ws) == (1000, "")


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/v1/realtime", "duplex=1&autostart=0"),
        ("/v1/realtime", "duplex=TRUE"),
        ("/v1/realtime", "duplex=On"),
        ("/v1/realtime", ""),
        ("/v1/duplex", ""),
        ("/v1/duplex", "duplex=1"),
    ],
)
async def test_duplex_routes_and_accepted_flags(path: str, query: str) -> None:
    async with running() as server:
        ws = await dial(ws_url(server, query, path))
        await send(ws, {"type": "session.update", "session": OPEN_SESSION})
        assert (await recv(ws))["type"] == "session.created"
        await ws.close()


# -- handshake ------------------------------------------------------------------------------


async def test_config_timeout_error_then_no_close_frame(load_wire: Wire) -> None:
    (golden,) = golden_frames(load_wire, "config_timeout")
    async with running(config_timeout_s=0.3) as server:
        ws = await dial(ws_url(server))
        error = await recv(ws)
        assert error_keys(error) == error_keys(golden)
        assert error["error"] == {
            "type": "invalid_request_error",
            "code": "config_timeout",
            "message": "Timeout waiting for session.update",
        }
        assert "server_event_seq" not in error
        assert await closed_code(ws) == (1006, "")
        assert server.registry.slots_held == 0


async def test_open_created_then_updated_seq_1(engine_kind: str, load_wire: Wire) -> None:
    golden = golden_frames(load_wire, "commit_turn")
    async with running(engine_kind) as server:
        ws, created, updated = await open_session(server)
        assert (
            sorted(created)
            == sorted(golden[0])
            == [
                "attachment_generation",
                "event_id",
                "resume_token",
                "session",
                "type",
            ]
        )
        assert created["attachment_generation"] == 1
        assert len(created["resume_token"]) == 43
        assert created["session"]["id"].startswith("duplex-")
        assert updated["server_event_seq"] == 1
        assert updated["session"]["id"] == created["session"]["id"]
        await send(ws, {"type": "session.heartbeat", "event_id": ids.client_event_id()})
        ack = await recv_until(ws, "session.heartbeat_ack")
        assert ack[-1]["server_event_seq"] == 2
        assert ack[-1]["session_id"] == created["session"]["id"]
        await ws.close()


async def test_model_query_autostarts_before_any_client_frame(engine_kind: str) -> None:
    async with running(engine_kind) as server:
        ws = await dial(ws_url(server, "duplex=1&model=fake/autostart"))
        created = await recv(ws)
        updated = await recv(ws)
        assert (created["type"], updated["type"]) == ("session.created", "session.updated")
        assert created["session"]["model"] == "fake/autostart"
        await ws.close()


@pytest.mark.parametrize(
    "off", ["autostart=0", "autostart=FALSE", "autostart=no", "resume=1", "resume=on"]
)
async def test_autostart_disabled_waits_for_first_frame(off: str) -> None:
    async with running(config_timeout_s=0.3) as server:
        ws = await dial(ws_url(server, f"duplex=1&model=fake/x&{off}"))
        error = await recv(ws)  # nothing was opened: the config timeout answers
        assert error["error"]["code"] == "config_timeout"
        assert await closed_code(ws) == (1006, "")


async def test_session_update_without_session_key_opens_with_its_body() -> None:
    async with running() as server:
        ws = await dial(ws_url(server))
        await send(ws, {"type": "session.update", "instructions": "flat body", "model": "m"})
        created = await recv(ws)
        assert created["session"]["instructions"] == "flat body"
        assert "type" not in created["session"] or created["session"]["type"] != "session.update"
        await ws.close()


@pytest.mark.parametrize(
    ("frame", "code", "message"),
    [
        ("{not json", "invalid_json", "Invalid JSON in session.update"),
        ("[1, 2, 3]", "bad_event", "Realtime event must be a JSON object"),
        ('"text"', "bad_event", "Realtime event must be a JSON object"),
    ],
)
async def test_bad_first_frame_error_then_no_close_frame(
    frame: str, code: str, message: str, load_wire: Wire
) -> None:
    golden = next(
        f
        for f in golden_frames(load_wire, "open_rejected")
        if f.get("error", {})
        and isinstance(f["error"], dict)
        and f["error"]["code"] == "invalid_json"
    )
    async with running() as server:
        ws = await dial(ws_url(server))
        await ws.send(frame)
        error = await recv(ws)
        assert error_keys(error) == error_keys(golden)
        assert (error["error"]["code"], error["error"]["message"]) == (code, message)
        assert await closed_code(ws) == (1006, "")
        assert server.registry.slots_held == 0


async def test_open_rejected_by_validate_open(engine_kind: str, load_wire: Wire) -> None:
    golden = golden_frames(load_wire, "open_rejected")[0]
    async with running(engine_kind) as server:
        ws = await dial(ws_url(server))
        session = {**OPEN_SESSION, "turn_detection": {"type": "semantic_vad"}}
        await send(
            ws, {"type": "session.update", "session": session, "event_id": ids.client_event_id()}
        )
        error = await recv(ws)
        assert error_keys(error) == error_keys(golden)  # no event_id echo, no seq
        assert error["error"]["code"] == "invalid_session_config"
        assert await closed_code(ws) == (1006, "")
        assert server.registry.slots_held == 0


async def test_first_frame_command_opens_default_session_then_runs(
    engine_kind: str, load_wire: Wire
) -> None:
    async with running(engine_kind) as server:
        ws = await dial(ws_url(server))
        await send(ws, {"type": "session.heartbeat", "event_id": ids.client_event_id()})
        events = await recv_until(ws, "session.heartbeat_ack")
        assert [e["type"] for e in events] == [
            "session.created",
            "session.updated",
            "session.heartbeat_ack",
        ]
        assert events[0]["session"]["model"] == server.registry.config.served_model
        assert events[-1]["server_event_seq"] == 2
        await ws.close()


async def test_first_frame_without_type_opens_and_gets_bad_event(
    engine_kind: str, load_wire: Wire
) -> None:
    golden = next(f for f in golden_frames(load_wire, "autostart_model") if f["type"] == "error")
    async with running(engine_kind) as server:
        ws = await dial(ws_url(server))
        await send(ws, {"event_id": "evt_first_frame_without_type"})
        events = [await recv(ws) for _ in range(3)]
        error = events[0]  # before session.created, as recorded
        assert error["error"] == golden["error"]  # with the echo, unlike the read loop
        assert [e["type"] for e in events] == ["error", "session.created", "session.updated"]
        await send(ws, {"type": "session.close"})
        closed = await recv_until(ws, "session.closed")
        assert closed[-1]["reason"] == "client_close"
        assert await closed_code(ws) == (1000, "client_close")


async def test_first_frame_event_ack_is_unknown_event() -> None:
    async with running() as server:
        ws = await dial(ws_url(server))
        await send(ws, {"type": "session.event_ack", "server_event_seq": 0, "event_id": "evt_a"})
        events = [await recv(ws) for _ in range(3)]
        error = events[0]
        assert [e["type"] for e in events] == ["error", "session.created", "session.updated"]
        assert error["error"]["code"] == "unknown_event"
        assert error["error"]["event_id"] == "evt_a"
        await ws.close()


# -- read loop ------------------------------------------------------------------------------


async def test_read_loop_rejections_match_bad_input(engine_kind: str, load_wire: Wire) -> None:
    golden = [f for f in golden_frames(load_wire, "bad_input") if f["type"] == "error"]
    by_code: dict[str, list[dict[str, Any]]] = {}
    for frame in golden:
        by_code.setdefault(frame["error"]["code"], []).append(frame)
    async with running(engine_kind) as server:
        ws, _, _ = await open_session(server)
        await ws.send("{not json")
        await ws.send("[1, 2, 3]")
        await send(ws, {"event_id": "evt_no_type"})
        await send(ws, {"type": "response.frobnicate", "event_id": "evt_u"})
        await send(ws, {"type": "session.event_ack", "server_event_seq": -1, "event_id": "evt_n"})
        await send(
            ws, {"type": "session.event_ack", "server_event_seq": 999999, "event_id": "evt_h"}
        )
        await send(
            ws,
            {
                "type": "session.resume",
                "session_id": "duplex-0",
                "resume_token": "x",
                "event_id": "evt_r",
            },
        )
        errors = [await recv(ws) for _ in range(7)]
        for event in errors:
            assert event["type"] == "error" and "server_event_seq" not in event
        got = [
            (e["error"]["code"], e["error"]["message"], e["error"].get("event_id")) for e in errors
        ]
        assert got == [
            ("invalid_json", "Invalid JSON event", None),
            ("bad_event", "Duplex event must be a JSON object with a type", None),
            ("bad_event", "Duplex event must be a JSON object with a type", None),
            ("unknown_event", "Unknown duplex event type: response.frobnicate", "evt_u"),
            (
                "invalid_event_ack",
                "session.event_ack requires a non-negative server_event_seq",
                "evt_n",
            ),
            (
                "invalid_event_ack",
                "acknowledged sequence 999999 is newer than journal head 1",
                "evt_h",
            ),
            (
                "unsupported_session_resume",
                "session.resume must be the first message of a new connection",
                "evt_r",
            ),
        ]
        for event, (code, message, _) in zip(errors, got, strict=True):
            reference = by_code[code].pop(0)
            assert error_keys(event) == error_keys(reference)
            assert reference["error"]["message"] == message
        # the socket stays open and the session still works
        await send(ws, {"type": "session.heartbeat"})
        assert (await recv_until(ws, "session.heartbeat_ack"))[-1]["server_event_seq"] == 2
        await ws.close()


async def test_translator_error_is_unsequenced_with_echo() -> None:
    async with running() as server:
        ws, _, _ = await open_session(server)
        await send(ws, {"type": "conversation.item.retrieve", "event_id": "evt_t"})
        error = await recv(ws)
        assert error["error"] == {
            "type": "invalid_request_error",
            "code": "missing_item_id",
            "message": "conversation.item.retrieve requires item_id",
            "event_id": "evt_t",
        }
        assert "server_event_seq" not in error
        await ws.close()


async def test_client_aliases_reach_the_engine_canonical() -> None:
    async with running() as server:
        ws, _, _ = await open_session(server)
        await send(ws, {"type": "close"})
        closed = await recv_until(ws, "session.closed")
        assert closed[-1]["reason"] == "client_close"
        assert await closed_code(ws) == (1000, "client_close")


async def test_input_commit_alias_answers_the_turn_by_default() -> None:
    """``input.commit`` defaults to response_create true (docs/protocol.md §3.2), unlike the
    canonical ``input_audio_buffer.commit``: speech then a bare alias commit gets a response."""
    import base64

    import numpy as np

    tone = (0.3 * np.sin(2 * np.pi * 300 * np.arange(8000) / 16000) * 32767).astype("<i2")
    audio = base64.b64encode(tone.tobytes()).decode()
    async with running("real", ttfa_ms=20.0, realtime_factor=0.0, reply_seconds=0.2) as server:
        ws, _, _ = await open_session(server)
        await send(ws, {"type": "input_audio_buffer.append", "audio": audio})
        await send(ws, {"type": "input.commit"})
        seen = await recv_until(ws, "response.done", timeout=10)
        types = [e["type"] for e in seen]
        assert "input_audio_buffer.committed" in types
        assert "response.created" in types
        await ws.close()


async def test_event_too_large_keeps_socket_open(engine_kind: str, load_wire: Wire) -> None:
    golden = next(
        f
        for f in golden_frames(load_wire, "bad_input")
        if f["type"] == "error" and f["error"]["code"] == "event_too_large"
    )
    async with running(engine_kind) as server:
        ws, _, _ = await open_session(server)
        head = '{"type":"input_audio_buffer.append","event_id":"evt_big","audio":"'
        frame = head + "A" * (15 * MiB + 1 - len(head) - 2) + '"}'
        assert len(frame.encode()) == 15 * MiB + 1
        await ws.send(frame)
        error = await recv(ws, timeout=20)
        assert error["error"] == golden["error"]  # no echo
        assert "server_event_seq" not in error
        await send(ws, {"type": "session.heartbeat"})
        assert (await recv_until(ws, "session.heartbeat_ack"))[-1][
            "type"
        ] == "session.heartbeat_ack"
        await ws.close()


async def test_frame_over_16_mib_is_closed_1009() -> None:
    async with running() as server:
        ws, _, _ = await open_session(server)
        await ws.send("x" * (16 * MiB + 1))
        code, _ = await closed_code(ws, timeout=20)
        assert code == 1009


async def test_close_sends_closed_last_then_1000_with_reason(
    engine_kind: str, load_wire: Wire
) -> None:
    golden = golden_frames(load_wire, "admission_reject")[-1]
    async with running(engine_kind) as server:
        ws, created, _ = await open_session(server)
        await send(ws, {"type": "session.close", "event_id": ids.client_event_id()})
        events = await recv_until(ws, "session.closed")
        closed = events[-1]
        assert sorted(closed) == sorted(golden)
        assert closed["event"] == {} and closed["reason"] == "client_close"
        assert closed["session_id"] == created["session"]["id"]
        assert await closed_code(ws) == (1000, "client_close")
        assert server.registry.slots_held == 0


async def test_custom_close_reason_is_the_close_text() -> None:
    async with running() as server:
        ws, _, _ = await open_session(server)
        await send(ws, {"type": "session.close", "reason": "bye now"})
        assert (await recv_until(ws, "session.closed"))[-1]["reason"] == "bye now"
        assert await closed_code(ws) == (1000, "bye now")


async def test_receive_timeout_drops_socket_without_event_and_session_survives(
    engine_kind: str,
) -> None:
    async with running(engine_kind) as server:
        ws, created, _ = await open_session(server, {**OPEN_SESSION, "idle_timeout_s": 0.3})
        await send(ws, {"type": "session.heartbeat"})
        await recv(ws)
        assert await closed_code(ws) == (1006, "")  # no event, no close frame
        managed = server.registry.get(created["session"]["id"])
        assert managed is not None and managed.attachment is None and not managed.finished
        ws2 = await dial(ws_url(server))
        await send(
            ws2,
            {
                "type": "session.resume",
                "session_id": created["session"]["id"],
                "resume_token": created["resume_token"],
                "last_received_server_event_seq": 2,
            },
        )
        assert (await recv(ws2))["type"] == "session.resumed"
        await ws2.close()


async def test_client_drop_detaches_into_grace() -> None:
    async with running() as server:
        ws, created, _ = await open_session(server)
        abort_client(ws)
        managed = server.registry.get(created["session"]["id"])
        assert managed is not None
        for _ in range(100):
            if managed.attachment is None:
                break
            await asyncio.sleep(0.01)
        assert managed.attachment is None and managed.detached_at is not None
        assert server.registry.slots_held == 1


# -- faults ---------------------------------------------------------------------------------


async def test_drop_after_fault_aborts_after_n_events() -> None:
    async with running(faults=[Fault("drop-after", 3)]) as server:
        ws, created, _ = await open_session(server)  # created + updated = 2 events
        await send(ws, {"type": "session.heartbeat"})
        await send(ws, {"type": "session.heartbeat"})
        ack = await recv(ws)
        assert ack["type"] == "session.heartbeat_ack"
        assert await closed_code(ws) == (1006, "")
        managed = server.registry.get(created["session"]["id"])
        assert managed is not None and not managed.finished  # a disconnect, not a close


async def _open_and_vanish(server_port: int) -> None:
    """Send session.update and drop TCP at once, before session.created can be written."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server_port)
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    writer.write(
        (
            f"GET /v1/realtime?duplex=1&autostart=0 HTTP/1.1\r\nHost: 127.0.0.1:{server_port}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")
    payload = json.dumps({"type": "session.update", "session": OPEN_SESSION}).encode()
    mask = b"\x01\x02\x03\x04"
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    header = bytes([0x81, 0x80 | 126]) + len(payload).to_bytes(2, "big") + mask
    sock = writer.get_extra_info("socket")
    import socket as _socket
    import struct

    sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.write(header + masked)
    writer.transport.abort()  # RST right behind the frame


async def _after_vanish(**changes: Any) -> tuple[int, list[StubEngine]]:
    """(slots held, engine sessions made) shortly after a client vanished mid-open."""
    made: list[StubEngine] = []
    async with running(engine=stub_engine(made), **changes) as server:
        await _open_and_vanish(server.port)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if made and (made[0].aborted or server.registry.sessions()[0].attachment is None):
                break
        await asyncio.sleep(0.1)
        return server.registry.slots_held, made


async def test_undelivered_created_frees_slot_at_once() -> None:
    held, made = await _after_vanish(disconnect_grace_s=30.0)
    assert len(made) == 1 and made[0].aborted and not made[0].started
    assert held == 0


async def test_leak_undelivered_created_fault_holds_slot_for_grace() -> None:
    held, made = await _after_vanish(
        disconnect_grace_s=0.3, faults=[Fault("leak-undelivered-created")]
    )
    assert len(made) == 1 and made[0].started and not made[0].aborted
    assert held == 1


async def test_leaked_session_expires_after_grace() -> None:
    made: list[StubEngine] = []
    async with running(
        engine=stub_engine(made), disconnect_grace_s=0.2, faults=[Fault("leak-undelivered-created")]
    ) as server:
        await _open_and_vanish(server.port)
        for _ in range(300):
            await asyncio.sleep(0.01)
            if made and made[0].closed:
                break
        assert server.registry.slots_held == 0
        assert made[0].closed and not made[0].aborted  # expired, not aborted


# -- dialect G1 -----------------------------------------------------------------------------


async def test_g1_spells_beta_audio_names() -> None:
    async with running(dialect=Dialect.G1) as server:
        ws, _, _ = await open_session(server)
        await send(ws, {"type": "response.create", "response": {"metadata": {"stub_events": 1}}})
        delta = await recv(ws)
        assert delta["type"] == "response.audio.delta"
        assert delta["server_event_seq"] == 2
        await ws.close()


async def test_g1_handshake_errors_are_flat() -> None:
    async with running(dialect=Dialect.G1, config_timeout_s=0.3) as server:
        ws = await dial(ws_url(server))
        assert await recv(ws) == {
            "type": "error",
            "error": "Timeout waiting for session.update",
            "code": "config_timeout",
        }
        assert await closed_code(ws) == (1006, "")
        ws = await dial(ws_url(server))
        await ws.send("{nope")
        assert (await recv(ws))["code"] == "invalid_json"


async def test_g1_post_handshake_errors_keep_realtime_shape() -> None:
    async with running(dialect=Dialect.G1) as server:
        ws, _, _ = await open_session(server)
        await send(ws, {"type": "response.frobnicate", "event_id": "evt_g1"})
        error = await recv(ws)
        assert error["error"]["code"] == "unknown_event"
        await ws.close()


async def test_engine_failing_to_start_frees_slot_and_reports_engine_error() -> None:
    base = stub_engine()

    def create(session_id: str, session_obj: dict[str, Any] | None, emit: Emit) -> StubEngine:
        engine = base.create(session_id, session_obj, emit)
        assert isinstance(engine, StubEngine)

        def broken_start() -> None:
            raise RuntimeError("model failed to load")

        engine.start = broken_start  # type: ignore[method-assign]
        return engine

    async with running(engine=Engine(base.validate_open, create)) as server:
        ws = await dial(ws_url(server))
        await send(ws, {"type": "session.update", "session": OPEN_SESSION})
        events = [await recv(ws), await recv(ws)]
        assert events[0]["type"] == "session.created"
        assert events[1]["error"]["code"] == "engine_error"
        assert await closed_code(ws) == (1006, "")
        assert server.registry.slots_held == 0
