"""replay when the server misbehaves: never silence, never a healthy look, never "turn None".

Real loopback websockets: a quiet server (accepts the session, then answers nothing), the
reference server with ``--fault drop-after=N`` (drops every connection after N events, the
client resumes by itself).

* issue 16.1: a turn whose commit got no response within the response timeout is an error
  (outcome ``no_response`` with a reason, in ``errors``, exit 1), also across drops;
* issue 17.4: drops and resumes show on the turn line, in the summary and in report.json,
  and expectations (``drops`` per turn, ``[expect]`` for the run) fail on them;
(issue 17.6, Ctrl-C and "not reached", is tested with a real process in test_replay_cli.py.)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from duplexctl.client.causes import Cause
from duplexctl.client.connection import OpenFailed
from duplexctl.report.render import plain_lines, turn_progress_line
from duplexctl.report.turns import TurnRecord, TurnTimes
from duplexctl.scenario.clips import AppendCache
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import parse_scenario
from duplexctl.scenario.runner import Headless, Replay, ReplayResult, run_replay
from duplexctl.server.app import start_server
from duplexctl.server.config import Fault, ServerConfig

ROOT = Path(__file__).resolve().parent.parent
RECORDINGS = ROOT / "recordings"
SHORT = RECORDINGS / "short_ack.wav"
SHORT_PATH = str(SHORT)

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(120)]


def _scenario(text: str) -> Any:
    return parse_scenario(text, RECORDINGS / "test.toml")


def _say_wait(n: int, *, wait: bool = True, expect: str = "") -> str:
    steps = []
    for _ in range(n):
        steps.append(f'[[step]]\naction = "say"\nfile = "{SHORT}"\n')
        if wait:
            steps.append(f'[[step]]\naction = "wait"\n{expect}\n')
    return "\n".join(steps)


@pytest.fixture
async def quiet_server() -> AsyncIterator[str]:
    """Accepts a session and then never answers a turn (it still closes when asked)."""

    async def handler(ws: ServerConnection) -> None:
        async for raw in ws:
            event = json.loads(raw)
            if event.get("type") == "session.update":
                session = {"id": "duplex-" + "q" * 32, "capabilities": {}}
                await ws.send(
                    json.dumps(
                        {"type": "session.created", "session": session, "resume_token": "tok"}
                    )
                )
            elif event.get("type") == "session.close":
                await ws.send(
                    json.dumps(
                        {"type": "session.closed", "reason": "client_close", "server_event_seq": 1}
                    )
                )
                return

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"ws://127.0.0.1:{port}/v1/realtime?duplex=1"


async def _replay(text: str, url: str, **cli: Any) -> ReplayResult:
    scenario = _scenario(text)
    config = resolve(CliOptions(**cli), scenario.settings)
    return await run_replay(scenario, config, url)


# -- issue 16.1: no silent turns --------------------------------------------------------------


@pytest.mark.parametrize("wait", [True, False], ids=["with-wait", "no-wait-step"])
async def test_a_committed_turn_without_an_answer_is_an_error(
    quiet_server: str, wait: bool
) -> None:
    text = '[settings]\nturn_detection = "none"\n' + _say_wait(1, wait=wait)
    result = await _replay(text, quiet_server, response_timeout_s=1.5)
    report = result.report
    [turn] = report["turns"]
    assert turn["outcome"] == "no_response"
    assert "no response.created within 1.5 s of the commit" in turn["reason"]
    [error] = [e for e in report["errors"] if e["code"] == "no_response"]
    assert error["turn"] == 1 and "turn 1" in error["message"]
    assert report["unanswered_turns"] == 1
    assert result.exit_code == 1 and report["exit_code"] == 1
    lines = plain_lines(report)
    assert "errors: 1 turn(s) without an answer" in lines
    # the CLI's "check failed:" line names it (issue 30: it was empty)
    assert result.failure_reasons() == ["1 turn(s) without an answer"]


async def test_the_check_failed_line_names_the_unanswered_turn(quiet_server: str) -> None:
    """The one line on stderr says why exit 1 (it was ``check failed: `` and nothing else)."""
    from support.commands import run_cli_async

    code, _, err = await run_cli_async(
        "replay", SHORT_PATH, "--url", quiet_server, "--turn-detection", "none",
        "--response-timeout-s", "1",
    )  # fmt: skip
    assert code == 1
    assert "duplexctl: check failed: 1 turn(s) without an answer" in err, err


async def test_headless_counts_an_unanswered_turn_as_an_error(quiet_server: str) -> None:
    scenario = _scenario('[settings]\nturn_detection = "none"\n' + _say_wait(1))
    config = resolve(CliOptions(response_timeout_s=1.5), scenario.settings)
    s = config.settings
    reported: list[TurnRecord] = []

    def on_turn(record: TurnRecord, times: TurnTimes) -> None:
        reported.append(record)

    runner = Replay(
        scenario,
        config,
        quiet_server,
        headless=Headless(appends=AppendCache(s.input_format_canonical), on_turn=on_turn),
    )
    await runner.drive()
    assert [r.outcome for r in reported] == ["no_response"]
    assert reported[0].reason and "of the commit" in reported[0].reason
    assert [e["code"] for e in runner.errors] == ["no_response"]


# -- issue 17.4 and 16.1 across drops: the server drops every connection -------------------------


def _drop_server(after: int) -> ServerConfig:
    return ServerConfig(
        host="127.0.0.1",
        port=0,
        reply_seconds=0.6,
        chunk_ms=200,
        ttfa_ms=200.0,
        faults=[Fault("drop-after", float(after))],
    )


async def test_drops_and_resumes_are_visible_and_no_turn_is_silent() -> None:
    text = '[settings]\nturn_detection = "none"\n' + _say_wait(4)
    scenario = _scenario(text)
    config = resolve(CliOptions(response_timeout_s=5.0), scenario.settings)
    progress: list[str] = []
    async with await start_server(_drop_server(23)) as srv:
        result = await run_replay(scenario, config, srv.url, progress=progress.append)
    report = result.report
    conn = report["connection"]
    assert conn["drops"] >= 1 and conn["scripted_drops"] == 0
    assert conn["resumes"] == conn["drops"]  # every drop resumed
    assert len(conn["resume_ms"]) == conn["resumes"] and all(x > 0 for x in conn["resume_ms"])
    detail = conn["drops_detail"]
    assert all(d["automatic"] and d["outcome"] == "resumed" for d in detail)
    dropped_turns = {d["turn"] for d in detail}
    drops_on_turns = sum(
        (t["figures"].get("drops") or {"value": 0})["value"] for t in report["turns"]
    )
    assert drops_on_turns == conn["drops"]
    for t in report["turns"]:
        if t["index"] in dropped_turns:
            assert t["figures"]["resumes"]["value"] >= 1
            assert "drops=" in turn_progress_line(t)
    # the summary says so: the run no longer looks healthy
    lines = plain_lines(report)
    assert any(line.startswith(f"connection: {conn['drops']} drop") for line in lines)
    assert any("dropped the connection" in p and "resumed in" in p for p in progress)
    # no silent turn: every turn spoke, or is an error with its reason
    lost = {e["turn"] for e in report["errors"] if e["code"] == "no_response"}
    for t in report["turns"]:
        assert t["outcome"] == "spoke" or (t["outcome"] == "no_response" and t["index"] in lost)
        if t["outcome"] == "no_response":
            assert t["reason"]


@pytest.mark.slow
async def test_expectations_fail_on_drops() -> None:
    text = (
        '[settings]\nturn_detection = "none"\n'
        '[expect]\ndrops = 0\nresume_ms = "<1"\n' + _say_wait(3, expect='expect = { drops = "0" }')
    )
    async with await start_server(_drop_server(23)) as srv:
        result = await _replay(text, srv.url, response_timeout_s=5.0)
    failed = result.report["expectations"]["failed"]
    names = {(f["step"], f["name"]) for f in failed}
    assert (None, "drops") in names and (None, "resume_ms") in names
    assert any(step is not None and name == "drops" for step, name in names)
    assert result.exit_code == 1
    lines = plain_lines(result.report)
    assert any(line.startswith("  run: drops = ") for line in lines)
    # against a server that does not drop, the same expectations hold
    async with await start_server(
        ServerConfig(host="127.0.0.1", port=0, reply_seconds=0.6, chunk_ms=200)
    ) as srv:
        healthy = await _replay(text, srv.url, response_timeout_s=5.0)
    assert healthy.report["expectations"]["failed"] == []
    assert healthy.exit_code == 0
    assert "connection: no drops" in plain_lines(healthy.report)


# -- issue 30: a lane duplexctl cannot drive (video on every append: AURA Omni) ---------------


async def test_a_server_that_needs_video_is_refused_and_its_session_closed() -> None:
    """docs/protocol.md §13.5: the session opens, its capabilities require video_frames on
    every append, duplexctl sends audio only: it closes the session and says why."""
    received: list[str] = []

    async def handler(ws: ServerConnection) -> None:
        async for raw in ws:
            event = json.loads(raw)
            received.append(event.get("type"))
            if event.get("type") == "session.update":
                caps = {"required_input_modalities": ["video"], "chunk_period_ms": 1000}
                session = {"id": "duplex-" + "v" * 32, "capabilities": caps}
                await ws.send(json.dumps({"type": "session.created", "session": session}))
            elif event.get("type") == "session.close":
                closed = {"type": "session.closed", "reason": "client_close", "server_event_seq": 1}
                await ws.send(json.dumps(closed))
                return

    async with serve(handler, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/realtime?duplex=1"
        with pytest.raises(OpenFailed) as failed:
            await _replay(_say_wait(1), url)
    assert failed.value.cause == Cause.UNSUPPORTED_INPUT and failed.value.exit_code == 3
    assert "requires video_frames on every append" in str(failed.value)
    assert "duplexctl sends audio only" in str(failed.value)
    assert received == ["session.update", "session.close"]  # nothing appended, then closed
