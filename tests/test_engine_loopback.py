"""The engine behind the real transport: one voice turn, a refused open, and a VAD barge-in
over loopback websockets (``start_server`` with the default engine)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from support.engine import OPEN_TURN, pcm16
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from duplexctl.protocol import codec
from duplexctl.server.app import start_server
from duplexctl.server.config import ServerConfig

pytestmark = pytest.mark.realtime

CONFIG = ServerConfig(
    port=0, model_profile="turn", chunk_ms=200, ttfa_ms=100.0, realtime_factor=0.0, seed=1
)


async def recv_until(
    ws: ClientConnection, etype: str, timeout: float = 10.0
) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            event = codec.loads(await ws.recv())
            seen.append(event)
            if event["type"] == etype:
                return seen


async def test_voice_turn_over_loopback() -> None:
    async with await start_server(CONFIG) as server:
        url = f"ws://127.0.0.1:{server.port}/v1/realtime?duplex=1&autostart=0"
        async with connect(url, compression=None, max_size=None, proxy=None) as ws:
            await ws.send(codec.dumps({"type": "session.update", "session": OPEN_TURN}))
            created = codec.loads(await ws.recv())
            updated = codec.loads(await ws.recv())
            assert created["type"] == "session.created" and "server_event_seq" not in created
            assert updated["server_event_seq"] == 1
            assert created["session"]["capabilities"]["implementation_level"] == "turn_based_duplex"
            for level in (0.0, 0.3, 0.3, 0.3, 0.0):
                await ws.send(
                    codec.dumps(
                        {"type": "input_audio_buffer.append", "audio": pcm16(100, level=level)}
                    )
                )
            await ws.send(
                codec.dumps({"type": "input_audio_buffer.commit", "response_create": True})
            )
            events = await recv_until(ws, "rate_limits.updated")
            types = [e["type"] for e in events]
            assert types[0] == "response.listen" and "input_audio_buffer.speech_started" in types
            assert types.count("response.output_audio.delta") == 10
            seqs = [e["server_event_seq"] for e in events]
            assert seqs == list(range(2, 2 + len(seqs)))
            rid = events[-2]["response_id"]
            await ws.send(
                codec.dumps({"type": "playback.ack", "response_id": rid, "played_ms": 2000})
            )
            ack = (await recv_until(ws, "playback.acknowledged"))[-1]
            assert ack["event"]["history_committed"] is True
            await ws.send(codec.dumps({"type": "session.close"}))
            closed = (await recv_until(ws, "session.closed"))[-1]
            assert closed["reason"] == "client_close" and closed["event"] == {}


async def test_refused_open_over_loopback() -> None:
    async with await start_server(CONFIG) as server:
        url = f"ws://127.0.0.1:{server.port}/v1/realtime?duplex=1&autostart=0"
        async with connect(url, compression=None, proxy=None) as ws:
            bad = {**OPEN_TURN, "extra_body": {"auto_response": True}}
            await ws.send(codec.dumps({"type": "session.update", "session": bad}))
            error = codec.loads(await ws.recv())
            assert error["error"]["code"] == "invalid_duplex_runtime_config"
            try:
                async with asyncio.timeout(5):
                    await ws.recv()
            except ConnectionClosed:
                pass


async def test_native_profile_barge_in_over_loopback() -> None:
    config = replace(
        CONFIG, model_profile="native", chunk_ms=1000, realtime_factor=1.0, reply_seconds=4.0
    )
    session = {
        "turn_detection": {"type": "server_vad", "silence_duration_ms": 300},
        "extra_body": {"auto_response": True},
    }
    async with await start_server(config) as server:
        url = f"ws://127.0.0.1:{server.port}/v1/realtime?duplex=1&autostart=0"
        async with connect(url, compression=None, max_size=None, proxy=None) as ws:
            await ws.send(codec.dumps({"type": "session.update", "session": session}))
            await recv_until(ws, "session.updated")
            for i in range(31):
                level = 0.3 if i < 11 else 0.0
                await ws.send(
                    codec.dumps(
                        {"type": "input_audio_buffer.append", "audio": pcm16(100, level=level)}
                    )
                )
            await recv_until(ws, "response.output_audio.delta")
            for _ in range(3):
                await ws.send(
                    codec.dumps(
                        {"type": "input_audio_buffer.append", "audio": pcm16(100, level=0.3)}
                    )
                )
            done = (await recv_until(ws, "response.done"))[-1]
            assert done["response"]["status_details"]["reason"] == "turn_detected"
            await ws.send(codec.dumps({"type": "session.close"}))
            await recv_until(ws, "session.closed")
