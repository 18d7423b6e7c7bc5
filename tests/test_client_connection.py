"""DuplexConnection over real loopback sockets, against the real vLLM-Omni 0.30.0 peer and
against duplexctl's own reference server (same tests, same expectations).

The peer runs the released serving stack with a fake model that answers every committed turn
with 2.0 s of tone in 200 ms chunks; the reference server is configured alike (turn lane,
200 ms chunks, two admission slots).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from duplexctl.audio import pcm
from duplexctl.client import (
    AdmissionRejected,
    ConnectionLost,
    ConnectionOptions,
    DuplexConnection,
    HandshakeFailed,
    OpenFailed,
    ResumeFailed,
    connect,
)
from duplexctl.errors import ServerUnreachable
from duplexctl.protocol.client_state import (
    AudioDelta,
    ClientSession,
    ErrorReceived,
    Happening,
    PlaybackAcknowledged,
    ResponseDone,
    SessionResumed,
)
from duplexctl.protocol.settings import SessionSettings

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(90)]

SETTINGS = SessionSettings(instructions="You are a helpful voice assistant.")
LIMIT = 2


@pytest.fixture(params=[pytest.param("peer", marks=pytest.mark.peer), "embedded"])
async def server_url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A server with LIMIT admission slots: the vLLM-Omni peer, then the reference server."""
    if request.param == "peer":
        start = request.getfixturevalue("peer")
        yield start("--max-sessions", str(LIMIT)).url
        return
    from duplexctl.server.config import ServerConfig
    from duplexctl.server.embedded import embedded_server

    config = ServerConfig(model_profile="turn", max_sessions=LIMIT, chunk_ms=200)
    async with embedded_server(config) as url:
        yield url


def tone_chunks(seconds: float = 1.0, chunk_ms: int = 100) -> list[bytes]:
    n = int(16000 * seconds)
    t = np.arange(n) / 16000
    samples = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    per = 16 * chunk_ms
    return [pcm.float_to_pcm16(samples[i : i + per]) for i in range(0, n, per)]


async def speak_and_commit(conn: DuplexConnection) -> None:
    cs = conn.session
    for k, chunk in enumerate(tone_chunks()):
        await conn.send(
            cs.append(chunk, audio_start_ms=100 * k, audio_end_ms=100 * (k + 1), duration_ms=100)
        )
        await asyncio.sleep(0.01)
    await conn.send(cs.commit())
    await conn.send(cs.response_create())


def is_done(h: Happening) -> bool:
    return isinstance(h, ResponseDone)


def record_errors(conn: DuplexConnection) -> list[ErrorReceived]:
    errors: list[ErrorReceived] = []
    conn.add_listener(lambda h: errors.append(h) if isinstance(h, ErrorReceived) else None)
    return errors


@pytest.mark.slow
async def test_open_turn_close(server_url: str) -> None:
    options = ConnectionOptions(heartbeat_s=0.3, ack_interval_s=0.1)
    async with connect(server_url, SETTINGS, options=options) as conn:
        errors = record_errors(conn)
        t = conn.timings
        assert t.connect_ms is not None and t.connect_ms > 0
        assert t.handshake_ms is not None and t.handshake_ms > 0
        assert conn.session.session_id and conn.session.resume_token
        await asyncio.sleep(0.8)  # idle: heartbeats go out
        assert t.heartbeat_rtts_ms and all(rtt > 0 for rtt in t.heartbeat_rtts_ms)
        await speak_and_commit(conn)
        done = await conn.wait_for(is_done, 20)
        assert isinstance(done, ResponseDone)
        track = done.track
        assert (track.status, track.reason) == ("completed", "stop")
        assert track.audio_ms == pytest.approx(2000.0)
        assert track.audio_bytes == 2 * 24000 * 2  # 2 s of 24 kHz PCM16, nothing cut
        assert track.created_ns < track.first_audio_ns <= track.last_audio_ns <= track.done_ns
        await conn.ack_playback(done.response_id, track.audio_ms)
        ack = await conn.wait_for(lambda h: isinstance(h, PlaybackAcknowledged), 5)
        assert isinstance(ack, PlaybackAcknowledged) and ack.history_committed
        await asyncio.sleep(0.3)  # let a batched event_ack go out
        assert conn.session.acked_seq > 0
    assert conn.session.closed and conn.session.close_reason == "client_close"
    assert t.close_ms is not None and t.close_ms > 0
    assert errors == []  # event_acks and heartbeats were all well-formed
    assert conn.session.checker.violations == []
    rest = [h async for h in conn]  # the stream ends after session.closed
    assert rest[-1].type == "session.closed" and await conn.next() is None


async def test_admission_rejection_reports_limit(server_url: str) -> None:
    async with connect(server_url, SETTINGS) as first, connect(server_url, SETTINGS):
        with pytest.raises(AdmissionRejected) as caught:
            await DuplexConnection.open(server_url, SETTINGS, timeout=10)
        rejected = caught.value
        assert isinstance(rejected, ServerUnreachable) and rejected.exit_code == 3
        assert rejected.limit == LIMIT and rejected.admission == "rejected_capacity"
        assert rejected.time_to_reject_ms is not None and rejected.time_to_reject_ms >= 0
        assert f"limit {LIMIT}" in str(rejected)
        await first.close()
        # the slot is free as soon as session.closed arrived
        async with connect(server_url, SETTINGS, timeout=10) as again:
            assert again.session.created


