"""Where things are: the checkout, the bundled recordings, the golden wire transcripts; and a
free loopback port (the suite never listens on a fixed one)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WIRE_DIR = ROOT / "tests" / "fixtures" / "wire"
RECORDINGS = ROOT / "duplexctl" / "recordings"
SHORT = str(RECORDINGS / "short_ack.wav")
HELLO = str(RECORDINGS / "hello.wav")


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def read_wire(name: str) -> list[dict[str, Any]]:
    """Lines of one golden transcript (``name`` without .jsonl)."""
    path = WIRE_DIR / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
