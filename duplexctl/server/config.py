"""Settings of the reference server, one dataclass shared by the CLI, the transport, the
session engine and the simulated model.

Defaults follow vLLM-Omni 0.30.0's ``DuplexSessionRuntimeConfig`` (docs/protocol.md §6.6) except
``max_sessions`` (4, MiniCPM-o's deploy profile) and the model-native lane's 1000 ms unit.
"""

from __future__ import annotations

import json
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal

from duplexctl.protocol.names import Dialect
from duplexctl.server.behaviour import Behaviour
from duplexctl.units import MiB


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault or known server bug (``--fault NAME[=VALUE]``)."""

    name: str
    value: float | None = None


KNOWN_FAULTS = {
    # a session whose session.created could not be delivered stays in disconnect grace
    # (holding its admission slot) instead of being closed at once
    "leak-undelivered-created": False,
    # a response created for an append that then fails never gets its response.done
    "orphan-response": False,
    # after a barge-in the turn gate stays closed: the next utterance is committed but
    # never answered
    "stuck-gate": False,
    # drop the connection (no close frame) after N server events on it
    "drop-after": True,
    # add this many ms to every model step (time to first audio and chunk period)
    "latency-ms": True,
    # every N-th append fails inside the session (runtime_append_failed)
    "fail-append-every": True,
    # frame-locked lane (--model-profile frame): every N-th output packet of a session is
    # never sent, a known frame deficit (docs/metrics.md "Frame accounting")
    "drop-output-frame-every": True,
}


@dataclass(slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    dialect: Dialect = Dialect.G2
    served_model: str = "duplexctl/simulated-duplex"
    # lane/model personality: "turn" = Qwen3-Omni-like turn-based plugin (refuses
    # auto_response); "native" = MiniCPM-o-like model-native plugin (accepts both lanes);
    # "frame" = Nemotron VoiceChat-like: frame-locked 80 ms, auto_response only, tool calls
    model_profile: Literal["native", "turn", "frame"] = "native"

    # admission and lifecycle (docs/protocol.md §6.6-6.8)
    max_sessions: int = 4
    disconnect_grace_s: float = 30.0
    idle_ttl_s: float | None = 300.0
    reaper_interval_s: float = 1.0
    resume_replay_ttl_s: float = 60.0
    resume_replay_max_bytes: int = 8 * MiB
    config_timeout_s: float = 10.0
    ws_idle_timeout_s: float = 300.0
    max_event_bytes: int = 15 * MiB  # event_too_large above this (socket stays open)
    ws_max_size: int = 16 * MiB  # websocket layer: close 1009 above this
    max_pending_input_bytes: int = 16 * MiB  # counted as float32 at 16 kHz
    max_pending_turns: int = 4
    max_send_backlog_bytes: int = 32 * MiB  # a connection not reading is dropped above this
    # items created by conversation.item.create, encoded (input_backpressure above this)
    max_history_bytes: int = 16 * MiB

    # simulated model (docs/architecture.md: honest about time)
    voice: Literal["tone", "echo"] = "tone"
    reply_seconds: float = 2.0
    ttfa_ms: float = 300.0
    ttfa_jitter_ms: float = 0.0
    chunk_ms: int = 1000  # output audio chunk (model unit); 80 for PersonaPlex-like
    output_rate: int = 24000
    realtime_factor: float = 1.0  # 1 = deltas paced in real time, 0 = as fast as computed
    gpu_slots: int = 0  # 0 = unlimited (no contention)
    unit_compute_ms: float = 0.0  # GPU time one output unit occupies a slot
    silence_units: int = 1  # native lane: silent units after speech before answering
    # frame profile (docs/protocol.md §13; server/engine/frame_lane.py)
    eou_ms: float = 640.0  # silence after the user's speech before the model takes its turn
    barge_in_ms: float = 240.0  # speech over the answer before the model ends its turn
    tool_call: str | None = None  # call this declared tool on a session's first turn
    tool_args: str = '{"city": "Paris"}'  # the call's arguments (a JSON object)
    seed: int | None = None

    faults: list[Fault] = field(default_factory=list)
    # conversational behaviours with known ground truth (--behaviour, server/behaviour.py)
    behaviour: Behaviour = field(default_factory=Behaviour)

    def fault(self, name: str) -> Fault | None:
        """The injected fault called ``name``, if it is on."""
        for fault in self.faults:
            if fault.name == name:
                return fault
        return None


def parse_fault(spec: str) -> Fault:
    """Parse ``NAME`` or ``NAME=VALUE``; raises ValueError naming the problem."""
    name, _, value = spec.partition("=")
    name = name.strip()
    if name not in KNOWN_FAULTS:
        known = ", ".join(sorted(KNOWN_FAULTS))
        raise ValueError(f"unknown fault {name!r} (known: {known})")
    takes_value = KNOWN_FAULTS[name]
    if takes_value and not value:
        raise ValueError(f"fault {name!r} needs a value: --fault {name}=N")
    if not takes_value and value:
        raise ValueError(f"fault {name!r} takes no value")
    try:
        return Fault(name, float(value) if value else None)
    except ValueError:
        raise ValueError(f"fault {name!r}: {value!r} is not a number") from None


# --- building a ServerConfig from what a user typed ----------------------------------------

#: ``serve`` options whose name is not their field's (``--fault`` is repeatable: ``faults``;
#: ``--output-chunk-ms`` is the model's output unit, not a client's append size; ``--reply``
#: what the model answers with, not a session's voice).
SERVE_OPTION_FIELDS: Final = {"output_chunk_ms": "chunk_ms", "fault": "faults", "reply": "voice"}
#: Fields ``--server-option KEY=VALUE`` does not set: not one scalar (faults, behaviour: their
#: own options), or fixed for an in-process server (loopback, a free port).
_NOT_AN_OPTION: Final = frozenset({"faults", "behaviour", "host", "port"})


class ConfigProblem(ValueError):
    """A field of :class:`ServerConfig` has a value the server cannot run with."""

    def __init__(self, field_name: str, why: str) -> None:
        super().__init__(f"{field_name} {why}")
        self.field = field_name
        self.why = why


def _types() -> dict[str, Any]:
    return typing.get_type_hints(ServerConfig)


def option_keys() -> tuple[str, ...]:
    """The keys ``--server-option KEY=VALUE`` takes: every scalar field of ServerConfig."""
    return tuple(sorted(f.name for f in fields(ServerConfig) if f.name not in _NOT_AN_OPTION))


def _convert(key: str, raw: str) -> Any:
    """``raw`` as field ``key``'s type; ValueError naming what it takes."""
    kind = _types()[key]
    text = raw.strip()
    args = typing.get_args(kind)
    if type(None) in args and text.lower() in ("none", "null", ""):
        return None
    if args and typing.get_origin(kind) is not typing.Literal:
        kind = next(a for a in args if a is not type(None))
    if typing.get_origin(kind) is typing.Literal:
        choices = [str(a) for a in typing.get_args(kind)]
        if text.lower() not in choices:
            raise ValueError(f"must be {' or '.join(choices)}, not {raw!r}")
        return text.lower()
    if isinstance(kind, type) and issubclass(kind, Dialect):
        try:
            return Dialect(text.lower())
        except ValueError:
            raise ValueError(f"must be g1 or g2, not {raw!r}") from None
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"must be true or false, not {raw!r}")
        return text.lower() in ("true", "1", "yes")
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"must be a whole number, not {raw!r}") from None
    if kind is float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"must be a number, not {raw!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, not {raw!r}")
        return value
    return text


