"""Shared test fixtures.

* ``wire_dir`` / ``load_wire``: the 19 golden transcripts recorded from the real vLLM-Omni
  0.30.0 server (copied into tests/fixtures/wire so the suite needs nothing outside the repo).
* ``peer``: a factory that starts the real vLLM-Omni peer (the peer kit of docs/testing.md,
  ``DUPLEXCTL_PEER_KIT``, by default beside the checkout) on a free loopback port with given
  arguments, once per argument set per test session. Tests using it are skipped when the
  peer's environment has not been built (the kit's ``setup.sh``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
WIRE_DIR = ROOT / "tests" / "fixtures" / "wire"
PEER_KIT = Path(os.environ.get("DUPLEXCTL_PEER_KIT", ROOT.parent / "shared" / "peer"))
PEER_VENV = Path(
    os.environ.get(
        "DUPLEXCTL_PEER_VENV",
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "duplexctl-peer-venv",
    )
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def wire_dir() -> Path:
    return WIRE_DIR


def read_wire(name: str) -> list[dict[str, Any]]:
    """Lines of one golden transcript (``name`` without .jsonl)."""
    path = WIRE_DIR / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="session")
def load_wire() -> Callable[[str], list[dict[str, Any]]]:
    return read_wire


@dataclass
class PeerServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime?duplex=1"


def peer_available() -> bool:
    return (PEER_VENV / "bin" / "python").exists() and (PEER_KIT / "serve_peer.py").exists()


@pytest.fixture(scope="session")
def peer() -> Iterator[Callable[..., PeerServer]]:
    """``peer("--max-sessions", "2")`` -> a running peer (shared by tests asking the same)."""
    if not peer_available():
        pytest.skip(f"vLLM-Omni peer environment not built ({PEER_VENV}); run {PEER_KIT}/setup.sh")
    running: dict[tuple[str, ...], PeerServer] = {}
    logs: list[Any] = []

    def start(*args: str) -> PeerServer:
        if args in running:
            return running[args]
        port = free_port()
        log = open(ROOT / ".pytest_cache" / f"peer-{port}.log", "wb")  # noqa: SIM115
        logs.append(log)
        proc = subprocess.Popen(
            [str(PEER_VENV / "bin" / "python"), "serve_peer.py", str(port), *args],
            cwd=PEER_KIT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
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
            raise RuntimeError("peer did not become healthy within 120 s")
        server = PeerServer(port, proc)
        running[args] = server
        return server

    (ROOT / ".pytest_cache").mkdir(exist_ok=True)
    try:
        yield start
    finally:
        for server in running.values():
            server.process.terminate()
        for server in running.values():
            try:
                server.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.process.kill()
        for log in logs:
            log.close()


collect_ignore_glob: list[str] = []
if sys.platform == "win32":  # pragma: no cover
    collect_ignore_glob.append("test_audio_devices*")


@pytest.fixture(scope="module")
def pulse_server() -> Iterator[Any]:
    """A private PulseAudio for one test module (tests/pulse.py), PortAudio re-initialised to
    see it and again after it stops. Skips when pulseaudio or PortAudio is missing."""
    try:
        from tests.pulse import pulseaudio_available, start_pulse
    except ModuleNotFoundError:
        from pulse import pulseaudio_available, start_pulse  # type: ignore[no-redef]
    if not pulseaudio_available():
        pytest.skip("pulseaudio/pactl not installed (apt-get install pulseaudio pulseaudio-utils)")
    try:
        import sounddevice  # noqa: F401
    except (OSError, ImportError):
        pytest.skip("PortAudio not installed (apt-get install libportaudio2)")
    from duplexctl.audio import devices

    server = start_pulse()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in server.env.items():
                mp.setenv(key, value)
            devices.reinitialize()
            yield server
    finally:
        server.stop()
        devices.reinitialize()


@pytest.fixture
async def hostile_server() -> Any:
    """``await hostile_server("hang")`` -> a running hostile server (tests/hostile_servers.py), stopped
    after the test; keyword arguments as for ``hostile_servers.hostile`` (``script=``, ``tls=``)."""
    import contextlib

    try:
        from tests.hostile_servers import hostile
    except ModuleNotFoundError:
        from hostile_servers import hostile  # type: ignore[no-redef]

    async with contextlib.AsyncExitStack() as stack:

        async def start(kind: str, **options: Any) -> Any:
            return await stack.enter_async_context(hostile(kind, **options))

        yield start
