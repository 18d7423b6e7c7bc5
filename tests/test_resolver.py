"""The resolver's rules besides precedence: the defaults table, session objects, checks.

Precedence itself, setting by setting and command by command, is
tests/test_settings_precedence.py; what reaches the wire is tests/test_settings_wire.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from support.cli import invoke, one_line

from duplexctl.errors import BadInput
from duplexctl.resolver import (
    DEFAULTS,
    SPECS,
    Command,
    Origin,
    defaults,
    read_session_file,
    resolve,
    split_session_object,
)
from duplexctl.scenario.config import ReplayConfig
from duplexctl.scenario.model import Settings, TurnEnd
from duplexctl.scenario.parse import parse_scenario
from duplexctl.talk.config import TalkConfig

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "recordings" / "hello.wav"


def session(tmp_path: Path, obj: Any, name: str = "s.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


def test_the_defaults_table_states_how_commands_differ() -> None:
    """replay waits for the server's VAD, load commits, talk tries VAD then push-to-talk,
    probe always commits; all of them ask for 800 ms of VAD silence when they use VAD."""
    ends = {c: ReplayConfig.from_run(resolve(c)).end_mode for c in (Command.REPLAY, Command.LOAD)}
    assert ends == {Command.REPLAY: TurnEnd.VAD, Command.LOAD: TurnEnd.COMMIT}
    assert resolve(Command.TALK)["turn_detection"] == "auto"
    probe = resolve(Command.PROBE)
    assert probe.origins["turn_detection"] is Origin.FIXED
    assert probe.session_settings().to_session_object()["turn_detection"] is None
    assert probe["instructions"] == "duplexctl probe session"
    for command in Command:
        run = resolve(command)
        assert set(run.values) == set(defaults(command))
        if command is not Command.PROBE:
            vad = run.session_settings("server_vad").to_session_object()["turn_detection"]
            assert vad == {"type": "server_vad", "silence_duration_ms": 800}
    assert DEFAULTS.keys() == SPECS.keys()


def test_session_objects_split_into_typed_settings_and_the_rest() -> None:
    typed, rest = split_session_object(
        {
            "model": "m",
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 500, "threshold": 0.6},
            "extra_body": {"auto_response": True, "force_listen_count": 0},
            "audio": {"output": {"sample_rate_hz": 48000, "voice": "x"}},
            "sample_rate_hz": 24000,
            "idle_timeout_s": 60,
        }
    )
    assert typed == {
        "model": ("model", "m"),
        "turn_detection": ("turn_detection.type", "server_vad"),
        "vad_silence_ms": ("turn_detection.silence_duration_ms", 500),
        "auto_response": ("extra_body.auto_response", True),
        "input_rate": ("sample_rate_hz", 24000),
        "output_rate": ("audio.output.sample_rate_hz", 48000),
    }
    assert rest == {
        "turn_detection": {"threshold": 0.6},
        "extra_body": {"force_listen_count": 0},
        "audio": {"output": {"voice": "x"}},
        "idle_timeout_s": 60,
    }
    assert split_session_object({"turn_detection": None}) == (
        {"turn_detection": ("turn_detection", "none")},
        {},
    )


def test_vad_options_follow_the_resolved_turn_detection(tmp_path: Path) -> None:
    path = session(tmp_path, {"turn_detection": {"type": "server_vad", "threshold": 0.6}})
    vad = resolve(Command.REPLAY, session_file=path).session_settings().to_session_object()
    assert vad["turn_detection"] == {
        "type": "server_vad",
        "silence_duration_ms": 800,
        "threshold": 0.6,
    }
    run = resolve(Command.REPLAY, flags={"turn_detection": "none"}, session_file=path)
    assert run.session_settings().to_session_object()["turn_detection"] is None
    assert run.notes == ("turn_detection threshold ignored: turn detection is none",)


def test_a_whole_session_update_event_is_accepted_and_paths_are_relative_to_the_file(
    tmp_path: Path,
) -> None:
    voice = tmp_path / "voices" / "me.wav"
    voice.parent.mkdir()
    soundfile.write(voice, np.zeros(800, dtype=np.float32), 16000)
    path = session(
        tmp_path / "voices",
        {"type": "session.update", "session": {"ref_audio": "me.wav", "voice": "v"}},
    )
    assert read_session_file(path) == {"ref_audio": "me.wav", "voice": "v"}
    run = resolve(Command.TALK, session_file=path)
    assert run.echo()["ref_audio"] == str(voice)
    assert run["ref_audio"].startswith("data:audio/wav;base64,")
    assert run.origins["ref_audio"] is Origin.SESSION_FILE


def test_probe_notes_what_it_does_not_take(tmp_path: Path) -> None:
    path = session(
        tmp_path,
        {"turn_detection": {"type": "server_vad", "silence_duration_ms": 300}, "model": "m"},
    )
    run = resolve(Command.PROBE, session_file=path)
    assert run["model"] == "m" and run.origins["model"] is Origin.SESSION_FILE
    assert run.session_settings().to_session_object()["turn_detection"] is None
    assert run.notes == (
        f"--session {path}: turn_detection.type 'server_vad' ignored: probe always uses 'none'",
        f"--session {path}: turn_detection.silence_duration_ms 300 ignored: probe always uses None",
    )


@pytest.mark.parametrize(
    ("obj", "flags", "message"),
    [
        ({}, {"chunk_ms": 0}, "--chunk-ms must be a positive integer, not 0"),
        ({}, {"vad_silence_ms": -5}, "--vad-silence-ms must be a positive integer, not -5"),
        ({}, {"pace": "slow"}, "--pace must be realtime or fast, not 'slow'"),
        ({}, {"prebuffer_ms": -1.0}, "--prebuffer-ms must be a number >= 0, not -1.0"),
        ({}, {"response_timeout_s": 0.0}, "--response-timeout-s must be a number > 0"),
        ({}, {"turn_detection": "auto"}, "--turn-detection must be server_vad or none"),
        (
            {"sample_rate_hz": 4000},
            {},
            "--session {path}: sample_rate_hz must be an integer 8000-192000 (Hz), not 4000",
        ),
        (
            {"extra_body": {"auto_response": "yes"}},
            {},
            "--session {path}: extra_body.auto_response must be true or false, not 'yes'",
        ),
        (
            {"turn_detection": {"type": "semantic_vad"}},
            {},
            "--session {path}: turn_detection.type must be server_vad or none",
        ),
        ({"turn_detection": "server_vad"}, {}, "turn_detection must be an object or null"),
        ({"input_audio_format": "mp3"}, {}, "input_audio_format must be one of g711_alaw"),
        (
            {"sample_rate_hz": 11025},
            {},
            "replay's default chunk_ms 100 is not a whole number of samples at the input "
            "rate 11025 Hz (--session {path}: sample_rate_hz)",
        ),
        ({"ref_audio": "missing.wav"}, {}, "cannot read --session {path}: ref_audio"),
        ({}, {"ref_audio": "/nonexistent/v.wav"}, "cannot read --ref-audio /nonexistent/v.wav"),
    ],
)
def test_bad_values_are_one_line_naming_their_layer(
    tmp_path: Path, obj: dict[str, Any], flags: dict[str, Any], message: str
) -> None:
    path = session(tmp_path, obj)
    with pytest.raises(BadInput) as info:
        resolve(Command.REPLAY, flags=flags, session_file=path)
    text = str(info.value)
    assert message.format(path=path) in text
    assert "\n" not in text


def test_talk_checks_its_own_rules_once() -> None:
    with pytest.raises(BadInput, match="--chunk-ms must be a multiple of 20 ms"):
        TalkConfig(chunk_ms=30)
    with pytest.raises(BadInput, match="--turn-detection must be server_vad or none"):
        TalkConfig(turn_detection="semantic")  # type: ignore[arg-type]
    assert TalkConfig(turn_detection="auto").turn_detection == "auto"


def test_the_scenario_layer_is_checked_with_the_same_rules(tmp_path: Path) -> None:
    steps = f'[[step]]\naction = "say"\nfile = "{HELLO}"\n'
    path = tmp_path / "x.toml"
    with pytest.raises(BadInput, match=r"x.toml: settings: vad_silence_ms must be a positive"):
        parse_scenario("[settings]\nvad_silence_ms = 0\n" + steps, path)
    twice = parse_scenario('[settings]\nmodel = "a"\n[session]\nmodel = "b"\n' + steps, path)
    with pytest.raises(BadInput, match=r"x.toml: model is set twice: in \[settings\] and as"):
        resolve(Command.REPLAY, scenario=twice.settings)
    odd = parse_scenario("[session]\nsample_rate_hz = 4000\n" + steps, path)
    with pytest.raises(BadInput, match=r"x.toml: \[session\] sample_rate_hz must be an integer"):
        resolve(Command.LOAD, scenario=odd.settings)
    typed = parse_scenario('[session]\nmodel = "b"\nseed = 3\n' + steps, path)
    run = resolve(Command.REPLAY, scenario=typed.settings)
    assert run["model"] == "b" and run.origins["model"] is Origin.SCENARIO
    assert run.session_extra == {"seed": 3}
    assert Settings(chunk_ms=200).given() == {"chunk_ms": 200}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replay", str(HELLO), "--chunk-ms", "0"], "--chunk-ms must be a positive integer"),
        (
            ["load", str(HELLO), "--count", "1", "--sessions", "1", "--vad-silence-ms", "0"],
            "--vad-silence-ms must be a positive integer",
        ),
        (["probe", "--session", "/nonexistent/s.json"], "--session: /nonexistent/s.json: no such"),
        (["talk", "--chunk-ms", "30", "--output-device", "none"], "multiple of 20 ms"),
    ],
)
def test_cli_refuses_before_connecting(args: list[str], message: str) -> None:
    """The URL names a port nobody listens on: a value error is exit 2, never exit 3."""
    url = "ws://127.0.0.1:9/v1/realtime?duplex=1"
    done = invoke(*args, "--url", url)
    assert done.code == 2, done.stderr
    assert message in one_line(done.stderr)


def test_the_help_states_the_defaults_of_the_table() -> None:
    """Every settings option defaults to None (= not given), and the help shows the
    resolver's default for that command: the table is the one place it is written."""
    import typer
    from typer.main import get_command

    from duplexctl.cli import app
    from duplexctl.cli.help import describe
    from duplexctl.resolver import FLAGS, SPECS, Fixed

    group = get_command(app)
    stated = 0
    for command in Command:
        click_command = group.commands[command.value]  # type: ignore[attr-defined]
        params = {p.name: p for p in click_command.params}
        shown = {
            o.names.split(",")[0].split(" /")[0]: o.default
            for _, docs in describe(
                click_command, typer.Context(click_command, info_name=command.value)
            ).panels
            for o in docs
        }
        for name in FLAGS[command]:
            assert params[name].default is None, (command, name)
            value = defaults(command)[name]
            if value is None or isinstance(value, Fixed):
                continue
            text = shown[SPECS[name].flag]
            assert text is not None, (command, name)
            if isinstance(value, bool):
                assert text == ("--" if value else "--no-") + name.replace("_", "-")
            elif name == "response_timeout_s":
                assert text == f"{value:g}s"
            else:
                assert text == (f"{value:g}" if isinstance(value, float) else str(value))
            stated += 1
    assert stated >= 20