def parse_option(item: str, *, flag: str = "--server-option") -> tuple[str, Any]:
    """``KEY=VALUE`` -> (field, value typed as the field is); BadInput naming the option,
    the value and, for an unknown key, every key there is."""
    from duplexctl.errors import BadInput

    key, sep, raw = item.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key:
        raise BadInput(f"{flag} {item!r}: expected KEY=VALUE, e.g. reply_seconds=1")
    if key not in option_keys():
        raise BadInput(f"{flag} {item!r}: unknown key {key!r}; keys: {', '.join(option_keys())}")
    try:
        return key, _convert(key, raw)
    except ValueError as exc:
        raise BadInput(f"{flag} {item!r}: {key} {exc}") from None


def check(config: ServerConfig) -> ServerConfig:
    """The values a server cannot run with, refused by field (:class:`ConfigProblem`)."""
    at_least_one = ("max_sessions", "max_pending_turns", "chunk_ms", "output_rate")
    for name in at_least_one:
        if getattr(config, name) < 1:
            raise ConfigProblem(name, f"must be at least 1, not {getattr(config, name)!r}")
    not_negative = (
        "reply_seconds",
        "ttfa_ms",
        "ttfa_jitter_ms",
        "realtime_factor",
        "gpu_slots",
        "unit_compute_ms",
        "disconnect_grace_s",
        "resume_replay_ttl_s",
        "config_timeout_s",
        "silence_units",
        "eou_ms",
        "barge_in_ms",
    )
    for name in not_negative:
        if getattr(config, name) < 0:
            raise ConfigProblem(name, f"must not be negative, not {getattr(config, name)!r}")
    if config.reaper_interval_s <= 0:
        raise ConfigProblem(
            "reaper_interval_s", f"must be above 0, not {config.reaper_interval_s!r}"
        )
    if not 0 <= config.port <= 65535:
        raise ConfigProblem("port", f"must be 0-65535, not {config.port!r}")
    if config.tool_call is not None and config.model_profile != "frame":
        raise ConfigProblem("tool_call", "needs --model-profile frame (the lane with tool calls)")
    try:
        arguments = json.loads(config.tool_args)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise ConfigProblem("tool_args", f"must be a JSON object, not {config.tool_args!r}")
    return config


