"""The precedence of every setting, per command: defaults < scenario < --session < flags.

Table-driven: for each command (replay, load, talk, probe), each setting it has, and each
combination of the layers that can carry it (none, each alone, each pair, all three), the
layers are written as real files (a scenario TOML, a --session JSON, WAV voice clips) and
given to the command's own config building — replay's ``resolve(CliOptions, scenario)``,
``LoadConfig``, ``TalkConfig``, ``ProbeConfig`` — and the test checks the value resolved,
its origin, and that the opening session object carries it. A value the command fixes
(probe always commits turns; load always paces in real time) stays fixed, and a layer that
asks otherwise gets a note.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from support.loadconfig import load_config

from duplexctl.probe.runner import ProbeConfig
from duplexctl.resolver import (
    FLAGS,
    SCENARIO_SETTINGS,
    SESSION_KEYS,
    Command,
    Fixed,
    Origin,
    RunSettings,
    defaults,
)
from duplexctl.scenario.config import CliOptions, resolve
from duplexctl.scenario.parse import load_inputs
from duplexctl.talk.config import TalkConfig

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "recordings" / "hello.wav"
LAYERS = ("scenario", "session_file", "flag")  # lowest first
SESSION_PATH = {name: path for path, name in SESSION_KEYS.items()}
HAS_SCENARIO = {Command.REPLAY, Command.LOAD}  # talk and probe have no scenario

# A value per layer (scenario, --session, flag); each differs from the one below it where
# the setting has enough values (turn_detection has two: its origin tells the layers apart).
VALUES: dict[str, tuple[Any, Any, Any]] = {
    "model": ("m-scenario", "m-session", "m-flag"),
    "voice": ("v-scenario", "v-session", "v-flag"),
    "instructions": ("i-scenario", "i-session", "i-flag"),
    "ref_audio": ("voice_scenario.wav", "voice_session.wav", "voice_flag.wav"),
    "turn_detection": ("none", "server_vad", "none"),
    "vad_silence_ms": (500, 600, 700),
    "auto_response": (True, False, True),
    "commit": (True, None, False),
    "input_format": ("pcm_f32le", "g711_ulaw", None),
    "input_rate": (24000, 48000, None),
    "output_format": ("pcm_f32le", "g711_alaw", None),
    "output_rate": (16000, 48000, None),
    "chunk_ms": (200, None, 40),
    "pace": ("fast", None, "realtime"),
    "response_timeout_s": (12.5, None, 7.0),
    "prebuffer_ms": (40.0, None, 60.0),
    # a tool list or table in a scenario is a TOML table: test_resolver.py covers that layer
    "tools": (None, [{"type": "function", "name": "t-s"}], [{"type": "function", "name": "t-f"}]),
    "tool_outputs": (None, None, {"t": {"output": "x", "latency_ms": 1.0}}),
}
# Load's default turn detection is none: start its layers from server_vad instead.
LOAD_TURN_DETECTION = ("server_vad", "none", "server_vad")


def layer_values(command: Command, name: str) -> dict[str, Any]:
    scenario, session, flag = VALUES[name]
    if name == "turn_detection" and command is Command.LOAD:
        scenario, session, flag = LOAD_TURN_DETECTION
    found: dict[str, Any] = {}
    if command in HAS_SCENARIO and scenario is not None:
        found["scenario"] = scenario
    if session is not None and name in SESSION_PATH:
        found["session_file"] = session
    if flag is not None and name in FLAGS[command]:
        found["flag"] = flag
    return found


def cases() -> list[Any]:
    out = []
    for command in Command:
        for name in defaults(command):
            available = layer_values(command, name)
            for size in range(len(available) + 1):
                for layers in itertools.combinations(available, size):
                    given = {layer: available[layer] for layer in layers}
                    tag = "+".join(layers) or "default"
                    out.append(pytest.param(command, name, given, id=f"{command}-{name}-{tag}"))
    return out


# --- writing the layers as files ---------------------------------------------------------


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def wav(path: Path, seconds: float = 0.05) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, np.zeros(int(16000 * seconds), dtype=np.float32), 16000)
    return path


@dataclass
class Layers:
    """The files and flags of one case, and what the winning value looks like when echoed."""

    tmp: Path
    scenario: Path | None = None
    session_file: Path | None = None
    flags: dict[str, Any] | None = None

    def write(self, name: str, given: dict[str, Any]) -> None:
        self.flags = {}
        if "scenario" in given:
            self.scenario = self.tmp / "scn" / "case.toml"
            self.scenario.parent.mkdir(parents=True, exist_ok=True)
            value = given["scenario"]
            if name == "ref_audio":
                wav(self.scenario.parent / value)  # relative to the scenario file
            if name in SCENARIO_SETTINGS:
                table = f"[settings]\n{name} = {toml_value(value)}\n"
            else:
                table = f"[session]\n{'.'.join(SESSION_PATH[name])} = {toml_value(value)}\n"
            self.scenario.write_text(
                table + f'[[step]]\naction = "say"\nfile = "{HELLO}"\n[[step]]\naction = "wait"\n'
            )
        if "session_file" in given:
            self.session_file = self.tmp / "sess" / "session.json"
            self.session_file.parent.mkdir(parents=True, exist_ok=True)
            value = given["session_file"]
            if name == "ref_audio":
                wav(self.session_file.parent / value)  # relative to the session file
            obj: dict[str, Any] = {}
            if name == "turn_detection":
                obj["turn_detection"] = None if value == "none" else {"type": value}
            else:
                holder = obj
                *parents, last = SESSION_PATH[name]
                for key in parents:
                    holder = holder.setdefault(key, {})
                holder[last] = value
            self.session_file.write_text(json.dumps(obj))
        if "flag" in given:
            value = given["flag"]
            if name == "ref_audio":
                value = str(wav(self.tmp / "flag" / value))
            self.flags[name] = value

    def echoed(self, name: str, layer: str, value: Any) -> Any:
        """How the report echoes ``value`` given in ``layer`` (ref_audio: the file named)."""
        if name != "ref_audio":
            return value
        if layer == "scenario":
            assert self.scenario is not None
            return str(self.scenario.parent / value)
        if layer == "session_file":
            assert self.session_file is not None
            return str(self.session_file.parent / value)
        return str(self.tmp / "flag" / value)


# --- each command's own config building --------------------------------------------------


def build(command: Command, layers: Layers) -> RunSettings:
    flags = dict(layers.flags or {})
    session = str(layers.session_file) if layers.session_file else None
    if command is Command.REPLAY:
        scenario = load_inputs([layers.scenario or HELLO])
        if "ref_audio" in flags:
            flags["ref_audio"] = Path(flags["ref_audio"])
        config = resolve(CliOptions(session_file=layers.session_file, **flags), scenario.settings)
        for name in ("chunk_ms", "response_timeout_s", "prebuffer_ms"):
            assert getattr(config, name) == config.run[name]  # the runner uses what is echoed
        assert config.pace == config.run["pace"]
        assert config.echo()["origin"] == {k: v.value for k, v in config.run.origins.items()}
        return config.run
    if command is Command.LOAD:
        inputs = [str(layers.scenario or HELLO)]
        load = load_config(inputs=inputs, session_file=session, sessions=1, count=1, **flags)
        load.validate()
        run = load.settings
        echo = load.echo()
        assert load.chunk_ms == run["chunk_ms"]  # run.py reads it
        for name in ("chunk_ms", "prebuffer_ms", "response_timeout_s", "turn_detection"):
            assert echo[name] == run[name]  # the report reads these
        assert echo["origin"] == {k: v.value for k, v in run.origins.items()}
        return run
    if command is Command.TALK:
        return TalkConfig(output_device="none", session_file=layers.session_file, **flags).settings
    return ProbeConfig(session_file=session, **flags).settings


def on_the_wire(run: RunSettings, name: str) -> Any:
    """Where the opening session object carries the setting, or None for run settings."""
    obj = run.session_settings().to_session_object()
    if name == "turn_detection":
        td = obj["turn_detection"]
        return "none" if td is None else td["type"]
    if name == "vad_silence_ms":
        td = obj["turn_detection"]
        return None if td is None else td.get("silence_duration_ms")
    if name not in SESSION_PATH:
        return None
    holder: Any = obj
    for key in SESSION_PATH[name]:
        holder = holder.get(key) if isinstance(holder, dict) else None
    return holder


@pytest.mark.parametrize(("command", "name", "given"), cases())
def test_precedence(tmp_path: Path, command: Command, name: str, given: dict[str, Any]) -> None:
    layers = Layers(tmp_path)
    layers.write(name, given)
    run = build(command, layers)
    default = defaults(command)[name]
    winner = max(given, key=LAYERS.index) if given else None
    if isinstance(default, Fixed):
        expected, origin = default.value, Origin.FIXED
        asked_otherwise = [v for v in given.values() if v != default.value]
        assert len(run.notes) == (1 if asked_otherwise else 0), run.notes
        if asked_otherwise:
            assert "ignored" in run.notes[0] and str(command) in run.notes[0]
    elif winner is None:
        expected, origin = default, Origin.DEFAULT
    else:
        expected, origin = given[winner], Origin(winner)
    shown = (
        layers.echoed(name, winner, expected) if winner and origin is not Origin.FIXED else expected
    )
    echo = run.echo()
    assert echo[name] == (shown.value if hasattr(shown, "value") else shown)
    assert run.origins[name] is origin
    assert echo["origin"][name] == origin.value

    wire = on_the_wire(run, name)
    if name == "ref_audio" and expected is not None:
        assert wire is not None and wire.startswith("data:audio/wav;base64,")
    elif name == "vad_silence_ms":
        td = run["turn_detection"]
        assert wire == (expected if td in ("server_vad", "auto") else None)
    elif name == "turn_detection":
        assert wire == ("server_vad" if expected == "auto" else expected)
    elif name in SESSION_PATH:
        assert wire == expected
