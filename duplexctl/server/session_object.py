"""The session object: validation at open and at later updates, normalisation, echo rules.

docs/protocol.md §3.1, §4.3 and §6.2 describe one object checked at two moments with different
codes: at open every problem in the object is ``invalid_session_config`` (the connection then
ends), while a later ``session.update`` is checked first by the translator (unsequenced
``unsupported_audio_format`` / ``unsupported_turn_detection``) and then by the session
(sequenced ``model_update_unsupported`` …). The checks themselves are shared here and raise
:class:`SessionObjectError`; the caller decides which code and path the problem takes.

The echo rules of 0.30.0 are reproduced: the client's own keys come back (``extra_body``
never), ``playback_commit_policy`` is forced to ``ack_only`` at open, ``turn_detection`` is
returned with its defaults filled in (``create_response`` only when the client sent it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any, Final

from duplexctl.audio import pcm
from duplexctl.audio.pcm import normalize_format
from duplexctl.protocol.errors import ProtocolError
from duplexctl.server.config import ServerConfig
from duplexctl.server.wire_numbers import MAX_RATE, MIN_RATE, declared_rate, is_number

LISTEN_ONLY: Final = "listen_only"
BARGE_IN_ON_SPEECH: Final = "barge_in_on_speech"
ACK_ONLY: Final = "ack_only"
COMMIT_ALL_ON_DONE: Final = "commit_all_on_done"

TURN_DETECTION_KEYS: Final = frozenset(
    {
        "type",
        "threshold",
        "prefix_padding_ms",
        "silence_duration_ms",
        "create_response",
        "interrupt_response",
        "min_speech_duration_ms",
    }
)
_TD_DEFAULTS: Final[dict[str, Any]] = {
    "interrupt_response": True,
    "threshold": 0.5,
    "prefix_padding_ms": 300,
    "silence_duration_ms": 500,
    "min_speech_duration_ms": 96,
}
_SILERO_MIN_THRESHOLD: Final = 0.15

# Keys the engine interprets; everything else the client sends is echoed as sent.
_INTERPRETED: Final = frozenset(
    {
        "model",
        "modalities",
        "output_modalities",
        "instructions",
        "voice",
        "input_audio_format",
        "output_audio_format",
        "response_format",
        "turn_detection",
        "overlap_policy",
        "overlap_short_ack_ms",
        "overlap_barge_in_ms",
        "overlap_silence_rms",
        "playback_commit_policy",
        "temperature",
        "speed",
        "max_response_output_tokens",
        "max_output_tokens",
        "max_tokens",
        "idle_timeout_s",
        "extra_body",
        "session_id",
        "id",
        "audio",
        "input_audio_transcription",
        "tracing",
        "object",
        "type",
    }
)

_TURN_CAPABILITIES: Final[dict[str, Any]] = {
    "supports_session_adapter": True,
    "supports_model_native_turn_policy": False,
    "supports_external_turn_signal": True,
    "supports_client_commit": True,
    "supports_barge_in": True,
    "supports_playback_ack": True,
    "supports_input_append": True,
    "supports_replace_latest_chunk": False,
    "supports_reencode_context": True,
    "supports_rollback_to_checkpoint": False,
    "supports_turn_commit_only": True,
    "supports_kv_lease": False,
    "supports_core_kv_lease": False,
    "supports_model_internal_state": False,
    "supports_stage_resumption": False,
    "supports_scheduler_native_append": False,
    "supports_core_resumable_request": False,
    "supports_concurrent_turn_requests": False,
    "required_input_modalities": ["audio"],
    "optional_input_modalities": ["video"],
    "supports_stage_connector_handoff": False,
    "supports_independent_io_streams": True,
    "supports_realtime_endpoint": True,
    "supports_multi_session": True,
    "supports_multi_session_same_replica": True,
    "supports_session_lease": True,
    "supports_session_resume": True,
    "session_admission_mode": "engine_managed",
    "supports_audio_truncate": True,
    "supports_image_input": True,
    "supports_text_only_turn": True,
    "requires_model_runner_kv": False,
    "requires_native_stage_role": False,
    "implementation_level": "turn_based_duplex",
    "adapter_patterns": ["turn_commit"],
    "input_modes": ["append_audio_chunk"],
    "signal_sources": ["client_event", "server_policy"],
    "stage_handoff_transport": "scheduler_data_plane",
    "chunk_period_ms": 1000,
    "target_barge_in_latency_ms": None,
}

_NATIVE_OVERRIDES: Final[dict[str, Any]] = {
    "supports_model_native_turn_policy": True,
    "supports_turn_commit_only": False,
    "supports_model_internal_state": True,
    "supports_scheduler_native_append": True,
    "supports_text_only_turn": False,
    "supports_image_input": True,
    "session_admission_mode": "engine_managed",
    "implementation_level": "model_native_duplex",
    "adapter_patterns": ["native_duplex"],
    "signal_sources": ["model", "client_event", "server_policy"],
    "chunk_period_ms": 1000,
    "target_barge_in_latency_ms": 1000,
}


class SessionObjectError(ValueError):
    """A problem in a session object; ``kind`` is ``audio_format`` or ``turn_detection``
    (the two families whose code differs between open and update) or ``other``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# Nemotron VoiceChat's preset in vLLM-Omni 0.30.0 (docs/protocol.md §13): frame-locked 80 ms,
