"""The reference server in-process, for commands run without ``--url``.

docs/architecture.md: "when no URL is given, the command starts the reference server in-process on a free
loopback port" — so every command works on a fresh machine with nothing else running.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from duplexctl.server.app import start_server
from duplexctl.server.config import ServerConfig


@asynccontextmanager
async def embedded_server(config: ServerConfig | None = None) -> AsyncIterator[str]:
    """Run a reference server on 127.0.0.1 with a free port; yields its duplex URL."""
    config = dataclasses.replace(config or ServerConfig(), host="127.0.0.1", port=0)
    server = await start_server(config)
    try:
        yield server.url
    finally:
        await server.close()