def embedded(settings: Mapping[str, Any], spelled: Mapping[str, str] | None = None) -> ServerConfig:
    """The in-process reference server's config from a command's settings (ServerConfig
    fields); BadInput naming the option that set the bad one (``spelled``: field -> option,
    else ``--server-option FIELD``)."""
    from duplexctl.errors import BadInput

    known = {f.name for f in fields(ServerConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise BadInput(
            f"--server-option {unknown[0]}: unknown key; keys: {', '.join(option_keys())}"
        )
    try:
        return check(ServerConfig(**dict(settings)))
    except ConfigProblem as exc:
        option = (spelled or {}).get(exc.field, f"--server-option {exc.field}")
        raise BadInput(f"{option}: {exc.why}") from None


def serve_defaults() -> dict[str, str]:
    """``serve``'s defaults as its help shows them: {option: value} from the fields."""
    from duplexctl.values import format_duration

    base = ServerConfig()
    option_of = {field_name: option for option, field_name in SERVE_OPTION_FIELDS.items()}
    shown: dict[str, str] = {}
    for f in fields(ServerConfig):
        value = getattr(base, f.name)
        if f.name in _NOT_AN_OPTION - {"host", "port"} or value is None:
            continue
        option = "--" + option_of.get(f.name, f.name).replace("_", "-")
        if isinstance(value, Dialect):
            shown[option] = value.value
        elif f.name.endswith(("_s", "_seconds")):
            shown[option] = format_duration(float(value))
        elif isinstance(value, float):
            shown[option] = f"{value:g}"
        else:
            shown[option] = str(value)
    return shown


def from_options(given: Mapping[str, Any]) -> ServerConfig:
    """``serve``'s options (by parameter name; None = not given) -> a checked ServerConfig;
    BadInput naming the option, the value and what is valid."""
    from duplexctl.errors import BadInput
    from duplexctl.server.behaviour import parse_behaviours

    option_of = {field_name: option for option, field_name in SERVE_OPTION_FIELDS.items()}

    def flag(field_name: str) -> str:
        return "--" + option_of.get(field_name, field_name).replace("_", "-")

    settings: dict[str, Any] = {}
    for name, value in given.items():
        if value is None or value == []:
            continue
        settings[SERVE_OPTION_FIELDS.get(name, name)] = value
    faults = []
    for spec in settings.pop("faults", []):
        try:
            faults.append(parse_fault(spec))
        except ValueError as exc:
            raise BadInput(f"--fault {spec!r}: {exc}") from None
    if faults:
        settings["faults"] = faults
    if "behaviour" in settings:
        try:
            settings["behaviour"] = parse_behaviours(list(settings["behaviour"]))
        except ValueError as exc:
            raise BadInput(f"--behaviour: {exc}") from None
    if settings.get("idle_ttl_s") == 0:
        settings["idle_ttl_s"] = None  # 0: no idle TTL
    if "dialect" in settings:
        settings["dialect"] = Dialect(str(settings["dialect"]).lower())
    try:
        return check(ServerConfig(**settings))
    except ConfigProblem as exc:
        raise BadInput(f"{flag(exc.field)}: {exc.why}") from None
