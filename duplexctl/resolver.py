"""One resolver of session and turn settings for every client command.

Why one: ``replay``, ``load``, ``talk`` and ``probe`` used to merge built-in defaults, the
scenario file, ``--session FILE.json`` and their flags each on their own, and the copies
disagreed (``load`` let a scenario beat an explicit ``--chunk-ms`` and dropped replay's VAD
silence; ``--session`` was merged last and beat every flag). The precedence is decided here,
once, lowest first::

    built-in default  <  scenario file  <  --session FILE.json  <  explicit flag

``None`` means "not given" in every layer (the command line's option defaults are None), so
a flag given with the default's value still wins. The built-in defaults are one table,
:data:`DEFAULTS`, with a column per command, because some defaults really differ: ``load``
commits every turn itself (``turn_detection none``) while ``replay`` waits for the server's
VAD, which moves ttfa by about the VAD silence (docs/protocol.md §6.1, docs/metrics.md). A
:class:`Fixed` entry is a value the command always uses (probe's sessions are always
client-committed): a layer that asks for another value is ignored, and that is said in
``notes``.

Session objects (``--session FILE.json`` and a scenario's ``[session]`` table): the keys that
carry a typed setting (:data:`SESSION_KEYS`: ``model``, ``turn_detection.type``,
``turn_detection.silence_duration_ms``, ``extra_body.auto_response``, the formats and rates …)
take part in the precedence as their layer; every other key is passed into the opening
``session.update`` untouched (docs/protocol.md §3.1). A relative ``ref_audio`` path in a
session file is relative to that file, as paths in a scenario are relative to the scenario.

Every value is checked here, named the way its layer spells it (``--chunk-ms``,
``x.toml: settings: chunk_ms``, ``--session s.json: sample_rate_hz``), before any socket is
opened: one :class:`~duplexctl.errors.BadInput` line, exit 2. The scenario parser uses the
same checks (:func:`check_setting`). The result, :class:`RunSettings`, keeps where each
setting came from (:class:`Origin`), so every report echoes the settings actually used.

Public API::

    resolve(command, *, flags=None, scenario=None, session_file=None) -> RunSettings
    DEFAULTS; FLAGS[command]; SCENARIO_SETTINGS; SESSION_KEYS
    RunSettings[name]; .origins; .session_settings(turn_detection=None); .echo()
    check_setting(name, value) -> value          # raises ValueError(why)
    split_session_object(obj) -> (typed, rest)   # typed: {name: (dotted key, value)}
    read_session_file(path) -> dict              # raises BadInput
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, cast

from duplexctl.audio import pcm
from duplexctl.audio.pacer import Pace
from duplexctl.errors import BadInput
from duplexctl.protocol.settings import (
    DATA_URI_PREFIX,
    SessionSettings,
    TurnDetection,
    deep_merge,
    ref_audio_data_uri,
)


@dataclass(frozen=True, slots=True)
class Settings:
    """The scenario's layer of the run settings; ``None`` = not set by the scenario.

    Defined here, not in ``scenario.model`` (which re-exports it), so that the resolver
    depends on nothing above it. The resolver places this layer above the built-in defaults
    and below ``--session FILE.json`` and explicit flags. ``session`` is the ``[session]``
    table as written: its keys that carry a typed setting (``model``, ``turn_detection`` …)
    count as this layer too, the rest goes into the opening ``session.update`` as-is.
    ``source`` is the scenario file, named in messages.
    """

    model: str | None = None
    voice: str | None = None
    ref_audio: Path | None = None
    instructions: str | None = None
    turn_detection: str | None = None  # "server_vad" | "none"
    vad_silence_ms: int | None = None
    auto_response: bool | None = None
    commit: bool | None = None
    chunk_ms: int | None = None
    pace: Pace | None = None
    response_timeout_s: float | None = None
    prebuffer_ms: float | None = None
    tools: Any = None  # a JSON file (path) or the list itself
    tool_outputs: Any = None  # a JSON file (path) or the table itself
    session: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None

    def given(self) -> dict[str, Any]:
        """The settings the scenario sets (``[settings]`` only), by name."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("session", "source") and getattr(self, f.name) is not None
        }