def test_tools_and_tool_outputs_rank_as_settings_and_are_checked(tmp_path: Path) -> None:
    """docs/protocol.md §13.4: ``--tools`` beats ``[session] tools``; ``--tool-outputs`` maps
    a tool name to its output (a JSON value is sent as its text) and a simulated latency."""
    weather = [{"type": "function", "name": "get_weather"}]
    nested = [{"type": "function", "function": {"name": "get_time"}}]
    flag = session(tmp_path, nested, "tools.json")
    text = '[[step]]\naction = "say"\nfile = "hello.wav"\n'
    scenario = parse_scenario(
        '[[session.tools]]\ntype = "function"\nname = "get_weather"\n' + text,
        ROOT / "recordings" / "x.toml",
    )
    run = resolve(Command.REPLAY, scenario=scenario.settings)
    assert run["tools"] == weather and run.origins["tools"] is Origin.SCENARIO
    assert run.session_settings().to_session_object()["tools"] == weather
    run = resolve(Command.REPLAY, scenario=scenario.settings, flags={"tools": flag})
    assert run["tools"] == nested and run.origins["tools"] is Origin.FLAG
    assert "tools" not in resolve(Command.REPLAY).session_settings().to_session_object()
    outputs = session(
        tmp_path, {"get_weather": {"output": {"t": 21}, "latency_ms": 300}, "x": "y"}, "o.json"
    )
    config = ReplayConfig.from_run(resolve(Command.LOAD, flags={"tool_outputs": outputs}))
    assert config.tool_outputs == {
        "get_weather": {"output": '{"t": 21}', "latency_ms": 300.0},
        "x": {"output": "y", "latency_ms": 0.0},
    }
    for bad, message in (
        ([{"type": "function"}], "tool 1 has no function name"),
        ({"a": 1}, "must be a list of function tools"),
        ([{"type": "code", "name": "x"}], "type must be function"),
    ):
        with pytest.raises(BadInput, match=f"--tools .*{message}"):
            resolve(Command.REPLAY, flags={"tools": session(tmp_path, bad, "bad.json")})
    with pytest.raises(BadInput, match=r"--tool-outputs .*latency_ms must be a number >= 0"):
        bad_out = session(tmp_path, {"t": {"output": "x", "latency_ms": -1}}, "bo.json")
        resolve(Command.REPLAY, flags={"tool_outputs": bad_out})
    with pytest.raises(BadInput, match=r"--tools .*cannot read"):
        resolve(Command.REPLAY, flags={"tools": tmp_path / "missing.json"})
