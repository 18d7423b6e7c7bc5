"""Interop: ``duplexctl load`` against the real vLLM-Omni 0.30.0 stack (fake model).

The peer runs the real session manager with ``--max-sessions 2`` and answers each committed
turn ``--ttfa-ms`` (300) after the commit. Admission outcomes must come out exactly as the
real server words them, and ttfa_commit_ms must match the injected delay (the peer's README
observed ttfa ≈ ttfa-ms + 5-10 ms; the bound here is generous).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.loadconfig import load_config

from duplexctl.load.run import run_load

ROOT = Path(__file__).resolve().parent.parent
HELLO = str(ROOT / "recordings" / "hello.wav")

pytestmark = [pytest.mark.realtime, pytest.mark.peer]


@pytest.mark.timing
def test_load_against_the_peer_with_two_slots(peer: Callable[..., Any]) -> None:
    server = peer("--max-sessions", "2")
    result = run_load(
        load_config(
            url=server.url,
            inputs=[HELLO],
            sessions=3,
            duration_s=9.0,
            workers=1,
            live=False,
            json_output=True,
            response_timeout_s=15.0,
        )
    )
    r = result.report
    adm = r["admission"]
    assert adm["advertised_limit"] == 2
    assert adm["observed_capacity"] == 2
    assert adm["by_kind"]["rejected_capacity"] >= 1
    assert set(adm["by_code"]) == {"rejected_capacity:resource_exhausted"}
    figs = r["figures"]
    assert figs["ttfa_commit_ms"]["n"] >= 2
    assert 300 <= figs["ttfa_commit_ms"]["p50"] <= 600
    assert r["turns"]["outcomes"].get("spoke", 0) >= 2
    assert r["sessions"]["closed_cleanly"] == r["sessions"]["admitted"]
    assert not r["violations"]
