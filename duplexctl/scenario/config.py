"""What one replay run uses, resolved by :mod:`duplexctl.resolver` from its layers.

Resolution happens once, before any socket is opened, so a bad value (or an unreadable
``--session`` / ``--ref-audio`` file) is a one-line exit-2 error and the run itself never
has to wonder where a value came from. ``load`` builds the same :class:`ReplayConfig` for
its sessions (:func:`duplexctl.load.engine.make_plan`), from its own column of defaults.
The api key is deliberately *not* part of :class:`ReplayConfig`: the config is echoed into
``report.json``, the key must never be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duplexctl.errors import BadInput
from duplexctl.protocol.settings import SessionSettings
from duplexctl.resolver import Command, RunSettings
from duplexctl.resolver import resolve as resolve_settings
from duplexctl.scenario.model import Pace, Pause, Scenario, Settings, TurnEnd


@dataclass(frozen=True, slots=True)
class CliOptions:
    """The replay flags as typed on the command line; None = not given."""

    model: str | None = None
    voice: str | None = None
    ref_audio: str | Path | None = None
    instructions: str | None = None
    turn_detection: str | None = None
    vad_silence_ms: int | None = None
    auto_response: bool | None = None
    commit: bool | None = None
    session_file: Path | None = None
    chunk_ms: int | None = None
    pace: str | None = None
    response_timeout_s: float | None = None
    prebuffer_ms: float | None = None
    tools: Path | None = None
    tool_outputs: Path | None = None

    def flags(self) -> dict[str, Any]:
        """The settings flags by name (``--session`` is a layer of its own, not a flag)."""
        return {
            name: getattr(self, name)
            for name in self.__dataclass_fields__
            if name != "session_file"
        }


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """Everything a run needs besides the URL and the credentials."""

    settings: SessionSettings
    end_mode: TurnEnd
    chunk_ms: int
    pace: Pace
    response_timeout_s: float
    prebuffer_ms: float
    run: RunSettings  # every value with its origin, echoed into the report
    # tool name -> {"output": str, "latency_ms": float}: the answers of --tool-outputs
    tool_outputs: dict[str, dict[str, Any]] | None = None
    extra_notes: list[str] = field(default_factory=list)

    @classmethod
    def from_run(cls, run: RunSettings) -> ReplayConfig:
        """The runner's config from resolved settings (replay's or load's column)."""
        return cls(
            settings=run.session_settings(),
            end_mode=end_mode_of(run["turn_detection"], run["auto_response"], run["commit"]),
            chunk_ms=run["chunk_ms"],
            pace=run["pace"],
            response_timeout_s=run["response_timeout_s"],
            prebuffer_ms=run["prebuffer_ms"],
            run=run,
            tool_outputs=run["tool_outputs"],
            extra_notes=list(run.notes),
        )

    def echo(self) -> dict[str, Any]:
        """The config as report.json shows it: the settings used, each with its origin
        (``origin``), and who ends a turn (no secret is part of it)."""
        out = self.run.echo()
        out["end_mode"] = self.end_mode.value
        return out


def end_mode_of(turn_detection: str, auto_response: bool, commit: bool) -> TurnEnd:
    """Who ends a turn (docs/protocol.md §6.1): the model, the client, or the server's VAD."""
    if auto_response:
        return TurnEnd.MODEL
    if commit or turn_detection == "none":
        return TurnEnd.COMMIT
    return TurnEnd.VAD


def resolve(cli: CliOptions, scenario: Settings) -> ReplayConfig:
    """Replay's settings: defaults < scenario < ``--session`` < flags (BadInput if bad)."""
    run = resolve_settings(
        Command.REPLAY, flags=cli.flags(), scenario=scenario, session_file=cli.session_file
    )
    return ReplayConfig.from_run(run)


def check_pauses(scenario: Scenario, config: ReplayConfig) -> None:
    """A ``pause`` must not end the turn: under server VAD it must be shorter than the
    silence window that would (BadInput naming the step, before anything starts)."""
    window = config.settings.vad_silence_ms
    if config.end_mode is not TurnEnd.VAD or window is None:
        return
    for step in scenario.steps:
        if isinstance(step, Pause) and step.ms >= window:
            where = f"{scenario.source}: " if scenario.source else ""
            raise BadInput(
                f"{where}step {step.index}: pause: {step.ms:g} ms would end the turn: server VAD "
                f"commits after {window} ms of silence (use a shorter pause or a longer "
                "vad_silence_ms)"
            )