# the model's own barge-in only, no truncate, no text-only turn
_FRAME_OVERRIDES: Final[dict[str, Any]] = {
    **_NATIVE_OVERRIDES,
    "supports_external_turn_signal": False,
    "supports_barge_in": False,
    "supports_reencode_context": False,
    "supports_scheduler_native_append": False,
    "supports_core_resumable_request": True,
    "supports_stage_resumption": True,
    "supports_audio_truncate": False,
    "supports_image_input": False,
    "requires_model_runner_kv": True,
    "requires_native_stage_role": True,
    "adapter_patterns": ["scheduler_data_plane"],
    "signal_sources": ["model_native", "client_event"],
    "chunk_period_ms": 80,
    "target_barge_in_latency_ms": None,
}


def capabilities(config: ServerConfig) -> dict[str, Any]:
    """The ``capabilities`` dict of the configured model profile (a fresh copy)."""
    caps = copy.deepcopy(_TURN_CAPABILITIES)
    if config.model_profile == "native":
        caps.update(copy.deepcopy(_NATIVE_OVERRIDES))
    elif config.model_profile == "frame":
        caps.update(copy.deepcopy(_FRAME_OVERRIDES))
    return caps


@dataclass(slots=True)
class NegotiatedSettings:
    """The session's settings as the server negotiated them: the client's session object,
    validated and normalised (defaults filled, aliases resolved), that the engine acts on and
    echoes. Not the client's ``protocol.settings.SessionSettings`` (what a client asks for):
    a request, while this is what the server agreed to."""

    model: str
    modalities: list[str]
    output_modalities: list[str]
    instructions: str | None = None
    voice: str | None = None
    input_format: str = "pcm16"
    input_rate: int | float = 16000  # as declared; every append checks it (translate)
    output_format: str = "pcm16"
    output_rate: int | None = None
    turn_detection: dict[str, Any] | None = None
    overlap_policy: str = LISTEN_ONLY
    overlap_short_ack_ms: float = 700
    overlap_barge_in_ms: float = 1200
    overlap_silence_rms: float = pcm.SILENCE_RMS
    playback_commit_policy: str = ACK_ONLY
    temperature: float | None = None
    max_tokens: Any = None
    speed: float | None = None
    idle_timeout_s: float = 300.0
    auto_response: bool = False
    ref_audio: str | None = None
    input_audio_transcription: Any = None
    tracing: Any = None
    audio: dict[str, Any] | None = None
    echo: dict[str, Any] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)  # frame profile: the callable

    @property
    def server_vad(self) -> bool:
        return self.turn_detection is not None


