"""Replay config resolution: flag over scenario over default, and early BadInput."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from duplexctl.errors import BadInput
from duplexctl.scenario.config import CliOptions, end_mode_of, resolve
from duplexctl.scenario.model import Pace, Settings, TurnEnd


def test_defaults() -> None:
    config = resolve(CliOptions(), Settings())
    assert config.end_mode is TurnEnd.VAD
    assert config.chunk_ms == 100 and config.pace is Pace.REALTIME
    obj = config.settings.to_session_object()
    assert obj["turn_detection"] == {"type": "server_vad", "silence_duration_ms": 800}
    assert obj["extra_body"] == {"auto_response": False}
    assert "api" not in json.dumps(config.echo())


def test_flag_beats_scenario_beats_default(tmp_path: Path) -> None:
    session_file = tmp_path / "s.json"
    session_file.write_text(json.dumps({"temperature": 0.2, "extra_body": {"x": 1}}))
    scenario = Settings(
        turn_detection="none", chunk_ms=200, model="from-scenario", session={"temperature": 0.9}
    )
    config = resolve(
        CliOptions(model="from-flag", pace="fast", session_file=session_file), scenario
    )
    obj = config.settings.to_session_object()
    assert obj["model"] == "from-flag" and obj["turn_detection"] is None
    assert obj["temperature"] == 0.2  # --session over [session]
    assert obj["extra_body"] == {"auto_response": False, "x": 1}
    assert config.chunk_ms == 200 and config.pace is Pace.FAST
    assert config.end_mode is TurnEnd.COMMIT


@pytest.mark.parametrize(
    ("td", "auto", "commit", "mode"),
    [
        ("server_vad", False, False, TurnEnd.VAD),
        ("server_vad", False, True, TurnEnd.COMMIT),
        ("none", False, False, TurnEnd.COMMIT),
        ("none", True, False, TurnEnd.MODEL),
        ("server_vad", True, True, TurnEnd.MODEL),
    ],
)
def test_end_mode(td: str, auto: bool, commit: bool, mode: TurnEnd) -> None:
    assert end_mode_of(td, auto, commit) is mode


@pytest.mark.parametrize(
    ("cli", "message"),
    [
        (CliOptions(turn_detection="semantic"), "--turn-detection"),
        (CliOptions(pace="slow"), "--pace"),
        (CliOptions(chunk_ms=0), "--chunk-ms"),
        (CliOptions(response_timeout_s=0), "--response-timeout-s"),
        (CliOptions(prebuffer_ms=-1), "--prebuffer-ms"),
        (CliOptions(session_file=Path("/nonexistent/s.json")), "--session"),
        (CliOptions(ref_audio=Path("/nonexistent/v.wav")), "--ref-audio"),
    ],
)
def test_bad_values_are_bad_input(cli: CliOptions, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        resolve(cli, Settings())


def test_explicit_flags_beat_the_session_file(tmp_path: Path) -> None:
    """--session was merged last over the whole session object, so it beat explicit flags;
    its typed keys now rank between the scenario and the flags, the rest passes through."""
    session_file = tmp_path / "s.json"
    session_file.write_text(
        json.dumps(
            {
                "model": "from-file",
                "voice": "file-voice",
                "turn_detection": {"type": "server_vad", "silence_duration_ms": 300},
                "temperature": 0.3,
            }
        )
    )
    config = resolve(
        CliOptions(model="from-flag", turn_detection="none", session_file=session_file),
        Settings(model="from-scenario", voice="scenario-voice"),
    )
    obj = config.settings.to_session_object()
    assert obj["model"] == "from-flag"  # flag > --session > scenario
    assert obj["voice"] == "file-voice"  # --session > scenario
    assert obj["turn_detection"] is None and config.end_mode is TurnEnd.COMMIT
    assert obj["temperature"] == 0.3  # not a typed setting: passed through
    origin = config.echo()["origin"]
    assert (origin["model"], origin["voice"], origin["turn_detection"]) == (
        "flag",
        "session_file",
        "flag",
    )
