"""Helpers for the load and report tests that run real processes and real sockets.

* :func:`duplexctl_cmd`: the command line of the installed ``duplexctl`` in this interpreter.
* :func:`serve`: ``duplexctl serve`` in a subprocess on a free loopback port (the URL it
  printed), stopped with SIGTERM at the end.
* :func:`saved_load_run`: a short ``duplexctl load`` against the embedded server, written to
  a directory (what ``duplexctl report`` reads).
* :func:`ctrl_c_when`: Ctrl-C a running command once it is ready (or after a bound).
* :func:`serving`: ``serve`` with fast first audio and long replies (the behaviour tests).
* :func:`admitted`, :func:`wait_for`: how many sessions a server admits now; a bounded poll.
* :func:`run_cli_async`: ``duplexctl ARGS`` as a subprocess from async code.
* Hostile peers on loopback for failure causes: a closed port, a plain HTTP server, a
  websocket server that drops the TCP connection right after the upgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import re
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from duplexctl.client.connection import DuplexConnection, OpenFailed
from duplexctl.protocol.settings import SessionSettings
from support.paths import HELLO, ROOT, SHORT, free_port, with_parent

__all__ = ["HELLO", "ROOT", "SHORT", "free_port"]  # re-exported: what the command tests use


def duplexctl_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "duplexctl", *args]


@contextlib.contextmanager
def serve(*args: str, timeout_s: float = 60.0) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``duplexctl serve --port 0 ARGS`` in a subprocess: yields (url, process)."""
    proc = subprocess.Popen(
        with_parent(duplexctl_cmd("serve", "--port", "0", *args)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            found = re.search(r"listening on (ws://\S+)", line)
            if found:
                url = found.group(1)
        assert url is not None, "duplexctl serve did not start"
        # keep reading what it prints, so a chatty server never blocks on a full pipe
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        yield url, proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def saved_load_run(out: Path, *extra: str, duration: str | None = None) -> Path:
    """A short load run against the embedded server, written to ``out``.

    By default the run is bounded by work, not by time: two sessions of one turn each
    (``--count 2``; a turn of the short clip with a 1 s answer takes about 2.5 s), so it
    completes its turns however busy the machine is — a 3 s run once completed none beside
    busy workers, and a run that completes no turn exits 1. ``duration`` runs for that
    long instead, for the tests that need time slices."""
    bound = ["--duration", duration] if duration is not None else ["--count", "2"]
    run = subprocess.run(
        duplexctl_cmd(
            "load",
            SHORT,
            "--sessions",
            "2",
            *bound,
            "--workers",
            "1",
            "--plain",
            "--out",
            str(out),
            "--server-option",
            "reply_seconds=1",
            *extra,
        ),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    return out


def ctrl_c_when(
    proc: subprocess.Popen[str], ready: Callable[[], bool], *, timeout_s: float = 60.0
) -> int:
    """SIGINT ``proc`` once ``ready()`` (polled, or after ``timeout_s``), wait for it to
    finish, and return its exit code; killed if it outlives the bound."""
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode


def closed_port_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    return f"ws://127.0.0.1:{free_port()}/v1/realtime?duplex=1"


class _Plain(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>not a websocket server</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def plain_http_server() -> Iterator[str]:
    """A plain HTTP server on loopback answering 200 to everything (no upgrade)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Plain)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{server.server_address[1]}/v1/realtime?duplex=1"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def background_ws_server(handler: Any, scheme: str = "ws", **options: Any) -> Iterator[str]:
    """A websockets server on loopback, served by its own event loop in a thread."""
    from websockets.asyncio.server import serve as ws_serve

    async def start() -> Any:
        return await ws_serve(handler, "127.0.0.1", 0, **options)

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(start())
    port = next(iter(server.sockets)).getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"{scheme}://127.0.0.1:{port}/v1/realtime?duplex=1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()


async def _abort_after_upgrade(conn: Any) -> None:
    conn.transport.abort()  # no close frame: the client sees the TCP connection go


def drop_after_upgrade_server() -> contextlib.AbstractContextManager[str]:
    """A websocket server that completes the upgrade, then drops the TCP connection."""
    return background_ws_server(_abort_after_upgrade)


async def _hold(conn: Any) -> None:
    await conn.wait_closed()


def self_signed_tls_server(directory: Path) -> contextlib.AbstractContextManager[str]:
    """A TLS websocket server on loopback whose certificate nobody trusts (self-signed)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return background_ws_server(_hold, "wss", ssl=context)


def pids_alive(pids: list[int]) -> list[int]:
    """The pids among ``pids`` that still exist (zombies of other parents count as gone)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def lifeline_child(lifeline: Any, marker: str) -> None:
    """A worker that only holds a lifeline (portable detector only) and records why it ended."""
    lifeline.arm(death_signal=False)

    def lost() -> None:
        Path(marker).write_text(lifeline.reason)

    lifeline.on_lost(lost)
    Path(marker + ".armed").write_text(str(os.getpid()))
    time.sleep(120)  # ended by the lifeline's grace-period exit, not by this sleep


LIFELINE_PARENT = """
import multiprocessing as mp, sys, time
sys.path.insert(0, sys.argv[2])
from support.commands import lifeline_child
from duplexctl.load.lifeline import Lifeline

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    lifeline, keep = Lifeline.to_parent(ctx)
    child = ctx.Process(target=lifeline_child, args=(lifeline, sys.argv[1]))
    child.start()
    lifeline.pipe.close()
    time.sleep(120)  # SIGKILLed by the test long before
"""


@contextlib.contextmanager
def serving(*args: str) -> Iterator[str]:
    """A ``duplexctl serve`` process (fast first audio, long replies) with ``args``."""
    with serve("--ttfa-ms", "100", "--reply-seconds", "4", *args) as (url, _):
        yield url


async def admitted(url: str, n: int, *, auto_response: bool = False) -> int:
    """How many of ``n`` sessions opened now are admitted (all closed again at once);
    ``auto_response``: model-native sessions (the only kind a Nemotron lane opens)."""
    settings = SessionSettings(turn_detection="none", auto_response=auto_response)
    conns: list[DuplexConnection] = []
    try:
        for _ in range(n):
            try:
                conns.append(await DuplexConnection.open(url, settings, timeout=10.0))
            except OpenFailed:
                break
        return len(conns)
    finally:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


def wait_for(predicate, timeout_s: float, every_s: float = 0.25) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return predicate()


async def run_cli_async(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "duplexctl", *args,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
