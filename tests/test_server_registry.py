"""Registry rules without sockets: admission, recovery token, reaper (fake clock)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from support.server import StubEngine, small_config, stub_engine

from duplexctl.protocol import codec
from duplexctl.protocol.errors import ProtocolError
from duplexctl.server.registry import ManagedSession, Registry


class FakeSocket:
    """An Attachment that records what it was given; delivery is settled by the test."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.closed: tuple[int, str] | None = None
        self.pending: list[tuple[Callable[[], None], Callable[[], None]]] = []

    def send_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def send_frame(self, frame: bytes) -> None:
        self.events.append(codec.loads(frame))

    def after_delivery(self, on_reached: Callable[[], None], on_failed: Callable[[], None]) -> None:
        self.pending.append((on_reached, on_failed))

    def close(self, code: int, reason: str) -> None:
        self.closed = (code, reason)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_registry(**changes: Any) -> tuple[Registry, Clock]:
    clock = Clock()
    return Registry(small_config(**changes), stub_engine(), clock=clock), clock


def open_one(registry: Registry, sock: FakeSocket) -> tuple[ManagedSession, str]:
    managed = registry.admit()
    assert managed is not None
    managed.engine = registry.engine.create(managed.id, {}, managed.emit)
    managed.attach_first(sock)
    token = managed.new_token()
    managed.engine.start()
    return managed, token


def test_admit_is_exact_and_slots_come_back() -> None:
    registry, _ = make_registry(max_sessions=2)
    first, second = registry.admit(), registry.admit()
    assert first is not None and second is not None
    assert registry.admit() is None
    first.finish()
    assert registry.slots_held == 1
    assert registry.admit() is not None
    assert registry.admit() is None


def test_terminal_event_frees_slot_and_closes_socket() -> None:
    registry, _ = make_registry()
    sock = FakeSocket()
    managed, _ = open_one(registry, sock)
    managed.emit({"type": "session.closed", "session_id": managed.id, "reason": "bye", "event": {}})
    assert registry.slots_held == 0 and registry.get(managed.id) is None
    assert sock.events[-1]["type"] == "session.closed" and sock.events[-1]["server_event_seq"] == 2
    assert sock.closed == (1000, "bye")
    managed.emit({"type": "session.heartbeat_ack"})  # nothing after the terminal event
    assert sock.events[-1]["type"] == "session.closed"


def test_failed_activation_makes_presented_token_a_one_time_recovery_token() -> None:
    registry, _ = make_registry()
    sock1, sock2, sock3, sock4 = FakeSocket(), FakeSocket(), FakeSocket(), FakeSocket()
    managed, token = open_one(registry, sock1)
    managed.detach(sock1)
    managed.resume(sock2, token, 1)
    assert sock2.events[0]["type"] == "session.resumed"
    rotated = sock2.events[0]["resume_token"]
    _, failed = sock2.pending[0]
    failed()  # session.resumed never reached the client
    assert managed.attachment is None and managed.detached_at is not None
    managed.resume(sock3, token, 1)  # the old token works once more...
    assert sock3.events[0]["attachment_generation"] == 3
    sock3.pending[0][0]()  # ...and this time activation is delivered
    managed.detach(sock3)
    with pytest.raises(ProtocolError) as info:
        managed.resume(sock4, token, 1)  # but not twice
    assert info.value.code == "invalid_resume_token"
    assert rotated != token


def test_recovery_token_refused_while_someone_is_attached() -> None:
    registry, _ = make_registry()
    sock1, sock2, sock3, sock4 = FakeSocket(), FakeSocket(), FakeSocket(), FakeSocket()
    managed, token = open_one(registry, sock1)
    managed.detach(sock1)
    managed.resume(sock2, token, 1)
    sock2.pending[0][1]()
    managed.resume(sock3, sock2.events[0]["resume_token"], 1)  # the rotated token, attached
    with pytest.raises(ProtocolError):
        managed.resume(sock4, token, 1)


def test_refused_resume_changes_nothing() -> None:
    registry, _ = make_registry()
    sock1, sock2 = FakeSocket(), FakeSocket()
    managed, token = open_one(registry, sock1)
    managed.detach(sock1)
    for args in [("wrong", 1), (token, 5)]:
        with pytest.raises(ProtocolError):
            managed.resume(sock2, *args)
    assert managed.generation == 1 and managed.attachment is None and sock2.events == []
    managed.resume(sock2, token, 1)
    assert managed.generation == 2


async def test_reaper_expires_after_grace_only() -> None:
    registry, clock = make_registry(disconnect_grace_s=30.0, idle_ttl_s=None)
    sock = FakeSocket()
    managed, _ = open_one(registry, sock)
    managed.detach(sock)
    clock.now += 29.9
    registry.reap()
    await asyncio.sleep(0)
    assert registry.slots_held == 1
    clock.now += 0.1
    registry.reap()
    for _ in range(5):
        await asyncio.sleep(0)
    assert registry.slots_held == 0
    engine = managed.engine
    assert isinstance(engine, StubEngine) and engine.closed
    assert managed.journal.head == 2  # session.expired was journaled for nobody


async def test_reaper_idle_ttl_counts_from_last_activity_or_attach() -> None:
    registry, clock = make_registry(idle_ttl_s=10.0)
    sock = FakeSocket()
    managed, _ = open_one(registry, sock)
    engine = managed.engine
    assert engine is not None
    engine.last_activity = clock.now = 1_000_000.0  # both clocks are "monotonic" seconds
    managed.attached_at = clock.now
    clock.now += 9.0
    registry.reap()
    await asyncio.sleep(0)
    assert registry.slots_held == 1
    clock.now += 1.0
    registry.reap()
    for _ in range(5):
        await asyncio.sleep(0)
    assert registry.slots_held == 0
    assert sock.events[-1]["type"] == "session.expired"
    assert sock.closed == (1000, "idle_ttl_expired")


async def test_shutdown_closes_every_session() -> None:
    registry, _ = make_registry()
    socks = [FakeSocket() for _ in range(3)]
    for sock in socks:
        open_one(registry, sock)
    await registry.shutdown()
    assert registry.slots_held == 0
    assert [s.closed for s in socks] == [(1000, "shutdown")] * 3
