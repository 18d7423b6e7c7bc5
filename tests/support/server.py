"""Shared helpers for the server transport tests.

* ``StubEngine``: a small private stand-in for the session engine that implements the contract
  of docs/architecture.md (session.updated on start, heartbeat_ack on heartbeat, session.closed
  on close, session.expired on expire) plus two test hooks: ``response.create`` with
  ``response.metadata.stub_events = N`` emits N audio deltas (journal/replay/spelling tests),
  and ``conversation.item.retrieve`` raises a translator-level ProtocolError.
* ``running(kind)``: a server on the stub (``"stub"``) or the real engine (``"real"``).
* Client helpers around ``websockets.asyncio.client.connect`` on loopback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from duplexctl.protocol import codec, ids
from duplexctl.protocol.errors import ProtocolError
from duplexctl.server.app import RunningServer, start_server
from duplexctl.server.config import ServerConfig
from duplexctl.server.registry import Emit, Engine
from support.engine import OPEN_TURN

# the golden transcripts' opening session object (support/engine.py), under a test model name
OPEN_SESSION = {**OPEN_TURN, "model": "test/model"}


def stub_validate_open(session_obj: dict[str, Any] | None) -> None:
    obj = session_obj or {}
    td = obj.get("turn_detection")
    if isinstance(td, dict) and td.get("type") != "server_vad":
        raise ProtocolError("invalid_session_config", "turn_detection.type must be 'server_vad'")
    fmt = obj.get("input_audio_format")
    if fmt is not None and fmt not in ("pcm16", "pcm_f32le", "g711_ulaw", "g711_alaw"):
        raise ProtocolError("invalid_session_config", f"Unsupported input_audio_format: {fmt}")


class StubEngine:
    """Test double of EngineSession (the contract only, no model)."""

    def __init__(self, session_id: str, session_obj: dict[str, Any] | None, emit: Emit) -> None:
        self.id = session_id
        self._obj = dict(session_obj or {})
        self._emit = emit
        self.capabilities: dict[str, Any] = {"supports_session_resume": True}
        idle = self._obj.get("idle_timeout_s")
        self.receive_timeout_s = (
            float(idle) if isinstance(idle, int | float) and idle > 0 else 300.0
        )
        self.last_activity = time.monotonic()
        self.closed = False
        self.started = False
        self.aborted = False

    def session_object(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": "open",
            **{k: v for k, v in self._obj.items() if k != "extra_body"},
        }

    def _out(self, event: dict[str, Any]) -> None:
        self._emit({"type": event.pop("type"), "event_id": ids.server_event_id(), **event})

    def start(self) -> None:
        self.started = True
        self._out({"type": "session.updated", "session": self.session_object()})

    def receive(self, event: dict[str, Any]) -> None:
        self.last_activity = time.monotonic()
        etype = event["type"]
        if etype == "session.heartbeat":
            self._out({"type": "session.heartbeat_ack", "session_id": self.id})
        elif etype == "session.close":
            reason = event.get("reason")
            asyncio.get_running_loop().create_task(
                self.close(reason if isinstance(reason, str) else "client_close")
            )
        elif etype == "conversation.item.retrieve":
            raise ProtocolError("missing_item_id", "conversation.item.retrieve requires item_id")
        elif etype == "response.create":
            meta = (event.get("response") or {}).get("metadata") or {}
            for k in range(int(meta.get("stub_events", 0))):
                self._out(
                    {
                        "type": "response.output_audio.delta",
                        "delta": "AAAA",
                        "k": k,
                        "pad": "x" * int(meta.get("pad", 0)),
                    }
                )

    async def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        await asyncio.sleep(0)
        self._out({"type": "session.closed", "session_id": self.id, "reason": reason, "event": {}})

    async def expire(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self._out({"type": "session.expired", "session_id": self.id, "reason": reason})

    async def abort(self) -> None:
        self.closed = True
        self.aborted = True


def stub_engine(created: list[StubEngine] | None = None) -> Engine:
    """The stub bound as an Engine; ``created`` collects every engine session made."""

    def create(session_id: str, session_obj: dict[str, Any] | None, emit: Emit) -> StubEngine:
        engine = StubEngine(session_id, session_obj, emit)
        if created is not None:
            created.append(engine)
        return engine

    return Engine(validate_open=stub_validate_open, create=create)


def small_config(**changes: Any) -> ServerConfig:
    """A loopback config on a free port with fast timers for tests."""
    base = ServerConfig(host="127.0.0.1", port=0, reaper_interval_s=0.05)
    return replace(base, **changes)


@asynccontextmanager
async def running(
    engine_kind: str = "stub", *, engine: Engine | None = None, **changes: Any
) -> AsyncIterator[RunningServer]:
    """A server for one test; ``engine_kind`` is "stub" or "real" (or pass ``engine``)."""
    if engine is None and engine_kind == "stub":
        engine = stub_engine()
    server = await start_server(small_config(**changes), engine=engine)
    try:
        yield server
    finally:
        await server.close()


def ws_url(
    server: RunningServer, query: str = "duplex=1&autostart=0", path: str = "/v1/realtime"
) -> str:
    return (
        f"ws://127.0.0.1:{server.port}{path}?{query}"
        if query
        else f"ws://127.0.0.1:{server.port}{path}"
    )


async def dial(url: str) -> ClientConnection:
    return await connect(url, compression=None, max_size=None, proxy=None, open_timeout=5)


async def send(ws: ClientConnection, event: dict[str, Any]) -> None:
    await ws.send(codec.dumps(event))


async def recv(ws: ClientConnection, timeout: float = 5.0) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        frame = await ws.recv()
    event = codec.loads(frame)
    assert isinstance(event, dict)
    return event


async def recv_until(
    ws: ClientConnection, etype: str, timeout: float = 5.0
) -> list[dict[str, Any]]:
    """Every event up to and including the first of type ``etype``."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            event = await recv(ws, timeout)
            seen.append(event)
            if event.get("type") == etype:
                return seen


async def closed_code(ws: ClientConnection, timeout: float = 5.0) -> tuple[int, str]:
    """Read until the connection ends; (close code, reason); 1006 = no close frame."""
    async with asyncio.timeout(timeout):
        try:
            while True:
                await ws.recv()
        except ConnectionClosed:
            pass
    rcvd = ws.protocol.close_rcvd
    if rcvd is None:
        return 1006, ""
    return int(rcvd.code), rcvd.reason


async def open_session(
    server: RunningServer,
    session: dict[str, Any] | None = None,
    query: str = "duplex=1&autostart=0",
) -> tuple[ClientConnection, dict[str, Any], dict[str, Any]]:
    """Connect and open; returns (ws, session.created, session.updated)."""
    ws = await dial(ws_url(server, query))
    await send(
        ws,
        {
            "type": "session.update",
            "session": session or OPEN_SESSION,
            "event_id": ids.client_event_id(),
        },
    )
    created = await recv(ws)
    assert created["type"] == "session.created", created
    updated = await recv(ws)
    assert updated["type"] == "session.updated", updated
    return ws, created, updated


def abort_client(ws: ClientConnection) -> None:
    """Drop the client's TCP connection without a close frame."""
    ws.transport.abort()
