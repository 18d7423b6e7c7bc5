"""``duplexctl probe`` against the real vLLM-Omni 0.30.0 stack (the peer kit: docs/testing.md).

This records what the probes find there, as a test: everything passes except
abandoned-handshake — 0.30.0 treats an open whose ``session.created`` could not be delivered
as an ordinary disconnect and keeps the session (and its admission slot) for the whole
disconnect grace (docs/protocol.md §6.6). If a later peer fixes that, this test says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = [pytest.mark.realtime, pytest.mark.peer]


@pytest.mark.slow
def test_probe_finds_the_abandoned_handshake_leak_on_the_peer(peer: Callable[..., Any]) -> None:
    srv = peer("--max-sessions", "2", "--disconnect-grace-s", "3")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "duplexctl",
            "probe",
            "--json",
            "--url",
            srv.url,
            "--disconnect-grace-s",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    report = json.loads(proc.stdout)
    v = {r["name"]: r for r in report["results"]}
    failed = {n for n, r in v.items() if r["verdict"] == "fail"}
    assert failed == {"abandoned-handshake"}, json.dumps(report, indent=1)[:6000]
    # the Qwen3-Omni plugin refuses a session that declares tools: nothing to check
    assert v["tool-calls"]["verdict"] == "skipped"
    assert "refused a session declaring tools" in v["tool-calls"]["summary"]
    assert all(r["verdict"] == "pass" for n, r in v.items() if n not in failed | {"tool-calls"})
    assert proc.returncode == 1
    leak = v["abandoned-handshake"]["summary"]
    held_s = float(leak.split("for ")[1].split(" s")[0])
    assert 2.5 <= held_s <= 6.0, leak  # the 3 s grace plus the peer's 1 s reaper tick
    # the limit was learned from the peer's own rejection, not given
    assert "limit 2 (advertised)" in " ".join(v["admission"]["findings"])
    # the Qwen3-Omni plugin refuses auto_response: that part of `responses` is not checked
    assert any("refused" in f for f in v["responses"]["findings"])
