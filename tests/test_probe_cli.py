"""``duplexctl probe`` as a command: listing, usage errors, exit codes, text and JSON output."""

from __future__ import annotations

import json

from support.paths import free_port
from typer.testing import CliRunner

from duplexctl.cli import app
from duplexctl.probe import ProbeReport, ProbeResult, TraceEntry, Verdict, all_probes, render

runner = CliRunner()


def test_list_names_every_probe_with_what_it_catches() -> None:
    result = runner.invoke(app, ["probe", "--list"])
    assert result.exit_code == 0
    for p in all_probes():
        assert p.name in result.stdout
        assert p.catches and p.catches in result.stdout
        assert p.expected_s <= p.max_s


def test_unknown_probe_is_a_one_line_usage_error() -> None:
    result = runner.invoke(app, ["probe", "--only", "no-such-probe"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "no-such-probe" in result.stderr and "handshake" in result.stderr


def test_unreachable_server_exits_3() -> None:
    url = f"ws://127.0.0.1:{free_port()}/v1/realtime?duplex=1"
    result = runner.invoke(app, ["probe", "--url", url, "--only", "handshake"])
    assert result.exit_code == 3
    assert "duplexctl: error:" in result.stderr


def test_embedded_run_text_and_json() -> None:
    result = runner.invoke(app, ["probe", "--only", "handshake", "--only", "admission"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "reference server" in lines[0]
    assert any(line.startswith("PASS  handshake") for line in lines)
    assert lines[-1].startswith("2 probes: 2 passed, 0 failed, 0 skipped")

    result = runner.invoke(app, ["probe", "--json", "--only", "admission", "--max-sessions", "2"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] and report["embedded"]
    (admission,) = report["results"]
    assert admission["verdict"] == "pass"
    assert "exactly 2 of 4" in admission["summary"]


def test_a_failure_renders_its_evidence() -> None:
    failed = ProbeResult(
        "responses",
        Verdict.FAIL,
        1234.0,
        "response r1 has no response.done",
        catches="Responses that never end",
        evidence=[
            TraceEntry(5.0, "s1", "in", "response.created", "r1", seq=8),
            TraceEntry(6.0, "-", "note", "note", "waited 15 s"),
        ],
    )
    text = render(ProbeReport("ws://x", False, [failed], 1300.0, 120.0))
    assert "FAIL  responses" in text
    assert "response.created [8] r1" in text
    assert "waited 15 s" in text
    assert "1 probes: 0 passed, 1 failed, 0 skipped" in text


async def test_sigterm_stops_probe_like_ctrl_c_and_frees_its_sessions() -> None:
    """SIGTERM (a service manager stopping the run) mid-probe: exit 130, one line, no
    traceback, and every session it held closed — with a 60 s disconnect grace a dropped
    socket would keep its slot far past the bound here."""
    import asyncio
    import os
    import signal
    import sys
    import time
    from pathlib import Path

    from duplexctl.server.app import start_server
    from duplexctl.server.config import ServerConfig

    root = Path(__file__).resolve().parent.parent
    config = ServerConfig(port=0, disconnect_grace_s=60.0, reply_seconds=1.0, chunk_ms=200)
    async with await start_server(config) as srv:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "duplexctl", "probe", "--url", srv.url,
            cwd=root, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while srv.registry.slots_held == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # until the probe holds a session
        assert srv.registry.slots_held > 0, "the probe never opened a session"
        proc.send_signal(signal.SIGTERM)
        _out, err = await asyncio.wait_for(proc.communicate(), 30)
        deadline = time.monotonic() + 10
        while srv.registry.slots_held and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        held = srv.registry.slots_held
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in err.decode() and "Traceback" not in err.decode()
    assert held == 0
