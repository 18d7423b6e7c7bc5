"""Session settings → the opening ``session.update`` (protocol.md §3.1, §11 client checklist).

Every client command (replay, load, talk, probe) opens its session the same way, so the
session object is built in exactly one place. It always declares the input format and rate
and the output format explicitly: vLLM-Omni's defaults changed between versions (G1 defaulted
to WAV output) and OpenAI's ``pcm16`` means 24 kHz, so leaving them implicit would make the
timings and the decoded audio depend on the server build.

The object mirrors what the golden transcripts' client sent (tests/fixtures/wire/README.md)::

    {"model": …, "modalities": ["audio", "text"], "input_audio_format": "pcm16",
     "sample_rate_hz": 16000, "output_audio_format": "pcm16",
     "audio": {"output": {"sample_rate_hz": 24000}}, "instructions": …,
     "extra_body": {"auto_response": false},
     "turn_detection": null | {"type": "server_vad", "silence_duration_ms": 800}}

``extra`` (from ``--session FILE.json``) is merged last, recursively for nested objects, so
a user can set anything the typed fields do not cover, or override them.

Public API::

    SessionSettings(model=None, voice=None, ref_audio=None, instructions=None,
                    turn_detection="none", vad_silence_ms=None, auto_response=False,
                    input_format="pcm16", input_rate=16000, output_format="pcm16",
                    output_rate=24000, extra={})
    SessionSettings.to_session_object() -> dict      # raises errors.BadInput
    SessionSettings.from_options(..., session_file=None) -> SessionSettings
    ref_audio_data_uri(value: str | Path) -> str      # raises errors.BadInput
"""

from __future__ import annotations

import base64
import copy
import io
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

from duplexctl.audio import pcm
from duplexctl.errors import BadInput
from duplexctl.protocol import ids

TurnDetection = Literal["server_vad", "none"]
TURN_DETECTION_CHOICES: Final = ("server_vad", "none")
DATA_URI_PREFIX: Final = "data:"


def ref_audio_data_uri(value: str | Path) -> str:
    """``ref_audio`` as the ``data:audio/wav;base64,…`` URI the server expects.

    A data URI passes through untouched. A path is read; a RIFF/WAVE file is sent byte for
    byte, any other audio file soundfile can read is re-encoded as 16-bit WAV (MiniCPM-o
    refuses to open without a voice clip, so a clear error here beats a refused session).
    """
    if isinstance(value, str) and value.startswith(DATA_URI_PREFIX):
        return value
    path = Path(value)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read --ref-audio {path}: {exc.strerror or exc}") from None
    if not (data[:4] == b"RIFF" and data[8:12] == b"WAVE"):
        data = _to_wav(path, data)
    return "data:audio/wav;base64," + base64.b64encode(data).decode("ascii")


def _to_wav(path: Path, data: bytes) -> bytes:
    import soundfile  # lazy: only needed for non-WAV voice clips

    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises several types for unreadable input
        raise BadInput(f"--ref-audio {path} is not a readable audio file: {exc}") from None
    out = io.BytesIO()
    soundfile.write(out, samples.mean(axis=1), rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``; nested objects merge, everything else (null too) replaces."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


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


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """What a client asks of a session; the single source of the opening ``session.update``."""

    model: str | None = None
    voice: str | None = None
    ref_audio: str | Path | None = None  # path, or a data: URI passed through
    instructions: str | None = None
    turn_detection: TurnDetection = "none"
    vad_silence_ms: int | None = None  # None: the server's own default
    auto_response: bool = False
    input_format: str = "pcm16"
    input_rate: int = 16000
    output_format: str = "pcm16"
    output_rate: int = 24000
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.turn_detection not in TURN_DETECTION_CHOICES:
            raise BadInput(
                f"--turn-detection must be one of {', '.join(TURN_DETECTION_CHOICES)}, "
                f"not {self.turn_detection!r}"
            )
        if pcm.normalize_format(self.input_format) is None:
            raise BadInput(f"unsupported input audio format {self.input_format!r}")
        if pcm.normalize_format(self.output_format, output=True) is None:
            raise BadInput(f"unsupported output audio format {self.output_format!r}")
        for name, rate in (("input", self.input_rate), ("output", self.output_rate)):
            if not (isinstance(rate, int) and 8000 <= rate <= 192000):
                raise BadInput(f"{name} sample rate must be an integer 8000-192000, not {rate!r}")
        if self.vad_silence_ms is not None and self.vad_silence_ms <= 0:
            raise BadInput(f"VAD silence must be positive, not {self.vad_silence_ms} ms")

    @property
    def input_format_canonical(self) -> str:
        """The input format in pcm.py's canonical spelling (what the pacer encodes)."""
        return pcm.normalize_format(self.input_format) or "pcm16"

    @classmethod
    def from_options(
        cls,
        *,
        model: str | None = None,
        voice: str | None = None,
        ref_audio: str | Path | None = None,
        instructions: str | None = None,
        turn_detection: str = "none",
        vad_silence_ms: int | None = None,
        auto_response: bool = False,
        session_file: str | Path | None = None,
        **overrides: Any,
    ) -> SessionSettings:
        """Settings from CLI/scenario options; ``session_file`` is read into ``extra`` now,
        so a bad file fails before any connection is made."""
        extra = read_session_file(session_file) if session_file is not None else {}
        if ref_audio is not None and not str(ref_audio).startswith(DATA_URI_PREFIX):
            ref_audio = ref_audio_data_uri(ref_audio)  # read once, fail early
        return cls(
            model=model,
            voice=voice,
            ref_audio=ref_audio,
            instructions=instructions,
            turn_detection=turn_detection,  # type: ignore[arg-type]  # validated in __post_init__
            vad_silence_ms=vad_silence_ms,
            auto_response=auto_response,
            extra=extra,
            **overrides,
        )

    def with_extra(self, extra: dict[str, Any]) -> SessionSettings:
        """A copy with ``extra`` merged over the current extra (scenario-level overrides)."""
        return replace(self, extra=_deep_merge(self.extra, extra))

    def to_session_object(self) -> dict[str, Any]:
        """The ``session`` object of the opening ``session.update``."""
        obj: dict[str, Any] = {}
        if self.model is not None:
            obj["model"] = self.model
        obj["modalities"] = ["audio", "text"]
        obj["input_audio_format"] = self.input_format
        obj["sample_rate_hz"] = self.input_rate
        obj["output_audio_format"] = self.output_format
        obj["audio"] = {"output": {"sample_rate_hz": self.output_rate}}
        if self.instructions is not None:
            obj["instructions"] = self.instructions
        if self.voice is not None:
            obj["voice"] = self.voice
        if self.ref_audio is not None:
            obj["ref_audio"] = ref_audio_data_uri(self.ref_audio)
        obj["extra_body"] = {"auto_response": self.auto_response}
        if self.turn_detection == "server_vad":
            vad: dict[str, Any] = {"type": "server_vad"}
            if self.vad_silence_ms is not None:
                vad["silence_duration_ms"] = self.vad_silence_ms
            obj["turn_detection"] = vad
        else:
            obj["turn_detection"] = None
        return _deep_merge(obj, self.extra) if self.extra else obj

    def session_update(self, event_id: str | None = None) -> dict[str, Any]:
        """The complete opening ``session.update`` event."""
        return {
            "type": "session.update",
            "session": self.to_session_object(),
            "event_id": event_id or ids.client_event_id(),
        }