# --- field checks shared by open and update ----------------------------------------------


def normalize_turn_detection(value: Any) -> dict[str, Any] | None:
    """Validate ``turn_detection`` (§6.2, 0.30.0's strict validator) and fill defaults."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SessionObjectError("turn_detection", "turn_detection must be an object or null")
    if value.get("type") != "server_vad":
        raise SessionObjectError("turn_detection", "turn_detection.type must be 'server_vad'")
    unknown = sorted(k for k in value if k not in TURN_DETECTION_KEYS)
    if unknown:
        raise SessionObjectError(
            "turn_detection", f"Unknown turn_detection field(s): {', '.join(unknown)}"
        )
    for key in ("threshold", "prefix_padding_ms", "silence_duration_ms", "min_speech_duration_ms"):
        if key in value and (not is_number(value[key]) or value[key] < 0):
            raise SessionObjectError(
                "turn_detection", f"turn_detection.{key} must be a non-negative number"
            )
    if "threshold" in value and not _SILERO_MIN_THRESHOLD < value["threshold"] <= 1.0:
        raise SessionObjectError(
            "turn_detection", "turn_detection.threshold must be > 0.15 and <= 1.0"
        )
    for key in ("create_response", "interrupt_response"):
        if key in value and not isinstance(value[key], bool):
            raise SessionObjectError("turn_detection", f"turn_detection.{key} must be a boolean")
    if value.get("interrupt_response") is False:
        raise SessionObjectError(
            "turn_detection", "turn_detection.interrupt_response=false is not supported"
        )
    out: dict[str, Any] = {"type": "server_vad"}
    for key, default in _TD_DEFAULTS.items():
        out[key] = value.get(key, default)
    if "create_response" in value:
        out["create_response"] = value["create_response"]
    return out


def sub_object(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """``obj[key]`` when it is an object, else an empty one: a nested object the client left
    out or sent as something else reads as empty (its own checks report a wrong type)."""
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def resolve_overlap_policy(obj: dict[str, Any], current: str | None) -> str:
    """The effective overlap policy of an object (0.30.0 normalisation/conflict rules)."""
    extra = sub_object(obj, "extra_body")
    raw = obj.get("overlap_policy", extra.get("overlap_policy"))
    if "turn_detection" in obj or ("audio" in obj and _audio_td_present(obj)):
        td = _turn_detection_value(obj)
        implied = LISTEN_ONLY if td is None else BARGE_IN_ON_SPEECH
        if raw is not None and raw != implied:
            raise SessionObjectError(
                "turn_detection",
                f"overlap_policy={raw!r} conflicts with turn_detection (expected {implied!r})",
            )
        return implied
    if raw == BARGE_IN_ON_SPEECH:
        raise SessionObjectError(
            "turn_detection",
            "overlap_policy='barge_in_on_speech' requires turn_detection.type='server_vad' "
            "on the Realtime endpoint",
        )
    if raw is None:
        return current or LISTEN_ONLY
    return LISTEN_ONLY


def _audio_td_present(obj: dict[str, Any]) -> bool:
    audio = obj.get("audio")
    return (
        isinstance(audio, dict)
        and isinstance(audio.get("input"), dict)
        and "turn_detection" in audio["input"]
    )


def _turn_detection_value(obj: dict[str, Any]) -> Any:
    if "turn_detection" in obj:
        return obj["turn_detection"]
    return obj["audio"]["input"]["turn_detection"]


def _format_name(value: Any, *, output: bool) -> str | None:
    """A format given as a beta string or a GA ``{"type": "audio/pcm", "rate": N}`` object."""
    if isinstance(value, dict):
        value = value.get("type")
    if not isinstance(value, str):
        return None
    return normalize_format(value, output=output)


def _format_rate(value: Any) -> int | float | None:
    """The rate inside a GA format object (``rate``, ``sample_rate_hz`` or ``sample_rate``)."""
    if not isinstance(value, dict):
        return None
    return declared_rate(
        value.get("rate") or value.get("sample_rate_hz") or value.get("sample_rate")
    )


def _first_given(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def check_formats(
    obj: dict[str, Any],
) -> tuple[str | None, int | float | None, str | None, int | None]:
    """Input/output formats and rates declared by ``obj`` (None when not declared).

    Rates are read as vLLM-Omni 0.30.0 reads them (wire_numbers.declared_rate): the first
    truthy of ``sample_rate_hz``, ``sample_rate``, ``audio.input.sample_rate_hz``/``_rate``
    and the GA format object's rate; one that is not a positive number declares nothing. An
    input rate outside 8000-192000 Hz is taken as declared, like 0.30.0 takes it, and every
    append decoded at it is refused (translate._append_rate). An output rate outside that
    range is refused here: 0.30.0 accepts it and then never delivers the reply's audio.
    """
    in_fmt = out_fmt = None
    audio = sub_object(obj, "audio")
    a_in = sub_object(audio, "input")
    a_out = sub_object(audio, "output")
    raw_in = _first_given(obj.get("input_audio_format"), a_in.get("format"))
    if raw_in is not None:
        in_fmt = _format_name(raw_in, output=False)
        if in_fmt is None:
            shown = raw_in.get("type") if isinstance(raw_in, dict) else raw_in
            raise SessionObjectError("audio_format", f"Unsupported input_audio_format: {shown}")
    raw_out = _first_given(
        obj.get("output_audio_format"), obj.get("response_format"), a_out.get("format")
    )
    if raw_out is not None:
        out_fmt = _format_name(raw_out, output=True)
        if out_fmt is None:
            shown = raw_out.get("type") if isinstance(raw_out, dict) else raw_out
            raise SessionObjectError("audio_format", f"Unsupported output_audio_format: {shown}")
    in_value = obj.get("sample_rate_hz") or obj.get("sample_rate")
    if in_value is None:
        in_value = a_in.get("sample_rate_hz") or a_in.get("sample_rate")
    in_rate = declared_rate(in_value) if in_value is not None else _format_rate(raw_in)
    out_rate = _format_rate(raw_out) or declared_rate(
        a_out.get("sample_rate_hz") or a_out.get("sample_rate")
    )
    if out_rate is not None and not MIN_RATE <= out_rate <= MAX_RATE:
        raise SessionObjectError(
            "audio_format", f"output sample_rate_hz must be between {MIN_RATE} and {MAX_RATE}"
        )
    return in_fmt, in_rate, out_fmt, None if out_rate is None else int(out_rate)


def _check_other(obj: dict[str, Any]) -> None:
    for key in ("modalities", "output_modalities"):
        if key in obj:
            value = obj[key]
            if not isinstance(value, list) or not all(v in ("audio", "text") for v in value):
                raise SessionObjectError("other", f"{key} must be a list of 'audio' and 'text'")
    for key in ("instructions", "voice", "model"):
        if key in obj and obj[key] is not None and not isinstance(obj[key], str):
            raise SessionObjectError("other", f"{key} must be a string")
    for key in ("overlap_short_ack_ms", "overlap_barge_in_ms", "overlap_silence_rms"):
        if key in obj and (not is_number(obj[key]) or obj[key] < 0):
            raise SessionObjectError("other", f"{key} must be a non-negative number")
    if obj.get("extra_body") is not None and not isinstance(obj["extra_body"], dict):
        raise SessionObjectError("other", "extra_body must be an object")
    if obj.get("idle_timeout_s") is not None and not is_number(obj["idle_timeout_s"]):
        raise SessionObjectError("other", "idle_timeout_s must be a number")


def _auto_response(obj: dict[str, Any]) -> bool | None:
    extra = obj.get("extra_body")
    if isinstance(extra, dict) and extra.get("full_duplex") is True:
        return True  # Nemotron's other spelling (docs/protocol.md §13)
    if isinstance(extra, dict) and "auto_response" in extra:
        return extra["auto_response"] is True
    return None


def _profile_check(settings: NegotiatedSettings, config: ServerConfig) -> None:
    """The model plugin's own refusal (``invalid_duplex_runtime_config``; the frame profile:
    ``unsupported_nemotron_duplex_mode`` without auto_response, as 0.30.0's Nemotron)."""
    if config.model_profile == "turn" and settings.auto_response:
        raise ProtocolError(
            "invalid_duplex_runtime_config",
            "Qwen requires server VAD or explicit commits; native auto_response is unsupported",
            echo_event_id=False,
        )
    if config.model_profile == "frame" and not settings.auto_response:
        raise ProtocolError(
            "unsupported_nemotron_duplex_mode",
            "This frame-locked duplex model supports model-native full-duplex streaming only; "
            "set extra_body.auto_response=true",
            echo_event_id=False,
        )


