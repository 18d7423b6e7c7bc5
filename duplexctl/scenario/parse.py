"""Scenario files (TOML) and WAV lists → validated :class:`~duplexctl.scenario.model.Scenario`.

Everything the user can get wrong is checked here, before any socket is opened, and
reported as one :class:`~duplexctl.errors.BadInput` line that names the file and the
problem (``recordings/x.toml: step 3: unknown action 'bargein'``), so a typo costs a second,
not a half-finished run. Paths inside a scenario are relative to the scenario file.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from duplexctl.behaviour.figures import BOOLEAN_FIGURES
from duplexctl.errors import BadInput
from duplexctl.report.turns import EXPECTABLE_FIGURES, RUN_ORIGINS, TEXT_FIELDS
from duplexctl.resolver import SCENARIO_SETTINGS, check_setting
from duplexctl.scenario.model import (
    ACTIONS,
    OUTCOMES,
    Anchor,
    BargeIn,
    Cancel,
    Commit,
    Drop,
    Expectation,
    Interrupt,
    Pause,
    Say,
    Scenario,
    Settings,
    Silence,
    Step,
    ToolOutput,
    Wait,
)

SCENARIO_SUFFIXES: Final = (".toml",)

_TOP_KEYS: Final = frozenset(
    {"name", "description", "needs_behaviour", "settings", "session", "step", "expect"}
)
_SETTING_KEYS: Final = SCENARIO_SETTINGS
# keys each action accepts besides "action" and "expect"
_STEP_KEYS: Final[dict[str, frozenset[str]]] = {
    "say": frozenset({"file", "commit", "tail_ms"}),
    "silence": frozenset({"ms"}),
    "pause": frozenset({"ms", "file"}),
    "wait": frozenset({"timeout_s"}),
    "barge_in": frozenset({"file", "after_ms", "anchor", "interrupt", "commit", "tail_ms"}),
    "cancel": frozenset({"after_ms", "anchor"}),
    "drop": frozenset({"after_ms", "anchor", "resume_after_ms"}),
    "commit": frozenset({"response_create"}),
    "tool_output": frozenset({"output", "name", "latency_ms", "timeout_s"}),
}


class _Problem(Exception):
    """A validation problem; the caller prefixes the file name (and step)."""


def is_scenario_path(path: Path) -> bool:
    return path.suffix.lower() in SCENARIO_SUFFIXES


def load_inputs(paths: Iterable[Path]) -> Scenario:
    """``replay``'s positional arguments: one scenario file, or audio files (one turn each)."""
    paths = list(paths)
    if not paths:
        raise BadInput("nothing to replay: give audio files or one scenario .toml")
    scenarios = [p for p in paths if is_scenario_path(p)]
    if scenarios and len(paths) > 1:
        raise BadInput(
            f"{scenarios[0]}: a scenario file must be the only input (got {len(paths)} inputs)"
        )
    if scenarios:
        return load_scenario(scenarios[0])
    return from_audio_files(paths)


def from_audio_files(paths: Iterable[Path]) -> Scenario:
    """Each file is one user turn: say it, then wait for the answer."""
    steps: list[Step] = []
    paths = list(paths)
    for path in paths:
        if not path.is_file():
            raise BadInput(f"{path}: no such file")
        steps.append(Say(index=len(steps) + 1, file=path))
        steps.append(Wait(index=len(steps) + 1))
    name = paths[0].stem if len(paths) == 1 else f"{paths[0].stem}+{len(paths) - 1}"
    return Scenario(name=name, steps=tuple(steps))


def load_scenario(path: Path) -> Scenario:
    """Read and validate one TOML scenario; every problem is one BadInput line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from None
    return parse_scenario(text, path)


def parse_scenario(text: str, path: Path) -> Scenario:
    """Validate TOML text as a scenario located at ``path`` (for relative audio paths)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{path}: not valid TOML: {exc}") from None
    base = path.parent
    try:
        unknown = sorted(set(doc) - _TOP_KEYS)
        if unknown:
            raise _Problem(
                f"unknown top-level key {unknown[0]!r} (expected one of {_list(_TOP_KEYS)})"
            )
        settings = _settings(doc.get("settings", {}), doc.get("session", {}), path)
        name = doc.get("name", path.stem)
        description = doc.get("description", "")
        needs = doc.get("needs_behaviour", "")
        if not isinstance(name, str) or not isinstance(description, str):
            raise _Problem("'name' and 'description' must be strings")
        if not isinstance(needs, str):
            raise _Problem(
                "'needs_behaviour' must be a string as serve --behaviour takes it, "
                'e.g. "backchannel-rate=6"'
            )
        raw_steps = doc.get("step")
        if raw_steps is None:
            raise _Problem("no steps: add at least one [[step]] table")
        if not isinstance(raw_steps, list) or not all(isinstance(s, dict) for s in raw_steps):
            raise _Problem("'step' must be an array of tables ([[step]])")
        run_expect = _run_expectations(doc.get("expect", {}))
    except _Problem as exc:
        raise BadInput(f"{path}: {exc}") from None
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps, start=1):
        try:
            steps.append(_step(i, raw, base))
        except _Problem as exc:
            raise BadInput(f"{path}: step {i}: {exc}") from None
    return Scenario(
        name=name,
        steps=tuple(steps),
        settings=settings,
        source=path,
        description=description,
        expect=run_expect,
        needs_behaviour=needs.strip(),
    )


