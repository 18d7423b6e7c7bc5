"""The real vLLM-Omni peer (the kit of docs/testing.md): started on a free loopback port per
argument set, polled on ``/health``, shared by every test asking for the same arguments, and
stopped once the tests that use it are done (``PeerPool.stop``, from ``tests/conftest.py``)."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from support.paths import ROOT, free_port, with_parent

PEER_KIT = Path(os.environ.get("DUPLEXCTL_PEER_KIT", ROOT.parent / "shared" / "peer"))
PEER_VENV = Path(
    os.environ.get(
        "DUPLEXCTL_PEER_VENV",
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "duplexctl-peer-venv",
    )
)
#: the peer's start-up takes ~20 s (its stack imports vLLM); a loaded machine gets 6x that
HEALTHY_WITHIN_S = 120.0


@dataclass
class PeerServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime?duplex=1"


def peer_missing() -> str | None:
    """Why the peer cannot run here, or None."""
    if (PEER_VENV / "bin" / "python").exists() and (PEER_KIT / "serve_peer.py").exists():
        return None
    return f"vLLM-Omni peer environment not built ({PEER_VENV}); run {PEER_KIT}/setup.sh"


@dataclass
class PeerPool:
    """One running peer per argument set; its logs in ``log_dir``."""

    log_dir: Path
    running: dict[tuple[str, ...], PeerServer] = field(default_factory=dict)
    logs: list[IO[bytes]] = field(default_factory=list)

    def start(self, *args: str) -> PeerServer:
        if args in self.running:
            return self.running[args]
        port = free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"peer-{port}.log", "wb")  # noqa: SIM115
        self.logs.append(log)
        proc = subprocess.Popen(
            with_parent([str(PEER_VENV / "bin" / "python"), "serve_peer.py", str(port), *args]),
            cwd=PEER_KIT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + HEALTHY_WITHIN_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"peer exited with {proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            proc.kill()
            raise RuntimeError(f"peer did not become healthy within {HEALTHY_WITHIN_S:.0f} s")
        server = PeerServer(port, proc)
        self.running[args] = server
        return server

    def stop(self) -> None:
        """Stop every running peer (a later :meth:`start` starts its own again)."""
        running, self.running = list(self.running.values()), {}
        logs, self.logs = self.logs, []
        for server in running:
            server.process.terminate()
        for server in running:
            try:
                server.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.process.kill()
        for log in logs:
            log.close()