def _echo_keys(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in obj.items() if k not in _INTERPRETED}


def _apply(settings: NegotiatedSettings, obj: dict[str, Any]) -> NegotiatedSettings:
    """Apply already-validated fields of ``obj`` onto ``settings`` (a new object)."""
    s = replace(settings, echo=_echo_keys(obj))
    in_fmt, in_rate, out_fmt, out_rate = check_formats(obj)
    if in_fmt is not None:
        s.input_format = in_fmt
    if in_rate is not None:
        s.input_rate = in_rate
    if out_fmt is not None:
        s.output_format = out_fmt
    if out_rate is not None:
        s.output_rate = out_rate
    if "turn_detection" in obj or _audio_td_present(obj):
        s.turn_detection = normalize_turn_detection(_turn_detection_value(obj))
    s.overlap_policy = resolve_overlap_policy(obj, settings.overlap_policy)
    if "modalities" in obj:
        s.modalities = list(obj["modalities"])
        if "output_modalities" not in obj:
            s.output_modalities = list(obj["modalities"])
    if "output_modalities" in obj:
        s.output_modalities = list(obj["output_modalities"])
    for key in ("instructions", "voice", "temperature", "speed", "ref_audio"):
        if key in obj:
            setattr(s, key, obj[key])
    for key in ("max_response_output_tokens", "max_output_tokens", "max_tokens"):
        if key in obj:
            s.max_tokens = obj[key]
    for key in ("overlap_short_ack_ms", "overlap_barge_in_ms", "overlap_silence_rms"):
        if key in obj:
            setattr(s, key, obj[key])
    if "playback_commit_policy" in obj:
        s.playback_commit_policy = (
            ACK_ONLY if obj["playback_commit_policy"] == ACK_ONLY else COMMIT_ALL_ON_DONE
        )
    for key in ("input_audio_transcription", "tracing"):
        if key in obj:
            setattr(s, key, obj[key])
    if isinstance(obj.get("audio"), dict):
        s.audio = copy.deepcopy(obj["audio"])
    auto = _auto_response(obj)
    if auto is not None:
        s.auto_response = auto
    return s