async def test_drop_and_resume_without_gaps_or_duplicates(server_url: str) -> None:
    options = ConnectionOptions(auto_resume=False)
    async with connect(server_url, SETTINGS, options=options) as conn:
        await speak_and_commit(conn)
        deltas = 0
        while deltas < 2:
            h = await conn.next(timeout=20)
            deltas += isinstance(h, AudioDelta)
        t_drop = await conn.drop()
        assert not conn.connected
        await asyncio.sleep(0.5)  # the server keeps generating into its journal
        record = await conn.resume()
        assert record.outcome == "resumed" and record.attempts == 1 and not record.automatic
        assert record.t_drop_ns == t_drop and record.resume_ms is not None
        assert record.resume_ms >= 500 and record.resume_handshake_ms is not None
        assert record.reconnect_ms is not None and record.reconnect_ms <= record.resume_ms
        assert conn.session.attachment_generation == 2
        done = await conn.wait_for(is_done, 20)
        assert isinstance(done, ResponseDone) and done.status == "completed"
        assert done.track.audio_ms == pytest.approx(2000.0)
        assert done.track.audio_deltas == 10  # replay + live: every chunk exactly once
        assert conn.session.seq_gaps == 0 and conn.session.duplicates_dropped == 0
    assert conn.session.closed and conn.session.checker.violations == []


async def test_unexpected_loss_resumes_automatically(server_url: str) -> None:
    async with connect(server_url, SETTINGS) as conn:
        first_token = conn.session.resume_token
        await conn.drop(auto_resume=True)
        lost = await conn.wait_for(lambda h: isinstance(h, ConnectionLost), 5)
        assert isinstance(lost, ConnectionLost) and lost.resuming
        await conn.wait_for(lambda h: isinstance(h, SessionResumed), 15)
        [record] = conn.timings.resumes
        assert record.automatic and record.outcome == "resumed"
        assert conn.session.resume_token != first_token  # rotated
        sent = await conn.heartbeat()  # the new socket works
        assert sent > 0
    assert conn.session.closed and conn.session.checker.violations == []


async def test_fatal_resume_codes_stop_retrying(server_url: str) -> None:
    options = ConnectionOptions(resume_attempts=5, backoff_min_s=0.05)
    # 1. a closed session: session_resume_expired
    async with connect(server_url, SETTINGS) as conn:
        sid, token, seq = conn.session.session_id, conn.session.resume_token, conn.session.last_seq
    assert sid and token
    with pytest.raises(ResumeFailed) as caught:
        await DuplexConnection.attach(
            server_url, ClientSession.resuming(sid, token, seq), options=options
        )
    assert caught.value.fatal and caught.value.record.attempts == 1
    assert caught.value.record.outcome == "session_resume_expired"
    # 2. a live, dropped session resumed with a wrong token: invalid_resume_token
    async with connect(server_url, SETTINGS, options=ConnectionOptions(auto_resume=False)) as conn:
        await conn.drop()
        intruder = ClientSession.resuming(conn.session.session_id or "", "x" * 43, 0)
        with pytest.raises(ResumeFailed) as caught:
            await DuplexConnection.attach(server_url, intruder, options=options)
        assert caught.value.fatal and caught.value.record.attempts == 1
        assert caught.value.record.outcome == "invalid_resume_token"
        # the failed attempt did not consume the real token
        record = await conn.resume()
        assert record.outcome == "resumed"
    assert conn.session.closed


async def test_close_on_cancellation_frees_the_slot(server_url: str) -> None:
    holder: dict[str, Any] = {}

    async def hold() -> None:
        async with connect(server_url, SETTINGS) as conn:
            holder["conn"] = conn
            await asyncio.sleep(3600)

    task = asyncio.create_task(hold())
    while "conn" not in holder:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    conn = holder["conn"]
    assert conn.session.closed and conn.timings.close_ms is not None
    async with connect(server_url, SETTINGS) as a, connect(server_url, SETTINGS) as b:
        assert a.session.created and b.session.created


async def test_dropped_session_is_closed_on_exit(server_url: str) -> None:
    """close() reattaches a dropped session so its slot is not held for the grace period."""
    async with connect(server_url, SETTINGS, options=ConnectionOptions(auto_resume=False)) as conn:
        await conn.drop()
    assert conn.session.closed and conn.timings.resumes[-1].outcome == "resumed"
    async with connect(server_url, SETTINGS) as a, connect(server_url, SETTINGS) as b:
        assert a.session.created and b.session.created


async def test_handshake_failure_is_typed(server_url: str) -> None:
    bad = SETTINGS.with_extra({"turn_detection": {"type": "semantic_vad"}})
    with pytest.raises(HandshakeFailed) as caught:
        await DuplexConnection.open(server_url, bad, timeout=10)
    assert caught.value.error is not None
    assert caught.value.error.code == "invalid_session_config"
    assert caught.value.admission == "rejected_other"


async def test_unreachable_server_is_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(OpenFailed) as caught:
        await DuplexConnection.open(
            f"ws://127.0.0.1:{port}/v1/realtime?duplex=1", SETTINGS, timeout=5
        )
    assert caught.value.admission == "transport_error" and caught.value.exit_code == 3
    assert caught.value.cause == "refused"
    assert "\n" not in str(caught.value) and "nothing is listening" in str(caught.value)


def test_autostart_is_forced_off() -> None:
    from duplexctl.client.connection import with_autostart_off

    assert with_autostart_off("ws://h:1/v1/realtime?duplex=1&model=m").endswith(
        "duplex=1&model=m&autostart=0"
    )
    assert (
        with_autostart_off("ws://h:1/v1/realtime?autostart=1") == "ws://h:1/v1/realtime?autostart=1"
    )
    assert with_autostart_off("ws://h:1/v1/duplex") == "ws://h:1/v1/duplex?autostart=0"
