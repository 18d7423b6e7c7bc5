"""The websockets server: routes, ``/health`` and ``/ready``, start/stop and ``run``.

Routes follow vLLM-Omni (docs/protocol.md §1.1): ``/v1/realtime`` and its alias ``/v1/duplex`` speak
the duplex protocol; ``/health`` answers like 0.30.0, ``/v1/models`` like vLLM's OpenAI server
(what a load report pins as the server's identity); ``/ready`` is answered too because
other versions (and orchestrators) probe it. ``max_size`` is the ASGI server's 16 MiB message
limit: a larger frame is closed with 1009 by the websocket layer before the handler sees it,
exactly the frame-size ladder observed on the real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import signal
import socket
import sys
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from types import TracebackType
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from duplexctl.errors import BadInput
from duplexctl.protocol import codec
from duplexctl.server.config import ServerConfig
from duplexctl.server.handler import handle
from duplexctl.server.metrics import ServerMetrics
from duplexctl.server.registry import Engine, Registry, SessionLog, default_engine

WS_PATHS = frozenset({"/v1/realtime", "/v1/duplex"})


def _json_response(status: HTTPStatus, body: dict[str, Any]) -> Response:
    payload = codec.dumps_bytes(body)
    headers = Headers(
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(payload))),
            ("Connection", "close"),
        ]
    )
    return Response(status.value, status.phrase, headers, payload)


def _metrics_response(metrics: ServerMetrics, request: Request) -> Response:
    """``GET /metrics`` in the text format, or OpenMetrics when the scraper asks for it."""
    body, content_type = metrics.exposition(request.headers.get("Accept"))
    headers = Headers(
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ]
    )
    return Response(HTTPStatus.OK.value, HTTPStatus.OK.phrase, headers, body)


def models_answer(config: ServerConfig) -> dict[str, Any]:
    """``GET /v1/models`` as vLLM's OpenAI server answers it (``ModelList``): the one model
    served, owned by "vllm", with its context length."""
    return {
        "object": "list",
        "data": [
            {
                "id": config.served_model,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "vllm",
                "root": config.served_model,
                "parent": None,
                "max_model_len": 4096,
                "permission": [],
            }
        ],
    }


def _process_request(
    connection: ServerConnection,
    request: Request,
    *,
    metrics: ServerMetrics | None = None,
    config: ServerConfig | None = None,
) -> Response | None:
    """Answer plain HTTP routes; let only the two duplex paths upgrade."""
    path = request.path.split("?", 1)[0]
    if path == "/metrics" and metrics is not None:
        return _metrics_response(metrics, request)
    if path == "/v1/models" and config is not None:
        return _json_response(HTTPStatus.OK, models_answer(config))
    if path == "/health":
        return _json_response(HTTPStatus.OK, {"status": "healthy"})
    if path == "/ready":
        return _json_response(HTTPStatus.OK, {"status": "ready"})
    if path not in WS_PATHS:
        return _json_response(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})
    return None


@dataclass
class RunningServer:
    """A started reference server; ``close()`` ends every session and stops listening."""

    host: str
    port: int
    registry: Registry
    _server: Server = field(repr=False)
    _closed: bool = field(default=False, repr=False)
    metrics: ServerMetrics | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The duplex URL a client connects to (loopback)."""
        return f"ws://127.0.0.1:{self.port}/v1/realtime?duplex=1"

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.registry.shutdown()
        self._server.close()
        await self._server.wait_closed()

    async def __aenter__(self) -> RunningServer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def start_server(
    config: ServerConfig,
    *,
    engine: Engine | None = None,
    session_log: SessionLog | None = None,
) -> RunningServer:
    """Start listening on ``config.host:config.port`` (port 0 picks a free one).

    ``engine`` replaces the session engine (tests use a small double); by default the real
    ``duplexctl.server.session`` engine is bound. ``session_log`` is told of every session
    opened, resumed, closed or rejected (``serve`` prints one line each).
    """
    registry = Registry(config, engine if engine is not None else default_engine(config))
    registry.session_log = session_log
    metrics = ServerMetrics(config, registry, registry.engine.gpu)
    server = await serve(
        partial(handle, registry=registry),
        config.host,
        config.port,
        compression=None,
        max_size=config.ws_max_size,
        process_request=partial(_process_request, metrics=metrics, config=config),
        # the read loop owns receive timeouts; keepalive pings are the library default
    )
    registry.start_reaper()
    sockname = next(iter(server.sockets)).getsockname()
    return RunningServer(
        host=str(sockname[0]),
        port=int(sockname[1]),
        registry=registry,
        _server=server,
        metrics=metrics,
    )


def bind_problem(config: ServerConfig, exc: OSError) -> BadInput:
    """Why ``serve`` could not listen, as one line naming ``--host`` / ``--port`` and the way
    out, instead of the socket layer's traceback."""
    where = f"{config.host}:{config.port}"
    if exc.errno == errno.EADDRINUSE:
        return BadInput(
            f"--port {config.port}: address already in use on {config.host} (another server "
            "listens there; --port 0 picks a free port)"
        )
    if exc.errno == errno.EACCES:
        return BadInput(
            f"--port {config.port}: permission denied on {config.host} (ports below 1024 need "
            "privileges; --port 0 picks a free port)"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return BadInput(
            f"--host {config.host}: not an address of this machine (127.0.0.1: loopback only; "
            "0.0.0.0: every interface)"
        )
    if isinstance(exc, socket.gaierror):
        return BadInput(f"--host {config.host}: unknown host name")
    return BadInput(f"cannot listen on {where}: {exc.strerror or exc}")


def binding_note(host: str) -> str | None:
    """The line ``serve`` prints when it listens beyond loopback (None on loopback)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return None
    return (
        f"note: --host {host} is beyond loopback: anyone who can reach this machine can open "
        "sessions (no authentication, no TLS)"
    )


async def _serve_until_signal(config: ServerConfig, session_log: SessionLog | None) -> None:
    try:
        server = await start_server(config, session_log=session_log)
    except OSError as exc:
        raise bind_problem(config, exc) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    print(
        f"duplexctl serve: listening on ws://{server.host}:{server.port}/v1/realtime?duplex=1 "
        f"(max_sessions={config.max_sessions}, dialect={config.dialect.value})",
        flush=True,
    )
    note = binding_note(config.host)
    if note is not None:
        print(f"duplexctl serve: {note}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()


def print_sessions(line: str) -> None:
    """``serve``'s session log: one line on stdout per session event (--quiet: none)."""
    print(f"duplexctl serve: {line}", flush=True)


def run(config: ServerConfig, *, session_log: SessionLog | None = print_sessions) -> None:
    """Serve until Ctrl-C / SIGTERM (blocking); every session is closed on the way out.
    BadInput (one line, exit 2) when it cannot listen."""
    main: Awaitable[None] = _serve_until_signal(config, session_log)
    try:
        import uvloop  # optional: ~20 % less CPU and ms-level round trips (docs/testing.md)
    except ImportError:
        runner: Any = asyncio.run
    else:
        runner = uvloop.run if sys.platform != "win32" else asyncio.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(main)