# --- open --------------------------------------------------------------------------------


def parse_open(session_obj: dict[str, Any] | None, config: ServerConfig) -> NegotiatedSettings:
    """Validate and normalise the opening object; every problem is invalid_session_config.

    Raises ProtocolError (unsequenced, no event_id echo, §1.4): the transport sends it and
    ends the connection.
    """
    obj = session_obj or {}
    if not isinstance(obj, dict):
        raise ProtocolError(
            "invalid_session_config", "session must be an object", echo_event_id=False
        )
    base = NegotiatedSettings(
        model=config.served_model,
        modalities=["text", "audio"],
        output_modalities=["text", "audio"],
    )
    try:
        _check_other(obj)
        check_formats(obj)
        if "turn_detection" in obj or _audio_td_present(obj):
            normalize_turn_detection(_turn_detection_value(obj))
        resolve_overlap_policy(obj, None)
        settings = _apply(base, obj)
    except SessionObjectError as exc:
        raise ProtocolError("invalid_session_config", exc.message, echo_event_id=False) from None
    if isinstance(obj.get("model"), str):
        settings.model = obj["model"]
    settings.playback_commit_policy = ACK_ONLY  # forced once, at start (§6.5)
    timeout = obj.get("idle_timeout_s")
    if is_number(timeout):
        settings.idle_timeout_s = (
            300.0 if timeout == 0 else (config.ws_idle_timeout_s if timeout < 0 else timeout)
        )
    settings.idle_timeout_s = float(settings.idle_timeout_s)
    _profile_check(settings, config)
    if config.model_profile == "frame":
        settings.tools = normalized_tools(obj.get("tools"))
    return settings


