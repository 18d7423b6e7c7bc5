"""Wire event → validated command, the translator of docs/protocol.md §3.

Rejections raised here are the *translator-level* ones: the transport writes them straight to
the socket, unsequenced, echoing the client ``event_id`` (docs/protocol.md §2, wire README
"Sequenced vs. unsequenced errors"). Everything that 0.30.0 rejects later, inside the
session, is left for the engine, which answers with sequenced errors. Keeping the split here
means the engine never has to guess which path an error takes.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any, Final

from duplexctl.audio.pcm import AudioDecodeError, b64decode, normalize_format
from duplexctl.protocol.errors import ProtocolError
from duplexctl.server import session_object
from duplexctl.server.wire_numbers import checked_rate, is_number, is_position

# response.create options a duplex runtime refuses (§3.4; 0.30.0 refuses them everywhere)
FORBIDDEN_RESPONSE_OPTIONS: Final = frozenset(
    {
        "instructions",
        "voice",
        "temperature",
        "max_output_tokens",
        "max_response_output_tokens",
        "max_tokens",
        "tools",
        "tool_choice",
    }
)
_ROUTED_SIGNALS: Final = frozenset(
    {
        "barge_in",
        "input.cancel",
        "response.cancel",
        "session.update",
        "conversation.item.create",
        "conversation.item.delete",
        "conversation.item.truncate",
    }
)
MAX_VIDEO_FRAMES: Final = 2
MAX_VIDEO_FRAME_CHARS: Final = 4_000_000
_OVERLAP_ACTIONS: Final[dict[str, str]] = {
    "barge_in": "barge_in",
    "interrupt": "barge_in",
    "cancel": "barge_in",
    "listen": "listen",
    "continue": "listen",
    "continue_output": "listen",
    "ack": "listen",
    "drop": "drop",
    "ignore": "drop",
    "silence": "drop",
}


@dataclass(slots=True)
class Command:
    """One validated client request for the session mailbox."""

    type: str
    event_id: str | None
    args: dict[str, Any] = field(default_factory=dict)


def _event_id(event: dict[str, Any]) -> str | None:
    value = event.get("event_id")
    return value if isinstance(value, str) else None


def _opt_bool(event: dict[str, Any], *keys: str) -> bool | None:
    for key in keys:
        if isinstance(event.get(key), bool):
            return bool(event[key])
    return None


def translate(event: dict[str, Any], *, input_format: str, input_rate: float) -> Command:
    """Validate one client event (aliases already resolved) into a Command.

    ``input_format``/``input_rate`` are the session's negotiated input defaults, used when an
    append does not declare its own.
    """
    etype = event.get("type")
    if not isinstance(etype, str):
        raise ProtocolError(
            "bad_event", "Duplex event must be a JSON object with a type", echo_event_id=False
        )
    handler = _HANDLERS.get(etype)
    if handler is None:
        raise ProtocolError("unknown_event", f"Unknown duplex event type: {etype}")
    return handler(event, input_format, input_rate)


# --- input --------------------------------------------------------------------------------


def _append(event: dict[str, Any], input_format: str, input_rate: float) -> Command:
    audio = event.get("audio", event.get("delta"))
    frames = event.get("video_frames")
    if frames is not None:
        problem = _video_frames_problem(frames, event.get("max_slice_nums"))
        if problem is not None:
            raise ProtocolError("invalid_video_frames", problem)
    if (audio is None or audio == "") and not frames:
        raise ProtocolError(
            "bad_event", "input_audio_buffer.append requires audio and/or video_frames"
        )
    if audio is not None and not isinstance(audio, str):
        raise ProtocolError("bad_event", "input_audio_buffer.append audio must be a base64 string")
    raw_fmt = event.get("format", event.get("input_audio_format"))
    fmt = input_format
    if raw_fmt is not None:
        fmt_name = normalize_format(raw_fmt) if isinstance(raw_fmt, str) else None
        if fmt_name is None:
            raise ProtocolError(
                "unsupported_audio_format", f"Unsupported input_audio_format: {raw_fmt}"
            )
        fmt = fmt_name
    rate = _append_rate(event, fmt, raw_fmt is not None, input_format, input_rate)
    try:
        data = b64decode(audio) if audio else b""
    except AudioDecodeError:
        raise ProtocolError("bad_audio", "input audio is not valid base64") from None
    hints: dict[str, Any] = {}
    is_speech = _opt_bool(event, "is_speech", "speech")
    vad = session_object.sub_object(event, "vad")
    if is_speech is None and isinstance(vad.get("is_speech"), bool):
        is_speech = vad["is_speech"]
    prob = event.get("speech_probability", vad.get("speech_probability", vad.get("probability")))
    if is_speech is None and is_number(prob):
        is_speech = prob >= 0.5
    hints["is_speech"] = is_speech
    overlap = event.get("overlap_action", event.get("overlap"))
    hints["overlap_action"] = _OVERLAP_ACTIONS.get(overlap) if isinstance(overlap, str) else None
    hints["force_barge_in"] = event.get("force_barge_in") is True
    hints["force_listen"] = event.get("force_listen") is True
    for key in ("audio_start_ms", "audio_end_ms"):
        # a client clock the server could not echo is no clock (wire_numbers.is_position)
        hints[key] = event[key] if is_position(event.get(key)) else None
    return Command(
        "input_audio_buffer.append",
        _event_id(event),
        {"data": data, "format": fmt, "rate": rate, "hints": hints, "video": bool(frames)},
    )


def _append_rate(
    event: dict[str, Any], fmt: str, fmt_given: bool, input_format: str, input_rate: float
) -> int:
    """The rate an append is decoded at, checked whichever place declared it.

    As in vLLM-Omni 0.30.0 (``decode_audio_append``): the append's own ``sample_rate_hz`` /
    ``sample_rate`` when truthy, else the session's rate; either one must pass the 8000-192000
    Hz check, so a session declared at 2**63 (or 4000) gets ``bad_event`` on each append
    instead of reaching the resampler. A G.711 append on a PCM session defaults to 8 kHz.
    """
    own = event.get("sample_rate_hz") or event.get("sample_rate")
    if own:
        value: Any = own
    elif fmt_given and fmt.startswith("g711") and not input_format.startswith("g711"):
        value = 8000
    else:
        value = input_rate
    try:
        return checked_rate(value)
    except ValueError as exc:
        raise ProtocolError("bad_event", str(exc)) from None


def _video_frames_problem(frames: Any, max_slice_nums: Any) -> str | None:
    """vLLM-Omni 0.30.0's camera-frame rules (``validate_realtime_video_frames``): a list of
    at most two non-empty base64 JPEG/PNG strings of at most 4 MB each; ``max_slice_nums``
    only 1 or absent."""
    if max_slice_nums not in (None, 1) or isinstance(max_slice_nums, bool):
        return "max_slice_nums is not selectable on the wire; Stage0 slices stacked units itself"
    if not isinstance(frames, list):
        return "video_frames must be a list of base64-encoded images"
    present = [frame for frame in frames if frame is not None]
    if len(present) > MAX_VIDEO_FRAMES:
        return "video_frames carries more than 2 frames for one append; send ~1 frame per 1 s chunk"
    for frame in present:
        if not isinstance(frame, str) or not frame:
            return "video_frames entries must be non-empty base64 strings"
        if len(frame) > MAX_VIDEO_FRAME_CHARS:
            return (
                "video_frames entry exceeds 4MB base64; reduce capture resolution or JPEG quality"
            )
        head = frame[:64]
        try:
            header = base64.b64decode(head + "=" * (-len(head) % 4))
        except (binascii.Error, ValueError):
            return "video_frames entries must be valid base64"
        if not header.startswith((b"\xff\xd8", b"\x89PNG")):
            return "video_frames entries must be JPEG or PNG images"
    return None


def _commit(event: dict[str, Any], _f: str, _r: float) -> Command:
    response_create = _opt_bool(event, "response_create", "create_response")
    return Command(
        "input_audio_buffer.commit",
        _event_id(event),
        {
            "final": event.get("final") is not False,
            "response_create": bool(response_create),
            "is_speech": event.get("is_speech") is not False,
        },
    )


def _plain(event: dict[str, Any], _f: str, _r: float) -> Command:
    return Command(event["type"], _event_id(event))


def _text_append(event: dict[str, Any], _f: str, _r: float) -> Command:
    if not isinstance(event.get("text"), str):
        raise ProtocolError("bad_event", "input.text.append requires text")
    return Command("input.text.append", _event_id(event))


# --- conversation items -------------------------------------------------------------------


def _item_create(event: dict[str, Any], _f: str, _r: float) -> Command:
    item = event.get("item")
    if not isinstance(item, dict):
        raise ProtocolError("bad_event", "conversation.item.create requires an item object")
    content = item.get("content", [])
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        raise ProtocolError("bad_event", "conversation.item.create item.content must be a list")
    audio: list[tuple[bytes, str, int]] = []
    for part in content:
        ptype = part.get("type")
        if ptype in ("input_text", "text", "output_text") and not isinstance(part.get("text"), str):
            raise ProtocolError("bad_event", f"{ptype} content requires text")
        if ptype == "input_audio":
            raw = part.get("audio", part.get("data"))
            if not isinstance(raw, str):
                raise ProtocolError("bad_event", "input_audio content requires audio")
            fmt = (
                normalize_format(part.get("format", "pcm16"))
                if isinstance(part.get("format", "pcm16"), str)
                else None
            )
            if fmt is None:
                raise ProtocolError(
                    "unsupported_audio_format",
                    f"Unsupported input_audio_format: {part.get('format')}",
                )
            try:
                rate = checked_rate(part.get("sample_rate_hz", 16000))
            except ValueError as exc:
                raise ProtocolError("bad_event", str(exc)) from None
            try:
                audio.append((b64decode(raw), fmt, rate))
            except AudioDecodeError:
                raise ProtocolError("bad_audio", "input audio is not valid base64") from None
    previous = event.get("previous_item_id")
    return Command(
        "conversation.item.create",
        _event_id(event),
        {
            "item": item,
            "audio": audio,
            "previous_item_id": previous if isinstance(previous, str) else None,
        },
    )


def _item_id_command(event: dict[str, Any], _f: str, _r: float) -> Command:
    item_id = event.get("item_id")
    if not isinstance(item_id, str) or not item_id:
        raise ProtocolError("missing_item_id", f"{event['type']} requires item_id")
    return Command(event["type"], _event_id(event), {"item_id": item_id})


def _truncate(event: dict[str, Any], f: str, r: float) -> Command:
    cmd = _item_id_command(event, f, r)
    end = event.get("audio_end_ms")
    if not is_position(end) or end < 0:
        raise ProtocolError("bad_event", "conversation.item.truncate requires numeric audio_end_ms")
    index = event.get("content_index", 0)
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ProtocolError("bad_event", "content_index must be a non-negative integer")
    cmd.args.update(audio_end_ms=int(end), content_index=index)
    return cmd


# --- responses ----------------------------------------------------------------------------


def _response_create(event: dict[str, Any], _f: str, _r: float) -> Command:
    has_options = "response" in event
    options = event.get("response")
    if has_options and not isinstance(options, dict):
        raise ProtocolError("bad_event", "response.create response must be an object")
    options = options or {}
    forbidden = sorted(k for k in options if k in FORBIDDEN_RESPONSE_OPTIONS)
    audio = session_object.sub_object(options, "audio")
    a_out = session_object.sub_object(audio, "output")
    if "voice" in a_out:
        forbidden.append("voice")
    out_fmt = options.get("output_audio_format", a_out.get("format"))
    fmt = None
    if out_fmt is not None:
        name = out_fmt.get("type") if isinstance(out_fmt, dict) else out_fmt
        fmt = normalize_format(name, output=True) if isinstance(name, str) else None
        if fmt is None:
            raise ProtocolError(
                "unsupported_audio_format", f"Unsupported output_audio_format: {name}"
            )
    metadata = options.get("metadata")
    return Command(
        "response.create",
        _event_id(event),
        {
            "has_options": has_options,
            "forbidden": forbidden,
            "output_format": fmt,
            "metadata": metadata if isinstance(metadata, dict) else None,
            "conversation": options.get("conversation"),
        },
    )


def _with_response_id(event: dict[str, Any], _f: str, _r: float) -> Command:
    rid = event.get("response_id")
    return Command(
        event["type"], _event_id(event), {"response_id": rid if isinstance(rid, str) else None}
    )


def _turn_signal(event: dict[str, Any], f: str, r: float) -> Command:
    name = event.get("event")
    if not isinstance(name, str) or not name:
        raise ProtocolError("bad_event", "turn.signal requires event")
    payload = event.get("payload")
    payload = payload if isinstance(payload, dict) else {}
    if name in _ROUTED_SIGNALS:
        routed: dict[str, Any] = {**payload, "type": name}
        if "event_id" in event:
            routed["event_id"] = event["event_id"]
        if name == "session.update" and "session" not in payload:
            routed = {"type": name, "session": payload, "event_id": event.get("event_id")}
        return translate(routed, input_format=f, input_rate=r)
    return Command("turn.signal", _event_id(event), {"event": name, "payload": payload})


def _playback_ack(event: dict[str, Any], _f: str, _r: float) -> Command:
    played = event.get("played_ms")
    if not is_position(played):
        raise ProtocolError("bad_event", "playback.ack requires numeric played_ms")
    committed = event.get("committed_ms", played)
    if not is_position(committed):
        raise ProtocolError("bad_event", "playback.ack committed_ms must be numeric")
    rid = event.get("response_id")
    item = event.get("item_id")
    return Command(
        "playback.ack",
        _event_id(event),
        {
            "played_ms": max(0, int(played)),
            "committed_ms": max(0, int(committed)),
            "response_id": rid if isinstance(rid, str) else None,
            "item_id": item if isinstance(item, str) else None,
        },
    )


# --- session ------------------------------------------------------------------------------


def _session_update(event: dict[str, Any], _f: str, _r: float) -> Command:
    patch = event.get("session")
    if patch is None:
        patch = {k: v for k, v in event.items() if k not in ("type", "event_id")}
    if not isinstance(patch, dict):
        raise ProtocolError("bad_event", "session.update session must be an object")
    session_object.check_update_translator(patch)
    return Command("session.update", _event_id(event), {"session": patch})


def _session_close(event: dict[str, Any], _f: str, _r: float) -> Command:
    reason = event.get("reason")
    return Command(
        "session.close",
        _event_id(event),
        {"reason": reason if isinstance(reason, str) and reason else "client_close"},
    )


_HANDLERS: Final = {
    "input_audio_buffer.append": _append,
    "input_audio_buffer.commit": _commit,
    "input_audio_buffer.clear": _plain,
    "input.cancel": _plain,
    "input.text.append": _text_append,
    "conversation.item.create": _item_create,
    "conversation.item.retrieve": _item_id_command,
    "conversation.item.delete": _item_id_command,
    "conversation.item.truncate": _truncate,
    "response.create": _response_create,
    "response.cancel": _with_response_id,
    "output_audio_buffer.clear": _with_response_id,
    "barge_in": _plain,
    "turn.signal": _turn_signal,
    "playback.ack": _playback_ack,
    "session.heartbeat": _plain,
    "session.update": _session_update,
    "session.close": _session_close,
}
# Every command type the engine can receive (session.EngineSession dispatches each).
COMMAND_TYPES: Final = frozenset(_HANDLERS)
