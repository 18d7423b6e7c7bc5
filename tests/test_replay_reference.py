"""replay against the reference server over real loopback websockets.

Each test starts an in-process reference server with a known simulated latency and checks
that the figures replay measures come out as the server was told to behave.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
import soundfile as sf

from duplexctl.protocol.names import Dialect
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import load_scenario, parse_scenario
from duplexctl.scenario.runner import ReplayResult, run_replay
from duplexctl.server.app import start_server
from duplexctl.server.behaviour import Behaviour
from duplexctl.server.config import ServerConfig

RECORDINGS = Path(__file__).resolve().parent.parent / "recordings"

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(120)]


async def _replay(
    scenario_text: str | None,
    server: ServerConfig,
    *,
    scenario_file: str | None = None,
    out: Path | None = None,
    api_key: str | None = None,
    **cli: Any,
) -> ReplayResult:
    if scenario_file is not None:
        scenario = load_scenario(RECORDINGS / scenario_file)
    else:
        assert scenario_text is not None
        scenario = parse_scenario(scenario_text, RECORDINGS / "test.toml")
    config = resolve(CliOptions(**cli), scenario.settings)
    async with await start_server(server) as srv:
        return await run_replay(scenario, config, srv.url, api_key=api_key, out_dir=out)


def _fig(turn: dict[str, Any], name: str) -> Any:
    entry = turn["figures"].get(name)
    return None if entry is None else entry["value"]


def _server(**kw: Any) -> ServerConfig:
    return ServerConfig(host="127.0.0.1", port=0, **kw)


@pytest.mark.timing
async def test_ttfa_created_matches_the_injected_latency() -> None:
    turns = "\n".join(
        '[[step]]\naction = "say"\nfile = "short_ack.wav"\n[[step]]\naction = "wait"\n'
        for _ in range(5)
    )
    result = await _replay(
        '[settings]\nturn_detection = "none"\npace = "fast"\n' + turns,
        _server(ttfa_ms=300.0, chunk_ms=200, reply_seconds=0.6),
    )
    assert result.exit_code == 0, result.report["problems"]
    turns_json = result.report["turns"]
    assert [t["outcome"] for t in turns_json] == ["spoke"] * 5
    created = [_fig(t, "ttfa_created_ms") for t in turns_json]
    median = statistics.median(created)
    assert abs(median - 300.0) <= 15.0, created
    for t in turns_json:
        assert t["end_mode"] == "commit"
        assert _fig(t, "ttfa_commit_ms") >= _fig(t, "ttfa_created_ms")
        assert _fig(t, "ttfa_ms") >= _fig(t, "ttfa_commit_ms")
        assert _fig(t, "audio_ms") == pytest.approx(600, abs=1)


@pytest.mark.slow
async def test_scripted_barge_in_is_cancelled_with_figures() -> None:
    result = await _replay(None, _server(), scenario_file="barge_in.toml")
    assert result.exit_code == 0, (result.failed_expectations, result.report["problems"])
    first, second = result.report["turns"][:2]
    assert first["outcome"] == "cancelled" and first["status"] == "cancelled"
    assert first["reason"] in ("turn_detected", "barge_in")
    for name in ("cancel_ack_ms", "audio_stop_ms", "heard_stop_ms", "post_interrupt_ttfa_ms"):
        assert _fig(first, name) is not None, name
        assert _fig(first, name) >= 0
    assert 0 < _fig(first, "cancel_ack_ms") < 3000
    assert second["source"] == "interrupt.wav" and second["outcome"] == "spoke"
    assert _fig(first, "post_interrupt_ttfa_ms") == _fig(second, "ttfa_ms")


@pytest.mark.slow
async def test_response_cancel_is_acknowledged() -> None:
    result = await _replay(None, _server(), scenario_file="cancel.toml")
    assert result.exit_code == 0, (result.failed_expectations, result.report["problems"])
    first = result.report["turns"][0]
    assert (first["outcome"], first["reason"]) == ("cancelled", "client_cancelled")
    assert 0 <= _fig(first, "cancel_ack_ms") < 500
    assert _fig(first, "audio_stop_ms") is not None
    assert result.report["turns"][1]["outcome"] == "spoke"


@pytest.mark.slow
async def test_drop_and_resume_without_gaps_or_duplicates() -> None:
    result = await _replay(None, _server(), scenario_file="resume.toml")
    assert result.exit_code == 0, (result.failed_expectations, result.report["problems"])
    first = result.report["turns"][0]
    assert first["outcome"] == "spoke"
    assert _fig(first, "seq_gaps") == 0 and _fig(first, "duplicates_dropped") == 0
    # the scripted 500 ms wait is inside resume_ms; the handshake itself is fast
    assert 500 <= _fig(first, "resume_ms") < 5000
    assert _fig(first, "resume_handshake_ms") < 1000
    assert result.report["violations"] == []


async def test_g1_dialect_server() -> None:
    result = await _replay(
        '[settings]\nturn_detection = "none"\n'
        '[[step]]\naction = "say"\nfile = "short_ack.wav"\n'
        '[[step]]\naction = "wait"\nexpect = { outcome = "spoke" }\n',
        _server(dialect=Dialect.G1, chunk_ms=200, reply_seconds=0.6),
    )
    assert result.exit_code == 0, (result.failed_expectations, result.report["problems"])
    assert _fig(result.report["turns"][0], "audio_ms") == pytest.approx(600, abs=1)


async def test_out_dir_artefacts_and_no_api_key(tmp_path: Path) -> None:
    secret = "sk-do-not-write-me-123"
    out = tmp_path / "run"
    result = await _replay(
        '[settings]\nturn_detection = "none"\n'
        '[[step]]\naction = "say"\nfile = "short_ack.wav"\n'
        '[[step]]\naction = "wait"\n',
        _server(chunk_ms=200, reply_seconds=0.6),
        out=out,
        api_key=secret,
    )
    assert result.exit_code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "finished" and report["duplexctl_version"]
    assert report["url"].startswith("ws://127.0.0.1:")
    assert report["session"]["capabilities"]
    turn = report["turns"][0]
    assert all(f["measurement_origin"] for f in turn["figures"].values())
    events = [json.loads(x) for x in (out / "events.jsonl").read_text().splitlines()]
    kinds = {(e["dir"], e["type"]) for e in events}
    for expected in [
        ("send", "session.update"),
        ("recv", "session.created"),
        ("send", "input_audio_buffer.append"),
        ("send", "input_audio_buffer.commit"),
        ("recv", "response.output_audio.delta"),
        ("send", "playback.ack"),
        ("send", "session.event_ack"),
        ("send", "session.close"),
        ("recv", "session.closed"),
    ]:
        assert expected in kinds, expected
    append = next(e for e in events if e["type"] == "input_audio_buffer.append")
    assert append["event"]["audio"] == 3200  # 100 ms of 16 kHz PCM16, as a byte count
    response = out / "response_01_completed.wav"
    data, rate = sf.read(response)
    assert rate == 24000 and len(data) == 14400
    conv, conv_rate = sf.read(out / "conversation.wav")
    assert conv.shape[1] == 2 and conv_rate == 24000
    assert abs(conv[:, 0]).max() > 0.01 and abs(conv[:, 1]).max() > 0.01
    for path in out.rglob("*"):  # full_duplex_bench/ holds files too
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


async def test_acks_after_a_barge_in_over_an_ended_reply_are_answered() -> None:
    """The model takes the turn at a pause (its short echo reply arrives whole), the user
    goes on speaking while it plays: server VAD barges in over a reply that has ended but
    is not fully acknowledged, and says so only with ``overlap.decision``. The client keeps
    acknowledging what it plays (docs/protocol.md §3.5 releases a record only once fully
    acknowledged); the server used to release it at the cut and answer each of those acks
    ``playback_item_not_found`` (4 per such barge-in here)."""
    result = await _replay(
        '[settings]\nturn_detection = "server_vad"\nvad_silence_ms = 3000\n'
        '[[step]]\naction = "say"\nfile = "hello.wav"\n'
        '[[step]]\naction = "pause"\nms = 2500\nfile = "followup.wav"\n'
        '[[step]]\naction = "wait"\n',
        _server(voice="echo", ttfa_ms=100.0, behaviour=Behaviour(takeover_on_pause=1.0)),
        prebuffer_ms=0.0,
    )
    report = result.report
    assert report["behaviour"]["trials"]["takeovers"] >= 1
    assert [e["code"] for e in report["errors"]] == [], report["errors"]
    assert result.exit_code == 0, report["problems"]