#: tools a frame-locked session may declare (0.30.0's Nemotron plugin)
MAX_TOOLS: Final = 5


def normalized_tools(value: Any) -> list[dict[str, Any]]:
    """The session's ``tools`` as flat function tools; ProtocolError as 0.30.0 refuses them."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(
            "invalid_duplex_runtime_config", "tools must be a list", echo_event_id=False
        )
    if len(value) > MAX_TOOLS:
        raise ProtocolError(
            "invalid_duplex_runtime_config",
            f"This duplex model supports at most {MAX_TOOLS} tools per session",
            echo_event_id=False,
        )
    out = []
    for tool in value:
        spec = tool.get("function") if isinstance(tool, dict) else None
        flat = spec if isinstance(spec, dict) else tool
        if not isinstance(flat, dict) or not isinstance(flat.get("name"), str) or not flat["name"]:
            raise ProtocolError(
                "invalid_duplex_runtime_config",
                "every tool needs a function name",
                echo_event_id=False,
            )
        out.append(dict(flat))
    return out


# --- later update ------------------------------------------------------------------------


def check_update_translator(patch: dict[str, Any]) -> None:
    """The translator's checks of a later update (unsequenced codes, client id echoed)."""
    try:
        check_formats(patch)
    except SessionObjectError as exc:
        raise ProtocolError("unsupported_audio_format", exc.message) from None
    try:
        if "turn_detection" in patch or _audio_td_present(patch):
            normalize_turn_detection(_turn_detection_value(patch))
        resolve_overlap_policy(patch, None)
    except SessionObjectError as exc:
        raise ProtocolError("unsupported_turn_detection", exc.message) from None


def apply_update(
    settings: NegotiatedSettings,
    patch: dict[str, Any],
    config: ServerConfig,
    *,
    audio_started: bool,
    output_started: bool,
) -> NegotiatedSettings:
    """The session's checks of a later update, then the patched settings.

    Raises sequenced ProtocolErrors; a rejected update changes nothing (the caller keeps the
    old settings).
    """
    if "model" in patch and patch["model"] != settings.model:
        raise ProtocolError(
            "model_update_unsupported",
            "session.update cannot change model for an open realtime duplex session",
            sequenced=True,
        )
    if "ref_audio" in patch and patch["ref_audio"] != settings.ref_audio:
        raise ProtocolError(
            "ref_audio_update_unsupported",
            "ref_audio can only be set when the session is opened",
            sequenced=True,
        )
    if "voice" in patch and patch["voice"] != settings.voice and output_started:
        raise ProtocolError(
            "voice_update_after_audio_unsupported",
            "voice cannot change once audio output has started",
            sequenced=True,
        )
    if config.model_profile == "frame":
        for key, old in (("instructions", settings.instructions), ("tools", settings.tools)):
            if key not in patch:
                continue
            new = normalized_tools(patch[key]) if key == "tools" else patch[key]
            if new != old:
                raise ProtocolError(
                    "invalid_duplex_runtime_config",
                    f"{key} cannot change inside an active frame-locked duplex session",
                    sequenced=True,
                )
    if (
        config.model_profile == "native"
        and "instructions" in patch
        and patch["instructions"] != settings.instructions
        and audio_started
    ):
        raise ProtocolError(
            "instructions_update_unsupported",
            "instructions cannot change after the native duplex context is initialized",
            sequenced=True,
        )
    try:
        _check_other(patch)
        updated = _apply(settings, patch)
    except SessionObjectError as exc:
        code = {
            "audio_format": "unsupported_audio_format",
            "turn_detection": "unsupported_turn_detection",
        }.get(exc.kind, "bad_event")
        raise ProtocolError(code, exc.message, sequenced=True) from None
    updated.idle_timeout_s = settings.idle_timeout_s  # only the opening update sets it
    updated.model = settings.model
    try:
        _profile_check(updated, config)
    except ProtocolError as exc:
        raise ProtocolError(exc.code, exc.message, sequenced=True) from None
    return updated


