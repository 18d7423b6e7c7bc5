"""Where things are: the checkout, the bundled recordings, the golden wire transcripts; and a
free loopback port (the suite never listens on a fixed one)."""

from __future__ import annotations

import json
import shutil
import socket
import sys
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


def with_parent(cmd: list[str]) -> list[str]:
    """``cmd`` for the servers the suite starts (the peer, PulseAudio, Prometheus, ``duplexctl
    serve``), tied to the test process by Linux's parent-death signal (util-linux's
    ``setpriv --pdeathsig``, an exec, so no ``preexec_fn`` in a threaded process): a test
    process that is killed (an xdist worker at Ctrl-C, a timeout) takes them with it instead
    of leaving them running. Where there is no setpriv, ``cmd`` as it is (the fixtures still
    stop what they started)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return cmd
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd]
