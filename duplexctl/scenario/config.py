"""What one replay run uses: command-line flags over scenario settings over defaults.

Resolution happens once, before any socket is opened, so a bad combination (or an unreadable
``--session`` / ``--ref-audio`` file) is a one-line exit-2 error and the run itself never
has to wonder where a value came from. The api key is deliberately *not* part of
:class:`ReplayConfig`: the config is echoed into ``report.json``, the key must never be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duplexctl.errors import BadInput
from duplexctl.protocol.settings import SessionSettings, read_session_file
from duplexctl.scenario.model import Pace, Settings, TurnEnd

DEFAULT_CHUNK_MS = 100
DEFAULT_RESPONSE_TIMEOUT_S = 20.0
DEFAULT_PREBUFFER_MS = 100.0  # a small jitter buffer: real-time deltas arrive +-few ms
# espeak sentences pause ~400 ms at a comma: 800 ms keeps one utterance one turn
# (shared/peer/README.md), while vLLM-Omni's default 500 ms would split it.
DEFAULT_VAD_SILENCE_MS = 800


@dataclass(frozen=True, slots=True)
class CliOptions:
    """The replay flags as typed on the command line; None = not given."""

    model: str | None = None
    voice: str | None = None
    ref_audio: Path | None = None
    instructions: str | None = None
    turn_detection: str | None = None
    auto_response: bool | None = None
    commit: bool | None = None
    session_file: Path | None = None
    chunk_ms: int | None = None
    pace: str | None = None
    response_timeout_s: float | None = None
    prebuffer_ms: float | None = None


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """Everything a run needs besides the URL and the credentials."""

    settings: SessionSettings
    end_mode: TurnEnd
    chunk_ms: int = DEFAULT_CHUNK_MS
    pace: Pace = Pace.REALTIME
    response_timeout_s: float = DEFAULT_RESPONSE_TIMEOUT_S
    prebuffer_ms: float = DEFAULT_PREBUFFER_MS
    extra_notes: list[str] = field(default_factory=list)

    def echo(self) -> dict[str, Any]:
        """The config as report.json shows it (ref_audio summarised, no secrets here)."""
        s = self.settings
        return {
            "model": s.model,
            "voice": s.voice,
            "ref_audio": "(set)" if s.ref_audio is not None else None,
            "instructions": s.instructions,
            "turn_detection": s.turn_detection,
            "vad_silence_ms": s.vad_silence_ms,
            "auto_response": s.auto_response,
            "end_mode": self.end_mode.value,
            "input": f"{s.input_format} {s.input_rate} Hz",
            "output": f"{s.output_format} {s.output_rate} Hz",
            "session_extra": s.extra,
            "chunk_ms": self.chunk_ms,
            "pace": self.pace.value,
            "response_timeout_s": self.response_timeout_s,
            "prebuffer_ms": self.prebuffer_ms,
        }


def _pick(cli: Any, scenario: Any, default: Any) -> Any:
    if cli is not None:
        return cli
    if scenario is not None:
        return scenario
    return default


def end_mode_of(turn_detection: str, auto_response: bool, commit: bool) -> TurnEnd:
    """Who ends a turn (protocol.md §6.1): the model, the client, or the server's VAD."""
    if auto_response:
        return TurnEnd.MODEL
    if commit or turn_detection == "none":
        return TurnEnd.COMMIT
    return TurnEnd.VAD


def resolve(cli: CliOptions, scenario: Settings) -> ReplayConfig:
    """Merge the three layers; raises BadInput for invalid values or unreadable files."""
    turn_detection = _pick(cli.turn_detection, scenario.turn_detection, "server_vad")
    if turn_detection not in ("server_vad", "none"):
        raise BadInput(f"--turn-detection must be server_vad or none, not {turn_detection!r}")
    auto_response = bool(_pick(cli.auto_response, scenario.auto_response, False))
    commit = bool(_pick(cli.commit, scenario.commit, False))
    pace_raw = _pick(cli.pace, scenario.pace, Pace.REALTIME.value)
    try:
        pace = Pace(pace_raw)
    except ValueError:
        raise BadInput(f"--pace must be realtime or fast, not {pace_raw!r}") from None
    chunk_ms = int(_pick(cli.chunk_ms, scenario.chunk_ms, DEFAULT_CHUNK_MS))
    if chunk_ms <= 0 or 16000 * chunk_ms % 1000:
        raise BadInput(f"--chunk-ms must be a positive whole number of ms, not {chunk_ms}")
    timeout = float(
        _pick(cli.response_timeout_s, scenario.response_timeout_s, DEFAULT_RESPONSE_TIMEOUT_S)
    )
    if timeout <= 0:
        raise BadInput(f"--response-timeout-s must be > 0, not {timeout:g}")
    prebuffer = float(_pick(cli.prebuffer_ms, scenario.prebuffer_ms, DEFAULT_PREBUFFER_MS))
    if prebuffer < 0:
        raise BadInput(f"--prebuffer-ms must be >= 0, not {prebuffer:g}")

    extra: dict[str, Any] = dict(scenario.session)
    if cli.session_file is not None:
        extra = _merge(extra, read_session_file(cli.session_file))
    ref_audio = _pick(cli.ref_audio, scenario.ref_audio, None)
    settings = SessionSettings.from_options(
        model=_pick(cli.model, scenario.model, None),
        voice=_pick(cli.voice, scenario.voice, None),
        ref_audio=ref_audio,
        instructions=_pick(cli.instructions, scenario.instructions, None),
        turn_detection=turn_detection,
        vad_silence_ms=DEFAULT_VAD_SILENCE_MS if turn_detection == "server_vad" else None,
        auto_response=auto_response,
    ).with_extra(extra)
    settings.to_session_object()  # validate now (BadInput), not after connecting
    return ReplayConfig(
        settings=settings,
        end_mode=end_mode_of(turn_detection, auto_response, commit),
        chunk_ms=chunk_ms,
        pace=pace,
        response_timeout_s=timeout,
        prebuffer_ms=prebuffer,
    )


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out