# --- the object on the wire --------------------------------------------------------------


def _audio_object(s: NegotiatedSettings) -> dict[str, Any]:
    if s.audio is not None:
        return copy.deepcopy(s.audio)
    in_type = "audio/pcm" if s.input_format in ("pcm16", "pcm_f32le") else s.input_format
    out: dict[str, Any] = {"format": {"type": "audio/pcm"}}
    if s.output_rate is not None:
        out["format"]["rate"] = s.output_rate
    return {
        "input": {
            "format": {"type": in_type, "rate": s.input_rate},
            "sample_rate_hz": s.input_rate,
        },
        "output": out,
    }


def build(
    s: NegotiatedSettings,
    *,
    session_id: str,
    state: dict[str, Any],
    caps: dict[str, Any],
) -> dict[str, Any]:
    """The wire session object (§4.3): engine fields, capabilities, then the client echo."""
    obj: dict[str, Any] = {
        "id": session_id,
        "state": state.get("state", "open"),
        "turn_state": state.get("turn_state", "idle"),
        "epoch": state.get("epoch", 0),
        "turn_id": state.get("turn_id", 0),
        "active_request_id": state.get("active_request_id"),
        "active_response_id": state.get("active_response_id"),
        "active_response_turn_id": state.get("active_response_turn_id"),
        "model": s.model,
        "modalities": list(s.modalities),
        "instructions": s.instructions,
        "voice": s.voice,
        "response_format": "wav" if s.output_format == "wav" else "pcm",
        "temperature": s.temperature,
        "max_tokens": s.max_tokens,
        "speed": s.speed,
        "idle_timeout_s": s.idle_timeout_s,
        "overlap_policy": s.overlap_policy,
        "overlap_short_ack_ms": s.overlap_short_ack_ms,
        "overlap_barge_in_ms": s.overlap_barge_in_ms,
        "overlap_silence_rms": s.overlap_silence_rms,
        "playback_commit_policy": s.playback_commit_policy,
        "playback": dict(
            state.get(
                "playback", {"generated_ms": 0, "sent_ms": 0, "played_ms": 0, "committed_ms": 0}
            )
        ),
        "capabilities": copy.deepcopy(caps),
    }
    if s.ref_audio is not None:
        obj["ref_audio"] = s.ref_audio
    if s.tools:  # the frame profile keeps the tools it was opened with (immutable, §13.4)
        obj["tools"] = copy.deepcopy(s.tools)
    for key, value in s.echo.items():
        obj.setdefault(key, copy.deepcopy(value))
    obj["object"] = "realtime.session"
    obj["type"] = "realtime"
    obj["input_audio_format"] = s.input_format
    obj["output_audio_format"] = s.output_format
    obj["output_modalities"] = list(s.output_modalities)
    obj["audio"] = _audio_object(s)
    obj["turn_detection"] = copy.deepcopy(s.turn_detection)
    obj["input_audio_transcription"] = s.input_audio_transcription
    obj["tracing"] = s.tracing
    return obj
