"""``start_server`` / ``embedded_server`` / ``run`` (the ``duplexctl serve`` process)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

from support.paths import with_parent
from support.server import closed_code, dial, open_session, recv_until, send

from duplexctl.server.app import binding_note, start_server
from duplexctl.server.config import ServerConfig
from duplexctl.server.embedded import embedded_server

ROOT = Path(__file__).resolve().parent.parent


async def test_start_server_port_zero_and_async_with() -> None:
    async with await start_server(ServerConfig(port=0)) as server:
        assert server.port > 0 and server.host == "127.0.0.1"
        assert server.url == f"ws://127.0.0.1:{server.port}/v1/realtime?duplex=1"
        ws, _, _ = await open_session(server)
        await ws.close()


async def test_embedded_server_yields_a_working_loopback_url() -> None:
    async with embedded_server(ServerConfig(port=9, host="0.0.0.0")) as url:
        assert re.fullmatch(r"ws://127\.0\.0\.1:\d+/v1/realtime\?duplex=1", url)
        ws = await dial(url + "&autostart=0")
        await send(ws, {"type": "session.heartbeat"})
        events = await recv_until(ws, "session.heartbeat_ack")
        assert events[0]["type"] == "session.created"
        await ws.close()


async def _serve(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *with_parent([sys.executable, "-m", "duplexctl", "serve", "--port", "0"]),
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def test_serve_process_prints_url_logs_sessions_and_closes_them_on_sigterm() -> None:
    """One line per session opened, rejected and closed (issue 35: a server a user starts
    by hand says what its clients do)."""
    proc = await _serve("--max-sessions", "1")
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
        match = re.fullmatch(
            r"duplexctl serve: listening on (ws://127\.0\.0\.1:(\d+)/v1/realtime\?duplex=1) "
            r"\(max_sessions=1, dialect=g2\)",
            line,
        )
        assert match, line
        ws = await dial(match.group(1) + "&autostart=0")
        await send(ws, {"type": "session.heartbeat"})
        await recv_until(ws, "session.heartbeat_ack")
        opened = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
        assert re.fullmatch(r"duplexctl serve: session \S+ opened \(1 of 1 slots held\)\n", opened)
        full = await dial(match.group(1))
        await send(full, {"type": "session.update", "session": {}})
        await recv_until(full, "error")
        rejected = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
        assert "session rejected: resource_exhausted" in rejected and "1 of 1" in rejected
        proc.send_signal(signal.SIGTERM)
        closed = (await recv_until(ws, "session.closed", timeout=10))[-1]
        assert closed["reason"] == "shutdown"
        assert await closed_code(ws) == (1000, "shutdown")
        assert await asyncio.wait_for(proc.wait(), 15) == 0
        rest = (await proc.stdout.read()).decode()
        assert re.search(r"session \S+ closed: shutdown \(0 of 1 slots held\)", rest), rest
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_serve_quiet_logs_no_session() -> None:
    proc = await _serve("--quiet")
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        url = re.search(r"listening on (ws://\S+)", line)
        assert url, line
        ws = await dial(url.group(1) + "&autostart=0")
        await send(ws, {"type": "session.heartbeat"})
        await recv_until(ws, "session.heartbeat_ack")
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
        assert (await proc.stdout.read()).decode() == ""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_serve_says_when_it_binds_beyond_loopback() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert binding_note(host) is None, host
    for host in ("0.0.0.0", "::", "10.1.2.3", "gpu-box"):
        note = binding_note(host)
        assert note is not None and f"--host {host} is beyond loopback" in note
