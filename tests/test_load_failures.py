"""A load test that never connected must not report success (issue 17.1).

``duplexctl load`` as a user runs it, against hostile peers on loopback: nothing listening,
a plain HTTP server, a server that drops the TCP connection right after the upgrade, a TLS
server with a self-signed certificate. Each run must exit 3, print every failed attempt's
cause (summary and report.json), and fail ``--slo rejection_rate<=0.01``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from load_support import (
    ROOT,
    SHORT,
    background_ws_server,
    closed_port_url,
    drop_after_upgrade_server,
    duplexctl_cmd,
    plain_http_server,
    self_signed_tls_server,
)

from duplexctl.client.connection import DuplexConnection, OpenFailed
from duplexctl.load.causes import attempt_cause
from duplexctl.protocol.settings import SessionSettings


@contextlib.contextmanager
def nothing_listening(_tmp: Path) -> Iterator[str]:
    yield closed_port_url()


def plain_http(_tmp: Path) -> contextlib.AbstractContextManager[str]:
    return plain_http_server()


def drops_after_upgrade(_tmp: Path) -> contextlib.AbstractContextManager[str]:
    return drop_after_upgrade_server()


def untrusted_tls(tmp: Path) -> contextlib.AbstractContextManager[str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a self-signed certificate")
    return self_signed_tls_server(tmp)


PEERS: list[tuple[Callable[[Path], contextlib.AbstractContextManager[str]], str]] = [
    (nothing_listening, "refused"),
    (plain_http, "not_websocket"),
    (drops_after_upgrade, "closed_after_upgrade"),
    (untrusted_tls, "tls"),
]


def load(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["load", SHORT, "--url", url, "--sessions", "2", "--duration", "2s", "--plain"]
    return subprocess.run(
        duplexctl_cmd(*args, "--slo", "rejection_rate<=0.01", "--out", str(out), *extra),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.mark.parametrize(("peer", "cause"), PEERS, ids=[cause for _p, cause in PEERS])
def test_never_admitted_exits_3_with_causes_and_fails_the_slo(
    peer: Callable[[Path], contextlib.AbstractContextManager[str]], cause: str, tmp_path: Path
) -> None:
    with peer(tmp_path) as url:
        run = load(url, tmp_path / "run", "--workers", "1")
    assert run.returncode == 3, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    error_lines = [line for line in run.stderr.splitlines() if "no session was admitted" in line]
    assert len(error_lines) == 1 and f"({cause} " in error_lines[0]
    assert "not admitted: " in run.stdout and f"  {cause}: " in run.stdout
    assert "SLO FAIL rejection_rate<=0.01" in run.stdout
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    admission = report["admission"]
    assert admission["attempts"] >= 1
    assert admission["causes"] == {cause: admission["attempts"]}
    assert admission["failed"] == admission["attempts"]
    assert report["scalars"]["rejection_rate"] == 1.0
    assert report["scalars"]["failure_rate"] == 1.0
    assert report["scalars"]["capacity_rejection_rate"] == 0.0
    assert [s["passed"] for s in report["slo"]] == [False]
    sessions = (tmp_path / "run" / "sessions.jsonl").read_text().splitlines()
    assert {json.loads(line)["cause"] for line in sessions} == {cause}


def test_causes_from_worker_processes_are_merged(tmp_path: Path) -> None:
    with drop_after_upgrade_server() as url:
        run = load(url, tmp_path / "run", "--workers", "2", "--json")
    assert run.returncode == 3, run.stderr
    report = json.loads(run.stdout)  # --json: stdout is exactly one document
    admission = report["admission"]
    assert admission["causes"] == {"closed_after_upgrade": admission["attempts"]}
    assert len(report["workers"]) == 2 and admission["attempts"] >= 2
    assert "closed_after_upgrade" in admission["cause_examples"]


# -- the cause of one attempt, over real sockets ------------------------------------------------


async def _open_cause(url: str, timeout: float = 10.0) -> str:
    settings = SessionSettings(turn_detection="none")
    try:
        conn = await DuplexConnection.open(url, settings, timeout=timeout)
    except Exception as exc:  # whatever the client raises, load must name a cause
        return attempt_cause(exc)
    await conn.close()
    return "admitted"


@contextlib.contextmanager
def tcp_server(reply: bytes | None) -> Iterator[str]:
    """A TCP server on loopback that answers every connection with ``reply`` and closes it
    (None: says nothing and keeps it open)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if reply is None:
                held.append(conn)
            else:
                conn.recv(65536)
                conn.sendall(reply)
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{listener.getsockname()[1]}/v1/realtime?duplex=1"
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_bytes_that_are_no_http_are_garbage() -> None:
    with tcp_server(b"\x00\x01 hello, not HTTP at all\r\n\r\n") as url:
        assert asyncio.run(_open_cause(url)) == "garbage"


def test_an_http_error_status_is_http_status() -> None:
    reply = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
    with tcp_server(reply) as url:
        assert asyncio.run(_open_cause(url)) == "http_status"


def test_a_server_that_never_answers_the_upgrade_is_a_timeout() -> None:
    with tcp_server(None) as url:
        assert asyncio.run(_open_cause(url, timeout=1.0)) == "timeout"


def test_a_websocket_that_never_sends_session_created_is_a_handshake_timeout() -> None:
    async def silent(conn: Any) -> None:
        await conn.wait_closed()

    with background_ws_server(silent) as url:
        assert asyncio.run(_open_cause(url, timeout=1.0)) == "handshake_timeout"


def test_the_clients_own_cause_wins() -> None:
    """The contract with OpenFailed.cause (branch client-boundary): when the client states a
    cause, load uses it as it is."""
    exc = OpenFailed("garbled session.created", admission="transport_error")
    exc.cause = "garbage"  # type: ignore[attr-defined]
    assert attempt_cause(exc) == "garbage"