class Command(StrEnum):
    """The client commands, one column of :data:`DEFAULTS` each."""

    REPLAY = "replay"
    LOAD = "load"
    TALK = "talk"
    PROBE = "probe"


class Origin(StrEnum):
    """Where a resolved setting came from (echoed in every report)."""

    DEFAULT = "default"
    SCENARIO = "scenario"
    SESSION_FILE = "session_file"
    FLAG = "flag"
    FIXED = "fixed"  # the command always uses this value


@dataclass(frozen=True, slots=True)
class Fixed:
    """A value the command always uses, whatever a layer asks (the ask is noted)."""

    value: Any


class _NotApplicable:
    def __repr__(self) -> str:
        return "n/a"


NA: Final = _NotApplicable()  # the command has no such setting

# Talk captures the microphone in blocks of this many ms; its appends are whole blocks.
TALK_BLOCK_MS: Final = 20
# espeak-style sentences pause ~400 ms at a comma: 800 ms keeps one utterance one turn,
# where vLLM-Omni's own default of 500 ms splits it (docs/protocol.md §6.2).
VAD_SILENCE_MS: Final = 800

PROBE_INSTRUCTIONS: Final = "duplexctl probe session"  # names the sessions in a server's logs

_COLUMNS: Final = (Command.REPLAY, Command.LOAD, Command.TALK, Command.PROBE)

# The built-in defaults: one row per setting, one column per command (the order of _COLUMNS).
# turn_detection: replay lets the server's VAD end turns; load commits each turn itself (one
# variable less under load); talk asks for server VAD and falls back to push-to-talk; probe
# commits, the lane every server has and the one its probes drive. Probe's own audio is
# 16 kHz pcm16 (probe/context.py), so it must say so. Load paces in real time: its send lag
# and invalid_pacing mean nothing otherwise. prebuffer_ms: replay keeps a small jitter
# buffer (real-time deltas arrive a few ms apart); load starts playback at the first delta,
# so first_audible_ms is the server's; talk's device buffers by itself.
# fmt: off
DEFAULTS: Final[dict[str, tuple[Any, Any, Any, Any]]] = {
    # setting             replay            load                   talk            probe
    "model":              (None,            None,                  None,           None),
    "voice":              (None,            None,                  None,           None),
    "ref_audio":          (None,            None,                  None,           None),
    "instructions":       (None,            None,                  None,           PROBE_INSTRUCTIONS),
    "turn_detection":     ("server_vad",    "none",                "auto",         Fixed("none")),
    "vad_silence_ms":     (VAD_SILENCE_MS,  VAD_SILENCE_MS,        VAD_SILENCE_MS, Fixed(None)),
    "auto_response":      (False,           False,                 False,          Fixed(False)),
    "commit":             (False,           False,                 NA,             NA),
    "input_format":       ("pcm16",         "pcm16",               "pcm16",        Fixed("pcm16")),
    "input_rate":         (16000,           16000,                 16000,          Fixed(16000)),
    "output_format":      ("pcm16",         "pcm16",               "pcm16",        "pcm16"),
    "output_rate":        (24000,           24000,                 24000,          24000),
    "chunk_ms":           (100,             100,                   100,            NA),
    "pace":               (Pace.REALTIME,   Fixed(Pace.REALTIME),  NA,             NA),
    "response_timeout_s": (20.0,            20.0,                  NA,             NA),
    "prebuffer_ms":       (100.0,           0.0,                   0.0,            NA),
    "tools":              (None,            None,                  NA,             NA),
    "tool_outputs":       (None,            None,                  NA,             NA),
}
# fmt: on

# Where a session object carries a typed setting (dotted path -> setting).
SESSION_KEYS: Final[dict[tuple[str, ...], str]] = {
    ("model",): "model",
    ("voice",): "voice",
    ("ref_audio",): "ref_audio",
    ("instructions",): "instructions",
    ("turn_detection", "type"): "turn_detection",
    ("turn_detection", "silence_duration_ms"): "vad_silence_ms",
    ("extra_body", "auto_response"): "auto_response",
    ("input_audio_format",): "input_format",
    ("sample_rate_hz",): "input_rate",
    ("output_audio_format",): "output_format",
    ("audio", "output", "sample_rate_hz"): "output_rate",
    ("tools",): "tools",
}


