"""A real ``duplexctl serve`` process on a free loopback port, for the server benches.

bench/fuzz_server.py and bench/soak.py both measure the server as users run it: its own
process, its own event loop, its output (tracebacks included) in a log file they can read.
Stopping is SIGTERM first (the server closes every session), SIGKILL only if it will not go.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(port: int, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout_s) as r:
            return r.status == 200
    except OSError:
        return False


@dataclass
class ServeProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    exit_code: int | None = None  # after stop(): what SIGTERM ended it with (None: killed)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime?duplex=1"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.proc.poll() is not None:
            self.exit_code = self.proc.returncode
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def serve(args: list[str], log_path: Path, startup_s: float = 60.0) -> Iterator[ServeProcess]:
    """Start ``duplexctl serve --port <free> *args``; stdout and stderr go to ``log_path``."""
    port = free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "duplexctl", "serve", "--port", str(port), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    server = ServeProcess(proc, port, log_path)
    try:
        deadline = time.monotonic() + startup_s
        while not healthy(port, 1.0):
            if proc.poll() is not None:
                raise SystemExit(f"duplexctl serve exited with {proc.returncode}: {log_path}")
            if time.monotonic() > deadline:
                raise SystemExit(f"duplexctl serve did not become healthy: {log_path}")
            time.sleep(0.2)
        yield server
    finally:
        server.stop()
