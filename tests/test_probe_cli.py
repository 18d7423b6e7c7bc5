"""``duplexctl probe`` as a command: listing, usage errors, exit codes, text and JSON output."""

from __future__ import annotations

import json

from conftest import free_port
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