# --- checks: the value normalised, or ValueError(why) -----------------------------------------


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {value!r}")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"must be a positive integer, not {value!r}")
    return value


def _positive(value: Any) -> float:
    if not _is_number(value) or value <= 0:
        raise ValueError(f"must be a number > 0, not {value!r}")
    return float(value)


def _non_negative(value: Any) -> float:
    if not _is_number(value) or value < 0:
        raise ValueError(f"must be a number >= 0, not {value!r}")
    return float(value)


def _rate(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 8000 <= value <= 192000:
        raise ValueError(f"must be an integer 8000-192000 (Hz), not {value!r}")
    return value


def _format(aliases: Mapping[str, str], *, output: bool) -> Callable[[Any], str]:
    known = ", ".join(sorted(set(aliases.values())))

    def check(value: Any) -> str:
        if pcm.normalize_format(value, output=output) is None:
            raise ValueError(f"must be one of {known} (or an alias), not {value!r}")
        return str(value)

    return check


def _turn_detection(value: Any) -> str:
    if value not in ("server_vad", "none"):
        raise ValueError(f"must be server_vad or none, not {value!r}")
    return str(value)


def _pace(value: Any) -> Pace:
    try:
        return Pace(value)
    except ValueError:
        raise ValueError(f"must be realtime or fast, not {value!r}") from None


def _ref_audio(value: Any) -> str | Path:
    """A data: URI as is, else a path (read when the run resolves it)."""
    if isinstance(value, str) and value.startswith(DATA_URI_PREFIX):
        return value
    if isinstance(value, Path) or (isinstance(value, str) and value):
        return Path(value)
    raise ValueError(f"must be a file name or a data: URI, not {value!r}")


def _json_file(value: Any) -> Any:
    """The JSON document of a file named by ``value`` (a path), or ``value`` itself."""
    if not isinstance(value, Path | str):
        return value
    path = Path(value)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None


def _tools(value: Any) -> list[dict[str, Any]]:
    """Function tools for the session (docs/protocol.md §13.4): a list (or ``{"tools": […]}``)
    of ``{"type": "function", "name": …}`` or ``{"type": "function", "function": {"name": …}}``;
    a file name is read."""
    doc = _json_file(value)
    if isinstance(doc, dict) and "tools" in doc:
        doc = doc["tools"]
    if not isinstance(doc, list):
        raise ValueError(f"must be a list of function tools, not {type(doc).__name__}")
    for i, tool in enumerate(doc):
        spec = tool.get("function") if isinstance(tool, dict) else None
        flat = spec if isinstance(spec, dict) else tool
        name = flat.get("name") if isinstance(flat, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"tool {i + 1} has no function name")
        if isinstance(tool, dict) and tool.get("type", "function") != "function":
            raise ValueError(f"tool {name!r}: type must be function, not {tool.get('type')!r}")
    return copy.deepcopy(doc)


def _tool_outputs(value: Any) -> dict[str, dict[str, Any]]:
    """What the client answers each tool with: ``{name: output}`` or ``{name: {"output": …,
    "latency_ms": N}}`` (the simulated time the tool takes); an output that is not a string
    is sent as its JSON text. A file name is read."""
    doc = _json_file(value)
    if not isinstance(doc, dict):
        raise ValueError(f"must be an object of tool name -> output, not {type(doc).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in doc.items():
        latency: Any = 0.0
        if isinstance(entry, dict) and "output" in entry:
            latency = entry.get("latency_ms", 0.0)
            unknown = sorted(set(entry) - {"output", "latency_ms"})
            if unknown:
                raise ValueError(f"{name}: unknown key {unknown[0]!r} (output, latency_ms)")
            entry = entry["output"]
        if not _is_number(latency) or latency < 0:
            raise ValueError(f"{name}: latency_ms must be a number >= 0, not {latency!r}")
        output = entry if isinstance(entry, str) else json.dumps(entry)
        out[str(name)] = {"output": output, "latency_ms": float(latency)}
    return out


@dataclass(frozen=True, slots=True)
class Spec:
    """One setting: its flag (how the command line spells it) and its check."""

    flag: str | None
    check: Callable[[Any], Any]


SPECS: Final[dict[str, Spec]] = {
    "model": Spec("--model", _text),
    "voice": Spec("--voice", _text),
    "ref_audio": Spec("--ref-audio", _ref_audio),
    "instructions": Spec("--instructions", _text),
    "turn_detection": Spec("--turn-detection", _turn_detection),
    "vad_silence_ms": Spec("--vad-silence-ms", _positive_int),
    "auto_response": Spec("--auto-response", _boolean),
    "commit": Spec("--commit", _boolean),
    "input_format": Spec(None, _format(pcm.FORMAT_ALIASES, output=False)),
    "input_rate": Spec(None, _rate),
    "output_format": Spec(None, _format(pcm.OUTPUT_FORMAT_ALIASES, output=True)),
    "output_rate": Spec(None, _rate),
    "chunk_ms": Spec("--chunk-ms", _positive_int),
    "pace": Spec("--pace", _pace),
    "response_timeout_s": Spec("--response-timeout-s", _positive),
    "prebuffer_ms": Spec("--prebuffer-ms", _non_negative),
    "tools": Spec("--tools", _tools),
    "tool_outputs": Spec("--tool-outputs", _tool_outputs),
}
assert SPECS.keys() == DEFAULTS.keys()

# What a scenario's [settings] table takes: every setting but the formats and rates, which
# belong to the session object ([session], --session) and have no flag either.
SCENARIO_SETTINGS: Final = frozenset(name for name, spec in SPECS.items() if spec.flag)
# The flags each command has (None in them = not given).
FLAGS: Final[dict[Command, frozenset[str]]] = {
    Command.REPLAY: SCENARIO_SETTINGS,
    Command.LOAD: SCENARIO_SETTINGS - {"pace"},
    Command.TALK: SCENARIO_SETTINGS
    - {"commit", "pace", "response_timeout_s", "tools", "tool_outputs"},
    Command.PROBE: frozenset({"model", "ref_audio"}),
}


def check_setting(name: str, value: Any, command: Command | None = None) -> Any:
    """``value`` checked and normalised for setting ``name``; ValueError(why) otherwise.

    The one definition of what each setting accepts, used for every layer (the scenario
    parser calls it too). ``talk`` alone also takes ``turn_detection = auto``.
    """
    if name == "turn_detection" and command is Command.TALK and value == "auto":
        return "auto"
    return SPECS[name].check(value)


def defaults(command: Command) -> dict[str, Any]:
    """``command``'s column of :data:`DEFAULTS` (settings it does not have left out)."""
    index = _COLUMNS.index(command)
    return {name: row[index] for name, row in DEFAULTS.items() if row[index] is not NA}


# --- session objects -------------------------------------------------------------------------


def read_session_file(path: str | Path) -> dict[str, Any]:
    """The JSON object of ``--session FILE.json`` (BadInput naming the file otherwise)."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"cannot read --session {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"--session {path} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadInput(f"--session {path} must contain a JSON object, not {type(obj).__name__}")
    # A file may hold a whole session.update event or just its session object.
    if obj.get("type") == "session.update" and isinstance(obj.get("session"), dict):
        return dict(obj["session"])
    return obj


def split_session_object(
    obj: Mapping[str, Any],
) -> tuple[dict[str, tuple[str, Any]], dict[str, Any]]:
    """(typed settings found, everything else) of a session object.

    ``typed`` maps a setting to (its dotted key, its value). ``turn_detection: null`` is
    ``turn_detection = none``; the other keys of a ``turn_detection`` object stay in the rest
    (server VAD options such as ``threshold``). Nothing is checked here.
    """
    rest = copy.deepcopy(dict(obj))
    typed: dict[str, tuple[str, Any]] = {}
    if "turn_detection" in rest and rest["turn_detection"] is None:
        del rest["turn_detection"]
        typed["turn_detection"] = ("turn_detection", "none")
    for path, name in SESSION_KEYS.items():
        holder: Any = rest
        for key in path[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and path[-1] in holder:
            typed[name] = (".".join(path), holder.pop(path[-1]))
    return typed, rest


# --- the result ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunSettings:
    """Every session and turn setting of one run: the value used and where it came from.

    ``values`` holds each setting the command has (``ref_audio`` as the data: URI sent;
    ``ref_audio_source`` is what the user named). ``session_extra`` and ``vad_options`` are
    the session-object keys no setting covers, passed through. Picklable: load's worker
    processes receive it resolved.
    """

    command: Command
    values: Mapping[str, Any]
    origins: Mapping[str, Origin]
    session_extra: Mapping[str, Any]
    vad_options: Mapping[str, Any]
    notes: tuple[str, ...] = ()
    ref_audio_source: str | None = None

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def as_flag(self, name: str) -> Any:
        """The value as a flag would give it: ``ref_audio`` as the file named, not the data
        URI sent (what a config built from flags holds once resolved)."""
        return self.ref_audio_source if name == "ref_audio" else self.values[name]

    def session_settings(self, turn_detection: str | None = None) -> SessionSettings:
        """The opening session.update's settings; ``turn_detection`` overrides the resolved
        one (talk's ``auto`` first asks for server VAD, then falls back to ``none``)."""
        v = self.values
        td = turn_detection or v["turn_detection"]
        if td == "auto":
            td = "server_vad"
        return SessionSettings(
            model=v["model"],
            voice=v["voice"],
            ref_audio=v["ref_audio"],
            instructions=v["instructions"],
            turn_detection=cast(TurnDetection, td),  # SessionSettings checks the value
            vad_silence_ms=v["vad_silence_ms"] if td == "server_vad" else None,
            auto_response=v["auto_response"],
            input_format=v["input_format"],
            input_rate=v["input_rate"],
            output_format=v["output_format"],
            output_rate=v["output_rate"],
            tools=v.get("tools"),
            extra=copy.deepcopy(dict(self.session_extra)),
            vad_options=copy.deepcopy(dict(self.vad_options)),
        )

    def echo(self) -> dict[str, Any]:
        """The settings used, for a report: each value, then ``origin`` of each, the
        passed-through session keys and the notes (no secret is a setting)."""
        out: dict[str, Any] = {}
        for name, value in self.values.items():
            if name == "ref_audio":
                value = self.ref_audio_source
            out[name] = value.value if isinstance(value, StrEnum) else value
        out["origin"] = {name: origin.value for name, origin in self.origins.items()}
        out["session_extra"] = copy.deepcopy(dict(self.session_extra))
        if self.vad_options:
            out["vad_options"] = copy.deepcopy(dict(self.vad_options))
        out["notes"] = list(self.notes)
        return out


# --- resolution ------------------------------------------------------------------------------


class _Layers:
    """The running resolution: values, origins, how the deciding layer spelled each one."""

    def __init__(self, command: Command) -> None:
        self.command = command
        self.values: dict[str, Any] = {}
        self.origins: dict[str, Origin] = {}
        self.labels: dict[str, str] = {}
        self.notes: list[str] = []
        for name, default in defaults(command).items():
            fixed = isinstance(default, Fixed)
            self.values[name] = default.value if fixed else default
            self.origins[name] = Origin.FIXED if fixed else Origin.DEFAULT
            self.labels[name] = f"{command}'s default {name}"

    def give(self, origin: Origin, name: str, value: Any, label: str) -> None:
        if name not in self.values:
            raise TypeError(f"{self.command} has no setting {name!r}")  # a caller's bug
        try:
            value = check_setting(name, value, self.command)
        except ValueError as exc:
            raise BadInput(f"{label} {exc}") from None
        if self.origins[name] is Origin.FIXED:
            if value != self.values[name]:
                fixed = self.values[name]
                shown = fixed.value if isinstance(fixed, StrEnum) else fixed
                self.notes.append(
                    f"{label} {value!r} ignored: {self.command} always uses {shown!r}"
                )
            return
        self.values[name], self.origins[name], self.labels[name] = value, origin, label


def resolve(
    command: Command,
    *,
    flags: Mapping[str, Any] | None = None,
    scenario: Settings | None = None,
    session_file: str | Path | None = None,
) -> RunSettings:
    """Resolve ``command``'s settings from its layers; BadInput (one line) on any bad value.

    ``flags`` maps setting names to what the command line gave (None = not given);
    ``scenario`` is the scenario file's layer; ``session_file`` is ``--session``. Files
    (the session file, the ``ref_audio`` that wins) are read here, before any socket opens.
    """
    layers = _Layers(command)
    passthrough: dict[str, Any] = {}
    if scenario is not None:
        where = str(scenario.source) if scenario.source is not None else "scenario"
        given = scenario.given()
        for name, value in given.items():
            layers.give(Origin.SCENARIO, name, value, f"{where}: settings: {name}")
        typed, passthrough = _split(scenario.session, f"{where}: [session]")
        for name, (key, value) in typed.items():
            if name in given:
                raise BadInput(
                    f"{where}: {name} is set twice: in [settings] and as [session] {key}"
                )
            if name == "ref_audio" and scenario.source is not None:
                value = _relative(value, scenario.source.parent)
            layers.give(Origin.SCENARIO, name, value, f"{where}: [session] {key}")
    if session_file is not None:
        typed, rest = _split(read_session_file(session_file), f"--session {session_file}:")
        for name, (key, value) in typed.items():
            if name == "ref_audio":
                value = _relative(value, Path(session_file).parent)
            layers.give(Origin.SESSION_FILE, name, value, f"--session {session_file}: {key}")
        passthrough = deep_merge(passthrough, rest)
    for name, value in (flags or {}).items():
        if name not in FLAGS[command]:
            raise TypeError(f"{command} has no flag for {name!r}")  # a caller's bug
        if value is not None:
            layers.give(Origin.FLAG, name, value, SPECS[name].flag or name)
    _check_together(layers)

    values = layers.values
    source = values.get("ref_audio")
    if source is not None:
        values["ref_audio"] = ref_audio_data_uri(source, what=layers.labels["ref_audio"])
    vad_options = passthrough.pop("turn_detection", None) or {}
    if vad_options and values["turn_detection"] == "none":
        keys = ", ".join(sorted(vad_options))
        layers.notes.append(f"turn_detection {keys} ignored: turn detection is none")
        vad_options = {}
    run = RunSettings(
        command=command,
        values=values,
        origins=layers.origins,
        session_extra=passthrough,
        vad_options=vad_options,
        notes=tuple(layers.notes),
        ref_audio_source=None
        if source is None
        else ("data: URI" if str(source).startswith(DATA_URI_PREFIX) else str(source)),
    )
    run.session_settings().to_session_object()  # the object builds: nothing left to fail later
    return run


def _split(obj: Mapping[str, Any], where: str) -> tuple[dict[str, tuple[str, Any]], dict[str, Any]]:
    """:func:`split_session_object`, refusing the shapes that hold typed settings wrongly."""
    for key, shape in (("turn_detection", "an object or null"), ("extra_body", "an object")):
        value = obj.get(key)
        if (
            key in obj
            and not isinstance(value, dict)
            and not (key == "turn_detection" and value is None)
        ):
            raise BadInput(f"{where} {key} must be {shape}, not {value!r}")
    return split_session_object(obj)


def _relative(value: Any, base: Path) -> Any:
    """A relative ``ref_audio`` path, relative to the file that names it."""
    if isinstance(value, str) and value and not value.startswith(DATA_URI_PREFIX):
        path = Path(value)
        return path if path.is_absolute() else base / path
    return value


def _check_together(layers: _Layers) -> None:
    """Rules between settings, named by the layer that decided the value."""
    values, labels = layers.values, layers.labels
    chunk = values.get("chunk_ms")
    if chunk is None:
        return
    rate = values["input_rate"]
    if rate * chunk % 1000:
        raise BadInput(
            f"{labels['chunk_ms']} {chunk} is not a whole number of samples at the input rate "
            f"{rate} Hz ({labels['input_rate']})"
        )
    if layers.command is Command.TALK and chunk % TALK_BLOCK_MS:
        raise BadInput(
            f"{labels['chunk_ms']} must be a multiple of {TALK_BLOCK_MS} ms (talk captures "
            f"{TALK_BLOCK_MS} ms blocks), not {chunk}"
        )
