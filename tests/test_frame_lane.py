"""The frame-locked lane end to end (docs/protocol.md §13): every scenario runs against the
reference server's frame profile (``serve --model-profile frame``, in the default suite) and
against the real vLLM-Omni 0.30.0 Nemotron VoiceChat lane of the peer kit (marked ``peer``,
skipped only where the kit is absent).

Both are configured alike: the user's turn ends after 640 ms of silence (``eou_ms``), each
80 ms output packet leaves ``ttfa_ms`` (300) after its frame, one session at a time
(``max_sessions`` 1), and the model calls ``get_weather`` on a session's first turn when the
session declares it (``--tool-call``).
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.commands import admitted, run_cli_async, serve

from duplexctl.report.render import plain_lines, turn_progress_line
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import load_scenario, parse_scenario
from duplexctl.scenario.runner import ReplayResult, run_replay
from duplexctl.talk.config import InputFileSpec, TalkConfig
from duplexctl.talk.session import run_talk
from duplexctl.talk.view import PlainView

RECORDINGS = Path(__file__).resolve().parent.parent / "recordings"
EOU_MS = 640.0  # the peer's default and serve's
TTFA_MS = 300.0
#: what the pipeline adds on a loaded test machine: a frame or two, scheduling, the socket
PIPELINE_MS = 1000.0
#: a short disconnect grace: resume-after-grace is probed, and a slot the peer keeps for an
#: abandoned handshake (its 0.30.0 leak, test_probe_peer.py) is free again seconds later
GRACE = ("--disconnect-grace-s", "3")

pytestmark = [pytest.mark.realtime, pytest.mark.slow, pytest.mark.timeout(300)]


@dataclass(frozen=True)
class Lane:
    name: str
    url: str


@pytest.fixture(scope="module", params=["serve", pytest.param("peer", marks=pytest.mark.peer)])
def lane(request: pytest.FixtureRequest) -> Iterator[Lane]:
    if request.param == "peer":
        start = request.getfixturevalue("peer")
        args = ("--plugin", "nemotron", "--tool-call", "get_weather", *GRACE)
        yield Lane("peer", start(*args).url)
        return
    args = ("--model-profile", "frame", "--tool-call", "get_weather", "--max-sessions", "1")
    with serve(*args, *GRACE) as (url, _proc):
        yield Lane("serve", url)


async def replay(lane: Lane, steps: str, **cli: Any) -> ReplayResult:
    text = "[settings]\nauto_response = true\n" + steps
    scenario = parse_scenario(text, RECORDINGS / "frame.toml")
    config = resolve(CliOptions(**cli), scenario.settings)
    return await run_replay(scenario, config, lane.url)


def fig(turn: dict[str, Any], name: str) -> Any:
    entry = turn["figures"].get(name)
    return None if entry is None else entry["value"]


def ok(result: ReplayResult) -> dict[str, Any]:
    report = result.report
    assert result.exit_code == 0, (result.failure_reasons(), report["errors"])
    return report


SAY = '[[step]]\naction = "say"\nfile = "{file}"\n[[step]]\naction = "wait"\n'


@pytest.mark.timing
async def test_a_turn_is_timed_from_the_speech(lane: Lane) -> None:
    report = ok(await replay(lane, SAY.format(file="hello.wav") + SAY.format(file="followup.wav")))
    # the lane's 80 ms step makes 40 ms packets of the default 100 ms appends
    assert report["pacing"]["packet_ms"] == 40 and "40 ms packets" in report["notes"][0]
    assert report["session"]["capabilities"]["chunk_period_ms"] == 80
    turns = report["turns"]
    assert [t["outcome"] for t in turns] == ["spoke", "spoke"]  # no turn for a silent response
    # the behaviour figures read the same speech off the audio: the model answered each turn
    gaps = report["behaviour"]["trials"]["response_gaps_ms"]
    assert len(gaps) == 2 and all(0 < g < EOU_MS + TTFA_MS + PIPELINE_MS + 500 for g in gaps)
    for turn in turns:
        ttfa, ttft = fig(turn, "ttfa_ms"), fig(turn, "ttft_ms")
        # the model waits 640 ms of silence, its packet leaves 300 ms after its frame
        assert EOU_MS <= ttfa <= EOU_MS + TTFA_MS + PIPELINE_MS, turn
        assert 0 <= ttft < ttfa  # the text channel runs ahead of the audio
        assert not turn["early_start"] and turn["reason"] == "stop"
        assert fig(turn, "turn_ms") > ttfa and fig(turn, "audio_ms") >= 1500
        assert "ttfa_created_ms" not in turn["figures"]  # response.created is no decision
    # every frame came back as one packet, once the tail was waited for; the summary says so
    frames = report["frames"]
    assert frames["frame_ms"] == 80 and frames["frames_sent"] > 30, frames
    assert frames["frame_deficit"] == 0 and frames["frames_inserted"] == 0, frames
    line = next(x for x in plain_lines(report) if x.startswith("frames ("))
    assert line.startswith(f"frames (frame-locked lane, 80 ms): {frames['frames_sent']} sent, ")
    assert "coverage 100%; deficit at end of call 0 frames; 0 inserted by the server" in line


async def test_a_barge_in_is_the_model_ending_its_turn(lane: Lane) -> None:
    steps = (
        '[[step]]\naction = "say"\nfile = "hello.wav"\n'
        '[[step]]\naction = "barge_in"\nfile = "interrupt.wav"\nafter_ms = 300\n'
        'expect = { outcome = "spoke", status = "completed", model_stop_ms = "<3000" }\n'
        '[[step]]\naction = "wait"\nexpect = { outcome = "spoke" }\n'
    )
    report = ok(await replay(lane, steps))
    first, second = report["turns"][:2]
    # no barge-in on this lane (supports_barge_in false): the model hears the speech and
    # ends its turn; what is measured is that stop
    assert fig(first, "audio_stop_ms") <= fig(first, "model_stop_ms")
    assert fig(first, "audio_ms") < 2000  # cut before the end of the 2 s answer
    assert "cancel_ack_ms" not in first["figures"]
    assert second["source"] == "interrupt.wav" and fig(second, "ttfa_ms") >= 0
    assert "model_stop_ms=" in turn_progress_line(first)  # what a reader sees
    # the same stop read off the audio, as heard (a trial when the voices overlapped there)
    assert all(0 < stop < 3000 for stop in report["behaviour"]["trials"]["stop_latencies_ms"])
    assert any("model_stop_ms=" in line for line in plain_lines(report))


async def test_a_cancel_is_acknowledged_and_the_session_goes_on(lane: Lane) -> None:
    steps = (
        '[[step]]\naction = "say"\nfile = "hello.wav"\n'
        '[[step]]\naction = "cancel"\nafter_ms = 500\n'
        'expect = { outcome = "cancelled", reason = "client_cancelled", cancel_ack_ms = "<500" }\n'
        + SAY.format(file="followup.wav")
    )
    report = ok(await replay(lane, steps))
    cancelled, answered = report["turns"]
    # cancelled 500 ms after its first audible packet: heard at most that (a late packet
    # stalls the playback clock, so a loaded machine hears less)
    assert 0 < fig(cancelled, "heard_ms") <= 600
    assert answered["outcome"] == "spoke"


TOOLS = '[[session.tools]]\ntype = "function"\nname = "get_weather"\n'


async def test_a_tool_call_is_answered_once_and_timed(lane: Lane) -> None:
    scenario = load_scenario(RECORDINGS / "tool_call.toml")  # bundled: tools, tool_output
    result = await run_replay(scenario, resolve(CliOptions(), scenario.settings), lane.url)
    report = ok(result)
    [turn] = report["turns"]
    # speech end -> the call (the turn's end, then the call's JSON one token per frame),
    # output sent -> first answer text and audio (the result read one token per frame)
    assert fig(turn, "tool_call_ms") > EOU_MS
    assert 300 < fig(turn, "tool_answer_text_ms") < fig(turn, "tool_answer_audio_ms")
    assert fig(turn, "task_ms") > fig(turn, "tool_call_ms") + fig(turn, "tool_answer_audio_ms")
    assert fig(turn, "ttfa_ms") > fig(turn, "tool_call_ms")  # the answer follows the result
    assert report["config"]["tools"][0]["name"] == "get_weather"
    line = next(x for x in plain_lines(report) if x.startswith("turn 1 "))
    for name in ("tool_calls=1", "tool_call_ms=", "tool_text_ms=", "tool_audio_ms=", "task_ms="):
        assert name in line, line


async def test_a_tool_call_nothing_answers_is_an_error(lane: Lane) -> None:
    steps = TOOLS + SAY.format(file="hello.wav")
    result = await replay(lane, steps, response_timeout_s=8.0)
    report = result.report
    assert result.exit_code == 1 and report["unanswered_tool_calls"] == 1
    [error] = [e for e in report["errors"] if e["code"] == "unanswered_tool_call"]
    assert "get_weather" in error["message"] and "--tool-outputs" in error["message"]
    assert "1 tool call(s) nothing answered" in result.failure_reasons()


async def test_a_load_where_the_lane_admits_one_session(lane: Lane, tmp_path: Path) -> None:
    out = tmp_path / "load"
    code, _, err = await run_cli_async(
        "load", str(RECORDINGS / "hello.wav"), "--url", lane.url, "--auto-response",
        "--sessions", "4", "--count", "4", "--workers", "1", "--no-server-metrics",
        "--out", str(out), timeout=120,
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    admission = report["admission"]
    assert admission["attempts"] == 4 and admission["by_kind"]["admitted"] == 1, admission
    assert admission["by_code"] == {"rejected_capacity:resource_exhausted": 3}
    assert admission["advertised_limit"] == 1 and admission["unfinished"]["count"] == 0
    assert report["errors"] == {} and report["turns"]["outcomes"] == {"spoke": 1}
    assert report["validity"]["packet_ms"] == 40  # its pacing is judged against the packets
    # every frame the session sent came back as one packet, none inserted (40 ms packets
    # keep a partial frame pending: docs/protocol.md §13.1), once the tail was waited for
    frames = report["frames"]
    assert frames["sessions"] == 1 and frames["frames_sent"] > 20, frames
    assert frames["frame_deficit"] == 0 and frames["frames_inserted"] == 0, frames
    assert frames["coverage"] == 1.0
    assert "sent as 40 ms packets" in err or "sent as 40 ms packets" in _
    # none left hanging: the slot is free again at once
    assert await admitted(lane.url, 1, auto_response=True) == 1


async def test_probe_verdicts_with_the_inapplicable_probes_skipped(lane: Lane) -> None:
    code, out, err = await run_cli_async(
        "probe", "--json", "--url", lane.url, "--budget-s", "240", "--no-server-metrics",
        *GRACE, timeout=300,
    )  # fmt: skip
    report = json.loads(out)
    v = {r["name"]: r for r in report["results"]}
    verdicts = {name: r["verdict"] for name, r in v.items()}
    skipped = {name for name, verdict in verdicts.items() if verdict == "skipped"}
    # no barge_in on this lane; no committed turn to interrupt or drop a reply at
    assert skipped == {"barge-in-race", "epoch-fencing", "resume-replay"}
    assert "supports_barge_in: false" in v["barge-in-race"]["summary"]
    for name in ("epoch-fencing", "resume-replay"):
        assert "model-native sessions only" in v[name]["summary"], v[name]
    # 0.30.0 keeps an abandoned handshake's slot for its disconnect grace (test_probe_peer.py);
    # the reference server frees it
    failed = {name for name, verdict in verdicts.items() if verdict == "fail"}
    assert failed == ({"abandoned-handshake"} if lane.name == "peer" else set()), verdicts
    assert code == (1 if failed else 0), err
    assert verdicts["tool-calls"] == "pass" and verdicts["responses"] == "pass"
    assert verdicts["resume-after-grace"] == "pass" and verdicts["journal-gap"] == "pass"
    assert any("40 ms packets" in f for f in v["responses"]["findings"])
    assert any("get_weather" in f for f in v["tool-calls"]["findings"])
    # leave the lane as found: the slot an abandoned handshake held is free after the grace
    for _ in range(40):
        if await admitted(lane.url, 1, auto_response=True) == 1:
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError("the lane's only session slot is still held")


@pytest.mark.timing
async def test_talk_times_the_answer_from_the_speech(lane: Lane) -> None:
    out = io.StringIO()
    config = TalkConfig(
        url=lane.url,
        auto_response=True,
        output_device="none",
        input_files=[InputFileSpec(RECORDINGS / "hello.wav", 0.0)],
        duration_s=9.0,
    )
    result = await run_talk(config, PlainView(out))
    assert "sent as 40 ms packets" in out.getvalue()
    [turn] = result.turns  # the response still open, silent, when talk stops is no turn
    ttfa = turn.figures["ttfa_ms"].value
    assert EOU_MS <= ttfa <= EOU_MS + TTFA_MS + PIPELINE_MS, turn.to_json()
    assert 0 <= turn.figures["ttft_ms"].value < ttfa
    assert turn.figures["first_audible_ms"].value >= ttfa
    assert turn.figures["heard_ms"].value <= turn.figures["audio_ms"].value


async def test_load_mix_tool_call_answers_and_times_the_calls(lane: Lane, tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "name": "get_weather"}]))
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"get_weather": {"output": {"t": 21}, "latency_ms": 200}}))
    out = tmp_path / "load"
    code, stdout, err = await run_cli_async(
        "load", str(RECORDINGS / "hello.wav"), "--url", lane.url, "--auto-response",
        "--sessions", "1", "--count", "1", "--workers", "1", "--no-server-metrics",
        "--mix", "tool_call=1", "--tools", str(tools), "--tool-outputs", str(outputs),
        "--slo", "tool_call_p95<=10s", "--out", str(out), timeout=120,
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["turns"]["tool_calls"] == report["turns"]["tool_outputs"] == 1
    assert report["interruptions"]["behaviours"] == {"tool_call": 1}
    for name in ("tool_call_ms", "tool_answer_text_ms", "tool_answer_audio_ms", "task_ms"):
        assert report["figures"][name]["n"] == 1, name
    assert "tool calls: 1, answered 1" in stdout
    assert "SLO PASS tool_call_p95<=10s" in stdout


@pytest.mark.timing
async def test_pcm_f32le_input_at_16_khz(lane: Lane) -> None:
    """The lane takes pcm16 at any rate or pcm_f32le at exactly 16 kHz (§13.1)."""
    steps = '[session]\ninput_audio_format = "pcm_f32le"\n' + SAY.format(file="hello.wav")
    report = ok(await replay(lane, steps))
    assert report["config"]["input_format"] == "pcm_f32le"
    [turn] = report["turns"]
    assert EOU_MS <= fig(turn, "ttfa_ms") <= EOU_MS + TTFA_MS + PIPELINE_MS
