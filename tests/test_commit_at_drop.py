"""Turns at a drop (issue 31.4): what vLLM-Omni 0.30.0 does with what the client had in flight
(tests/fixtures/wire/commit_at_drop.jsonl), what ``serve`` does, and what the client does.

The recording (a proxy cutting the connection, RST both ways, at a chosen client frame):

* a commit that reached the server before the cut is processed, journaled, replayed after
  ``session.resume`` and answered;
* a commit that never reached it is lost without a trace: ``session.resumed`` shows
  ``turn_state: user_speaking``, nothing of it comes before the ``heartbeat_ack`` that follows
  the replay, and sent again it is answered;
* a final ``playback.ack`` lost with the connection leaves the answer "playing" on the
  server's books (``session.resumed``'s ``playback.committed_ms`` 0): the next commit is
  refused ``input_audio_buffer_empty`` — which a commit after an unacknowledged answer gets
  without any drop too — and sent again after the resume, the ack makes the next turn work.

The client (protocol/commits.py, PlaybackDuty.resumed) sends again what the resume says the
server never received; a commit that cannot be recovered (its audio lost too) makes its turn
**lost at the drop**, by name. Against ``serve`` through the same cutting proxy, and (peer
marker) against the real server.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.paths import SHORT, read_wire
from support.proxy import cutting_proxy, of_type

from duplexctl.protocol.client_state import ClientSession
from duplexctl.protocol.commits import CommitLedger
from duplexctl.report.render import plain_lines
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import parse_scenario
from duplexctl.scenario.runner import ReplayResult, run_replay
from duplexctl.server.app import start_server
from duplexctl.server.config import Fault, ServerConfig

RECORDINGS = Path(SHORT).parent
pytestmark = [pytest.mark.realtime, pytest.mark.timeout(180)]

SERVER = ServerConfig(port=0, reply_seconds=0.6, chunk_ms=200, ttfa_ms=100.0)


# -- the recording -------------------------------------------------------------------------------


def test_the_recording_shows_what_the_real_server_does_with_what_was_in_flight() -> None:
    lines = read_wire("commit_at_drop")
    resumed = [ln["frame"]["session"] for ln in lines if ln["frame"]["type"] == "session.resumed"]
    states = [(s["turn_state"], s["active_response_id"] is not None) for s in resumed]
    # A: the commit reached it (an answer playing); B: it never did (the user still speaking)
    assert states[0] == ("assistant_playing", True) and states[1] == ("user_speaking", False)
    # C: the final ack lost: the answer is not committed on the server's books
    assert resumed[2]["playback"]["committed_ms"] < resumed[2]["playback"]["generated_ms"]
    errors = [ln["frame"]["error"]["code"] for ln in lines if ln["frame"]["type"] == "error"]
    assert errors == ["input_audio_buffer_empty"]  # the commit after it, refused
    answered = [ln for ln in lines if ln["frame"]["type"] == "response.done"]
    assert len(answered) == 5  # every turn but the refused one, the re-sent commit's included


def test_the_ledger_sends_again_exactly_the_commit_the_recording_lost() -> None:
    """The recording through the sans-I/O ledger: one commit sent again, after the barrier
    of the second resume; the first (it reached the server) is confirmed by its replay."""
    lines = read_wire("commit_at_drop")
    cs = ClientSession()
    ledger: CommitLedger[int] = CommitLedger(cs)
    conn, commits, resend = 0, 0, []
    for ln in lines:
        frame, t = ln["frame"], int(ln["t_ms"] * 1e6)
        if ln["conn"] != conn:
            conn = ln["conn"]
            cs.begin_connection()
            if conn > 1:
                ledger.dropped()
        if ln["dir"] == "out":
            if frame["type"] == "input_audio_buffer.commit":
                commits += 1
                ledger.sent(commits, frame)
            continue
        for h in cs.on_frame(frame, t):
            verdicts = ledger.resumed() if h.type == "session.resumed" else ledger.on_happening(h)
            resend += [key for key, _ in verdicts.resend]
    assert resend == [2]


# -- serve -----------------------------------------------------------------------------------------


async def test_serve_refuses_a_commit_while_its_last_answer_is_unacknowledged() -> None:
    """As 0.30.0 does (without a drop too): the answer owns the turn until its audio is
    acknowledged; the commit over it is refused, never deferred for good."""
    from websockets.asyncio.client import connect

    pcm = base64.b64encode(bytes(3200) + b"\x10\x20" * 8000).decode()
    async with await start_server(SERVER) as server, connect(server.url + "&autostart=0") as ws:
        session = {"turn_detection": None, "extra_body": {"auto_response": False}}
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        got: list[dict[str, Any]] = []

        async def until(pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
            async with asyncio.timeout(10):
                while True:
                    frame = json.loads(await ws.recv())
                    got.append(frame)
                    if pred(frame):
                        return frame

        for turn in (1, 2):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": pcm}))
            commit = {"type": "input_audio_buffer.commit", "response_create": True}
            await ws.send(json.dumps({**commit, "event_id": f"evt_{turn}"}))
            if turn == 1:
                await until(lambda f: f["type"] == "response.done")  # played, never acked
        refused = await until(lambda f: f["type"] in ("error", "input_audio_buffer.committed"))
    assert refused["type"] == "error", refused
    assert refused["error"]["code"] == "input_audio_buffer_empty"
    assert refused["error"].get("event_id") == "evt_2" and "server_event_seq" in refused


# -- the client ------------------------------------------------------------------------------------


def _two_turns() -> Any:
    steps = f'[[step]]\naction = "say"\nfile = "{SHORT}"\n[[step]]\naction = "wait"\n'
    return parse_scenario(
        '[settings]\nturn_detection = "none"\n' + steps * 2, RECORDINGS / "t.toml"
    )


async def _replay_through(
    port: int, arm: Callable[[Any], None], timeout_s: float = 5.0
) -> tuple[ReplayResult, Any]:
    scenario = _two_turns()
    config = resolve(CliOptions(response_timeout_s=timeout_s), scenario.settings)
    async with cutting_proxy(port) as proxy:
        arm(proxy)
        result = await run_replay(scenario, config, proxy.url)
    assert proxy.cuts == 1  # the drop happened where it was asked for
    return result, proxy


def _outcomes(result: ReplayResult) -> list[str]:
    return [t["outcome"] for t in result.report["turns"]]


async def test_a_commit_the_drop_lost_is_sent_again_and_answered() -> None:
    async with await start_server(SERVER) as server:
        result, _ = await _replay_through(
            server.port,
            lambda p: p.cut_at(of_type("input_audio_buffer.commit"), swallow=True),
        )
    conn = result.report["connection"]
    assert _outcomes(result) == ["spoke", "spoke"], result.report["errors"]
    assert conn["drops"] == 1 and conn["commits_resent"] == 1 and conn["turns_lost_at_drop"] == []
    assert result.exit_code == 0
    assert any(
        "commit(s) the server never received sent again" in x for x in plain_lines(result.report)
    )


async def test_a_final_ack_the_drop_lost_is_sent_again_and_the_next_turn_answered() -> None:
    def final_ack(frame: dict[str, Any]) -> bool:
        return frame.get("type") == "playback.ack" and frame.get("committed_ms", 0) >= 600

    async with await start_server(SERVER) as server:
        result, proxy = await _replay_through(
            server.port, lambda p: p.cut_at(final_ack, swallow=True)
        )
    assert _outcomes(result) == ["spoke", "spoke"], result.report["errors"]
    assert result.report["errors"] == [] and result.exit_code == 0
    acks = [f for f in proxy.seen if final_ack(f)]
    assert len(acks) >= 3  # turn 1's final ack twice (lost, then again), turn 2's


async def test_a_commit_lost_with_its_audio_is_a_turn_lost_at_the_drop_by_name() -> None:
    """Turn 2's audio and commit never reach the server: sent again, the commit finds the
    buffer empty; the turn is lost at the drop (not the server's no_response)."""
    committed = []

    def after_first_commit(frame: dict[str, Any]) -> bool:  # asked till it matches
        if frame.get("type") == "input_audio_buffer.commit":
            committed.append(frame)
        return bool(committed) and frame.get("type") == "input_audio_buffer.append"

    def second_commit(frame: dict[str, Any]) -> bool:  # asked of every frame till it cuts
        if frame.get("type") == "input_audio_buffer.commit":
            committed.append(frame)
        return len(committed) >= 3  # the first commit, seen by both, then the second

    async with await start_server(SERVER) as server:
        result, _ = await _replay_through(
            server.port,
            lambda p: p.cut_at(second_commit, swallow=True, lose_from=after_first_commit),
        )
    report = result.report
    assert _outcomes(result) == ["spoke", "no_response"], report["errors"]
    [lost] = [e for e in report["errors"] if e["code"] == "lost_at_drop"]
    assert lost["turn"] == 2 and "lost at the drop" in lost["message"]
    assert "input_audio_buffer_empty" in lost["message"]
    assert report["connection"]["turns_lost_at_drop"] == [2]
    assert "turn(s) 2 lost at the drop" in "\n".join(plain_lines(report))
    assert result.exit_code == 1


@pytest.mark.peer
@pytest.mark.timeout(240)
async def test_against_the_real_server_a_commit_the_drop_lost_is_answered(
    peer: Callable[..., Any],
) -> None:
    server = peer("--max-sessions", "2")
    result, _ = await _replay_through(
        server.port,
        lambda p: p.cut_at(of_type("input_audio_buffer.commit"), swallow=True),
        timeout_s=20.0,
    )
    assert _outcomes(result) == ["spoke", "spoke"], result.report["errors"]
    assert result.report["connection"]["commits_resent"] == 1


@pytest.mark.slow
@pytest.mark.timing  # eight real-time sessions answered within their 5 s: the serial lane
@pytest.mark.timeout(300)
async def test_serve_dropping_every_connection_loses_no_turn() -> None:
    """``serve --fault drop-after=N`` and many committed turns, several sessions at once: a
    commit or a final ack caught by a drop was lost, and its turn with it (no_response, then
    input_backpressure as the unanswered turns piled up). Now every turn is answered."""
    steps = f'[[step]]\naction = "say"\nfile = "{SHORT}"\n[[step]]\naction = "wait"\n'
    scenario = parse_scenario(
        '[settings]\nturn_detection = "none"\n' + steps * 10, RECORDINGS / "t.toml"
    )
    config = resolve(CliOptions(response_timeout_s=5.0), scenario.settings)

    async def sessions(after: int) -> list[ReplayResult]:
        server_config = dataclasses.replace(
            SERVER, reply_seconds=0.4, faults=[Fault("drop-after", float(after))], max_sessions=8
        )
        async with await start_server(server_config) as server:
            return list(
                await asyncio.gather(*(run_replay(scenario, config, server.url) for _ in range(4)))
            )

    results = [r for rs in await asyncio.gather(sessions(5), sessions(9)) for r in rs]
    outcomes = [t["outcome"] for r in results for t in r.report["turns"]]
    errors = [e for r in results for e in r.report["errors"]]
    assert len(outcomes) == 80 and set(outcomes) == {"spoke"}, errors
    assert errors == []
    assert sum(r.report["connection"]["drops"] for r in results) > 100
