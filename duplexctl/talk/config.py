"""The options of one ``duplexctl talk`` run, parsed and checked before any I/O.

Kept free of heavy I/O imports so that the CLI can build and validate it (one-line BadInput
for a bad value, exit 2) before websockets or PortAudio are loaded. The session and turn
settings are resolved by the one resolver every command uses (:mod:`duplexctl.resolver`;
talk has no scenario, so: defaults < ``--session`` < flags).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from duplexctl.errors import BadInput
from duplexctl.protocol.playback_duty import ACK_EVERY_MS
from duplexctl.resolver import FLAGS, TALK_BLOCK_MS, Command, RunSettings, resolve
from duplexctl.values import DURATION_FORMS, input_file, parse_duration

TurnMode = Literal["auto", "server_vad", "none"]
BargeMode = Literal["client", "server", "off"]
BARGE_MODES: Final = ("client", "server", "off")
AEC_MODES: Final = ("on", "off")
NO_DEVICE: Final = frozenset({"none", "null", "off"})
AUDIO_FILE: Final = "an audio file (WAV, FLAC, ...)"
# The TalkConfig fields that are resolver settings (flags when built, values used after).
SETTING_FIELDS: Final = FLAGS[Command.TALK]


@dataclass(frozen=True, slots=True)
class InputFileSpec:
    """``--input-file PATH[@SECONDS]``: a WAV fed as if spoken into the microphone.

    Without ``@SECONDS`` a file starts right after the previous one (the first at 0); with it,
    at that position of the user timeline (seconds since the session opened), which is how a
    demo or test times an interruption to land while the assistant is speaking.
    """

    path: Path
    at_s: float | None = None

    @classmethod
    def parse(cls, text: str) -> InputFileSpec:
        """``FILE`` or ``FILE@SECONDS`` (seconds as any duration: ``5.7``, ``5.7s``,
        ``500ms``); ValueError naming what is wrong (a directory is named as one)."""
        head, sep, tail = text.rpartition("@")
        if sep and head:
            try:
                at = parse_duration(tail)
            except ValueError:
                if Path(text).exists():  # an '@' that is part of the file name
                    return cls(input_file(text, takes=AUDIO_FILE))
                raise ValueError(
                    f"{text}: the start time {tail!r} is not a time: give {DURATION_FORMS}"
                ) from None
            return cls(input_file(head, takes=AUDIO_FILE), at)
        return cls(input_file(text, takes=AUDIO_FILE))


@dataclass(slots=True)
class TalkConfig:
    """Everything ``talk`` needs; ``api_key`` is never printed or written.

    The session and turn settings (:data:`SETTING_FIELDS`) are given as the command line's
    flags, ``None`` = not given; building the config resolves them with ``--session``
    (``settings``), after which each of those fields holds the value the session uses
    (``ref_audio``: the file named) and ``settings.origins`` says where it came from.
    """

    url: str | None = None
    api_key: str | None = None
    input_device: str | None = None
    output_device: str | None = None
    input_files: list[InputFileSpec] = field(default_factory=list)
    duration_s: float | None = None
    record_dir: Path | None = None
    turn_detection: TurnMode | None = None
    vad_silence_ms: int | None = None
    auto_response: bool | None = None
    barge_in: BargeMode = "client"
    barge_threshold_db: float = -40.0
    aec: str = "on"  # echo cancellation (talk/echo.py); needs a speaker and a microphone
    noise_suppression: bool = False
    model: str | None = None
    voice: str | None = None
    ref_audio: str | None = None
    instructions: str | None = None
    session_file: Path | None = None
    chunk_ms: int | None = None
    # capture block; not an option: the resolver checks chunk_ms is a whole number of them
    block_ms: int = field(default=TALK_BLOCK_MS, init=False)
    prebuffer_ms: float | None = None
    ack_interval_ms: float = ACK_EVERY_MS  # playback.ack cadence (protocol/playback_duty.py)
    server_overrides: dict[str, Any] = field(default_factory=dict)  # embedded server only
    settings: RunSettings = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.settings = resolve(
            Command.TALK,
            flags={name: getattr(self, name) for name in SETTING_FIELDS},
            session_file=self.session_file,
        )
        run = self.settings
        for name in SETTING_FIELDS:
            setattr(self, name, run.as_flag(name))
        if self.barge_in not in BARGE_MODES:
            raise BadInput(
                f"--barge-in must be one of {', '.join(BARGE_MODES)}, not {self.barge_in!r}"
            )
        if self.aec not in AEC_MODES:
            raise BadInput(f"--aec must be one of {', '.join(AEC_MODES)}, not {self.aec!r}")
        if self.duration_s is not None and not (self.duration_s > 0):
            raise BadInput(f"--duration must be positive, not {self.duration_s}")
        if self.ack_interval_ms <= 0:
            raise BadInput("ack interval must be positive")
        for spec in self.input_files:
            try:
                input_file(spec.path, takes=AUDIO_FILE)
            except ValueError as exc:
                raise BadInput(f"--input-file {exc}") from None

    @property
    def simulated_output(self) -> bool:
        """``--output-device none``: no sound card; a simulated playback clock instead."""
        return (self.output_device or "").strip().lower() in NO_DEVICE
