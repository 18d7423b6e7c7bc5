"""Interoperability: replay against the real vLLM-Omni 0.30.0 serving stack (fake model).

The peer (docs/testing.md) answers every turn ``--ttfa-ms`` (300) after it is submitted with a
2 s tone in 200 ms chunks; these tests check that replay's spoken turn, cancel, server-VAD
barge-in and drop + resume work against it, and that the timings match what it was told.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import load_scenario, parse_scenario
from duplexctl.scenario.runner import ReplayResult, run_replay

RECORDINGS = Path(__file__).resolve().parent.parent / "recordings"

pytestmark = [pytest.mark.realtime, pytest.mark.peer, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def peer_url(peer: Callable[..., Any]) -> str:
    return str(peer("--max-sessions", "2").url)


async def _replay(url: str, *, file: str | None = None, text: str | None = None) -> ReplayResult:
    if file is not None:
        scenario = load_scenario(RECORDINGS / file)
    else:
        assert text is not None
        scenario = parse_scenario(text, RECORDINGS / "peer.toml")
    config = resolve(CliOptions(), scenario.settings)
    return await run_replay(scenario, config, url)


def _fig(turn: dict[str, Any], name: str) -> Any:
    entry = turn["figures"].get(name)
    return None if entry is None else entry["value"]


def _ok(result: ReplayResult) -> None:
    report = result.report
    assert result.exit_code == 0, (
        result.failed_expectations,
        report["problems"],
        report["violation_counts"],
        report["errors"],
    )


@pytest.mark.slow
@pytest.mark.timing
async def test_spoken_turns_and_timings(peer_url: str) -> None:
    # one turn ended by server VAD, one committed by the client
    result = await _replay(
        peer_url,
        text=(
            '[[step]]\naction = "say"\nfile = "hello.wav"\n'
            '[[step]]\naction = "wait"\nexpect = { outcome = "spoke", status = "completed" }\n'
            '[[step]]\naction = "say"\nfile = "followup.wav"\ncommit = true\n'
            '[[step]]\naction = "wait"\nexpect = { outcome = "spoke" }\n'
        ),
    )
    _ok(result)
    vad, committed = result.report["turns"]
    assert result.report["session"]["capabilities"]["implementation_level"] == "turn_based_duplex"
    for turn in (vad, committed):
        # the peer's fake model: first output --ttfa-ms (300) after the turn is submitted
        assert 290 <= _fig(turn, "ttfa_created_ms") <= 400
        assert _fig(turn, "audio_ms") == pytest.approx(2000, abs=1)
        assert 0.8 <= _fig(turn, "rtf") <= 1.3  # paced in real time
    assert 290 <= _fig(committed, "ttfa_commit_ms") <= 400
    # with server VAD, ttfa includes the 800 ms of silence the VAD waits for
    assert _fig(vad, "ttfa_ms") > _fig(committed, "ttfa_ms")


@pytest.mark.slow
async def test_response_cancel(peer_url: str) -> None:
    result = await _replay(peer_url, file="cancel.toml")
    _ok(result)
    first = result.report["turns"][0]
    assert (first["outcome"], first["reason"]) == ("cancelled", "client_cancelled")
    assert _fig(first, "cancel_ack_ms") < 500


@pytest.mark.slow
async def test_server_vad_barge_in(peer_url: str) -> None:
    result = await _replay(peer_url, file="barge_in.toml")
    _ok(result)
    first, second = result.report["turns"][:2]
    assert (first["outcome"], first["reason"]) == ("cancelled", "turn_detected")
    assert _fig(first, "cancel_ack_ms") is not None and _fig(first, "audio_stop_ms") is not None
    assert second["outcome"] == "spoke"


@pytest.mark.slow
async def test_drop_and_resume(peer_url: str) -> None:
    result = await _replay(peer_url, file="resume.toml")
    _ok(result)
    first = result.report["turns"][0]
    assert _fig(first, "seq_gaps") == 0 and _fig(first, "duplicates_dropped") == 0
    assert _fig(first, "replayed_events") >= 1
    assert first["outcome"] == "spoke"