def _list(keys: Iterable[str]) -> str:
    return ", ".join(sorted(keys))


def _settings(raw: Any, session: Any, source: Path) -> Settings:
    """The scenario's layer of the run settings. Each value is checked by the resolver's
    one definition of the setting (:func:`duplexctl.resolver.check_setting`); the typed keys
    of ``[session]`` are checked when the run resolves them, with the rest of the layers."""
    if not isinstance(raw, dict):
        raise _Problem("[settings] must be a table")
    if not isinstance(session, dict):
        raise _Problem("[session] must be a table (merged into session.update)")
    unknown = sorted(set(raw) - _SETTING_KEYS)
    if unknown:
        raise _Problem(
            f"settings: unknown key {unknown[0]!r} (expected one of {_list(_SETTING_KEYS)})"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "ref_audio":
            values[key] = _file(value, source.parent, "settings: ref_audio")
            continue
        if key in ("tools", "tool_outputs") and isinstance(value, str):
            value = _file(value, source.parent, f"settings: {key}")
        try:
            values[key] = check_setting(key, value)
        except ValueError as exc:
            raise _Problem(f"settings: {key} {exc}") from None
    return Settings(**values, session=dict(session), source=source)


def _opt(raw: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = raw.get(key)
    if value is None:
        return None
    if kind is bool and not isinstance(value, bool):
        raise _Problem(f"{where}: {key} must be true or false, not {value!r}")
    if kind is str and not isinstance(value, str):
        raise _Problem(f"{where}: {key} must be a string, not {value!r}")
    return value


def _number(raw: Mapping[str, Any], key: str, where: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Problem(f"{where}{key} must be a number, not {value!r}")
    return float(value)


def _positive(raw: Mapping[str, Any], key: str, where: str) -> float | None:
    value = _number(raw, key, f"{where}: " if where else "")
    if value is not None and value <= 0:
        raise _Problem(f"{where + ': ' if where else ''}{key} must be > 0, not {value:g}")
    return value


def _non_negative(raw: Mapping[str, Any], key: str, where: str = "") -> float | None:
    value = _number(raw, key, f"{where}: " if where else "")
    if value is not None and value < 0:
        raise _Problem(f"{where + ': ' if where else ''}{key} must be >= 0, not {value:g}")
    return value


def _file(value: Any, base: Path, what: str) -> Path:
    if not isinstance(value, str) or not value:
        raise _Problem(f"{what} must be a file name, not {value!r}")
    path = Path(value)
    if not path.is_absolute():
        path = base / path
    if not path.is_file():
        raise _Problem(f"{what}: no such file {value!r}")
    return path


def _step(index: int, raw: dict[str, Any], base: Path) -> Step:
    action = raw.get("action")
    if action is None:
        raise _Problem(f"missing 'action' (one of {_list(ACTIONS)})")
    if action not in ACTIONS:
        raise _Problem(f"unknown action {action!r} (expected one of {_list(ACTIONS)})")
    allowed = _STEP_KEYS[action]
    unknown = sorted(set(raw) - allowed - {"action", "expect"})
    if unknown:
        raise _Problem(
            f"{action}: unknown key {unknown[0]!r} (expected one of {_list(allowed | {'expect'})})"
        )
    expect = _expectations(raw.get("expect", {}))
    if action in ("say", "barge_in"):
        if "file" not in raw:
            raise _Problem(f"{action}: missing 'file'")
        file = _file(raw["file"], base, f"{action}: file")
        commit = _opt(raw, "commit", bool, action)
        tail = _non_negative(raw, "tail_ms", action)
        tail_ms = 200.0 if tail is None else tail
        if action == "say":
            return Say(index, file, commit=commit, tail_ms=tail_ms, expect=expect)
        interrupt = raw.get("interrupt")
        if interrupt is not None and interrupt not in tuple(Interrupt):
            raise _Problem(
                f"barge_in: interrupt must be one of {_list(Interrupt)}, not {interrupt!r}"
            )
        return BargeIn(
            index,
            file,
            after_ms=_after(raw, action),
            anchor=_anchor(raw, action),
            interrupt=Interrupt(interrupt) if interrupt is not None else None,
            commit=commit,
            tail_ms=tail_ms,
            expect=expect,
        )
    if action == "silence":
        ms = _non_negative(raw, "ms", "silence")
        if ms is None:
            raise _Problem("silence: missing 'ms'")
        return Silence(index, ms, expect=expect)
    if action == "pause":
        ms = _non_negative(raw, "ms", "pause")
        if ms is None or ms <= 0:
            raise _Problem("pause: 'ms' must be a number > 0")
        if "file" not in raw:
            raise _Problem("pause: missing 'file' (the speech that continues the turn)")
        return Pause(index, ms, _file(raw["file"], base, "pause: file"), expect=expect)
    if action == "wait":
        return Wait(index, timeout_s=_positive(raw, "timeout_s", "wait"), expect=expect)
    if action == "cancel":
        return Cancel(
            index, after_ms=_after(raw, action), anchor=_anchor(raw, action), expect=expect
        )
    if action == "drop":
        resume = _non_negative(raw, "resume_after_ms", "drop")
        return Drop(
            index,
            after_ms=_after(raw, action),
            anchor=_anchor(raw, action),
            resume_after_ms=500.0 if resume is None else resume,
            expect=expect,
        )
    if action == "tool_output":
        output = raw.get("output")
        if output is not None and not isinstance(output, str):
            output = json.dumps(output)  # a table or list: sent as its JSON text
        return ToolOutput(
            index,
            output=output,
            name=_opt(raw, "name", str, action),
            latency_ms=_non_negative(raw, "latency_ms", action),
            timeout_s=_positive(raw, "timeout_s", action),
            expect=expect,
        )
    response_create = _opt(raw, "response_create", bool, "commit")
    return Commit(
        index, response_create=True if response_create is None else response_create, expect=expect
    )


def _after(raw: Mapping[str, Any], action: str) -> float:
    value = _non_negative(raw, "after_ms", action)
    return 500.0 if value is None else value


def _anchor(raw: Mapping[str, Any], action: str) -> Anchor:
    value = raw.get("anchor", Anchor.FIRST_AUDIO.value)
    if value not in tuple(Anchor):
        raise _Problem(f"{action}: anchor must be one of {_list(Anchor)}, not {value!r}")
    return Anchor(value)


def _expectations(raw: Any) -> tuple[Expectation, ...]:
    if not isinstance(raw, dict):
        raise _Problem('expect must be a table, e.g. expect = { outcome = "spoke" }')
    out: list[Expectation] = []
    for name, value in raw.items():
        out.append(_expectation(name, value))
    return tuple(out)


def _run_expectations(raw: Any) -> tuple[Expectation, ...]:
    """The top-level ``[expect]`` table: bounds on run-wide figures (drops, resumes, …)."""
    if not isinstance(raw, dict):
        raise _Problem("[expect] must be a table, e.g. [expect] drops = 0")
    out: list[Expectation] = []
    for name, value in raw.items():
        if name not in RUN_ORIGINS:
            raise _Problem(
                f"[expect]: unknown run figure {name!r} (expected one of {_list(RUN_ORIGINS)})"
            )
        if isinstance(value, bool) and name in BOOLEAN_FIGURES:
            out.append(Expectation(name, "==", str(value).lower(), str(value).lower()))
            continue
        exp = Expectation.parse_number(name, value)
        if exp is None:
            raise _Problem(
                f"[expect]: {name} = {value!r} is not a bound "
                '(use a number, "<N", "<=N", ">N", ">=N", "==N", "!=N" or "A..B")'
            )
        out.append(exp)
    return tuple(out)


def _expectation(name: str, value: Any) -> Expectation:
    if name in TEXT_FIELDS:
        if isinstance(value, str):
            values: tuple[str, ...] = (value,)
        elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            values = tuple(value)
        elif isinstance(value, bool) and name == "early_start":
            return Expectation(name, "==", str(value).lower(), str(value).lower())
        else:
            raise _Problem(f"expect: {name} must be a string or a list of strings, not {value!r}")
        if name == "outcome":
            bad = [v for v in values if v not in OUTCOMES]
            if bad:
                raise _Problem(
                    f"expect: unknown outcome {bad[0]!r} (expected one of {_list(OUTCOMES)})"
                )
        if len(values) == 1:
            return Expectation(name, "==", values[0], values[0])
        return Expectation(name, "in", values, " | ".join(values))
    if name in EXPECTABLE_FIGURES:
        exp = Expectation.parse_number(name, value)
        if exp is None:
            raise _Problem(
                f"expect: {name} = {value!r} is not a bound "
                '(use a number, "<N", "<=N", ">N", ">=N", "==N", "!=N" or "A..B")'
            )
        return exp
    raise _Problem(
        f"expect: unknown figure {name!r} "
        f"(expected one of {_list(TEXT_FIELDS | EXPECTABLE_FIGURES)})"
    )
