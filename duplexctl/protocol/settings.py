"""Session settings → the opening ``session.update`` (docs/protocol.md §3.1, §11 client checklist).

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

The values come from :mod:`duplexctl.resolver` (defaults < scenario < ``--session`` <
flags). ``extra`` holds the keys of ``--session FILE.json`` / a scenario's ``[session]``
that no typed field covers and is merged last, recursively for nested objects;
``vad_options`` holds the other keys of their ``turn_detection`` object (``threshold`` …),
merged into the server VAD object only when server VAD is asked for (into ``null`` they
would make a VAD object out of "no VAD").

Public API::

    SessionSettings(model=None, voice=None, ref_audio=None, instructions=None,
                    turn_detection="none", vad_silence_ms=None, auto_response=False,
                    input_format="pcm16", input_rate=16000, output_format="pcm16",
                    output_rate=24000, tools=None, extra={}, vad_options={})
    SessionSettings.to_session_object() -> dict      # raises errors.BadInput
    SessionSettings.with_extra(extra) -> SessionSettings  # raw override (tests, probes)
    ref_audio_data_uri(value, what="--ref-audio") -> str  # raises errors.BadInput
    deep_merge(base, extra) -> dict
"""

from __future__ import annotations

import base64
import copy
import io
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Literal

from duplexctl.audio import pcm
from duplexctl.errors import BadInput

TurnDetection = Literal["server_vad", "none"]
TURN_DETECTION_CHOICES: Final = ("server_vad", "none")
DATA_URI_PREFIX: Final = "data:"


def ref_audio_data_uri(value: str | Path, what: str = "--ref-audio") -> str:
    """``ref_audio`` as the ``data:audio/wav;base64,…`` URI the server expects.

    A data URI passes through untouched. A path is read; a RIFF/WAVE file is sent byte for
    byte, any other audio file soundfile can read is re-encoded as 16-bit WAV (MiniCPM-o
    refuses to open without a voice clip, so a clear error here beats a refused session).
    ``what`` names where the value came from in the error (a flag, a scenario key …).
    """
    if isinstance(value, str) and value.startswith(DATA_URI_PREFIX):
        return value
    path = Path(value)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if not (data[:4] == b"RIFF" and data[8:12] == b"WAVE"):
        data = _to_wav(path, data, what)
    return "data:audio/wav;base64," + base64.b64encode(data).decode("ascii")


def _to_wav(path: Path, data: bytes, what: str) -> bytes:
    import soundfile  # lazy: only needed for non-WAV voice clips

    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises several types for unreadable input
        raise BadInput(f"{what} {path} is not a readable audio file: {exc}") from None
    out = io.BytesIO()
    soundfile.write(out, samples.mean(axis=1), rate, format="WAV", subtype="PCM_16")
    return out.getvalue()


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` over ``base``; nested objects merge, everything else (null too) replaces."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class TurnEnd(StrEnum):
    """Who ends a user turn (docs/protocol.md §6.1): one vocabulary for replay, load, talk and
    the turn records they write (``end_mode``)."""

    VAD = "server_vad"  # the server's VAD auto-commits after the speech
    COMMIT = "commit"  # the client commits (response_create) after speech + a short tail
    MODEL = "model"  # auto_response: the model decides by itself; nobody commits


#: ``end_mode`` of a reply that answers no user turn: a short acknowledgement (the model's
#: "mm-hm", not a user turn of the run) ...
BACKCHANNEL: Final = "backchannel"
#: ... or a longer reply nobody asked for. With :class:`TurnEnd`'s values, every ``end_mode``.
UNSOLICITED: Final = "unsolicited"


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
    tools: list[dict[str, Any]] | None = None  # function tools the model may call (§13.4)
    extra: dict[str, Any] = field(default_factory=dict)  # session-object keys no field covers
    vad_options: dict[str, Any] = field(default_factory=dict)  # more server_vad keys

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

    def with_extra(self, extra: dict[str, Any]) -> SessionSettings:
        """A copy with ``extra`` merged over the current extra: a raw override of the session
        object, past the typed fields (tests and probes send deliberately odd objects)."""
        return replace(self, extra=deep_merge(self.extra, extra))

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
        if self.tools is not None:
            obj["tools"] = copy.deepcopy(self.tools)
        if self.turn_detection == "server_vad":
            vad: dict[str, Any] = {"type": "server_vad"}
            if self.vad_silence_ms is not None:
                vad["silence_duration_ms"] = self.vad_silence_ms
            obj["turn_detection"] = deep_merge(vad, self.vad_options)
        else:
            obj["turn_detection"] = None
        return deep_merge(obj, self.extra) if self.extra else obj
