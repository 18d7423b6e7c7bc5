"""``duplexctl replay`` end to end: one replay or a suite, its run directory, JUnit, verdict.

The command line builds a :class:`ReplayJob` from its options and calls :func:`run`; this
module does the rest: one scenario (or audio files) or a suite (several scenarios, a directory
of them: :mod:`duplexctl.scenario.suite`), the ``--out`` directory (duplexctl.rundir), the
report printed (a table, plain lines, or ``--json``'s one document), ``--junit`` (also when
the server could not be reached: CI sees why), and the exit code: 0 ok, 1 an expectation,
invariant or unanswered turn, 3 unreachable (raised), 130 Ctrl-C.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duplexctl.errors import DuplexctlError
from duplexctl.export.options import PushOptions
from duplexctl.prometheus.endpoints import ScrapeOptions
from duplexctl.scenario.config import CliOptions
from duplexctl.terminal import json_text


@dataclass(frozen=True, slots=True)
class ReplayJob:
    """What ``replay`` was asked: inputs, target, settings flags, outputs."""

    inputs: list[Path]
    options: CliOptions
    url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    out: Path | None = None
    overwrite: bool = False
    json_output: bool = False
    junit: Path | None = None
    scrape: ScrapeOptions | None = None
    push: PushOptions | None = None
    server_settings: Mapping[str, Any] = field(default_factory=dict)


def _progress(line: str) -> None:
    print(f"duplexctl: {line}", file=sys.stderr, flush=True)


def _write_junit(junit: Path | None, reports: list[dict[str, Any]]) -> None:
    """``--junit``: a test suite per replayed scenario."""
    if junit is not None:
        from duplexctl.export import junit as junit_xml
        from duplexctl.export.junit_cases import replay_suite

        junit_xml.write(junit, [replay_suite(report) for report in reports])


def _write_error_junit(junit: Path | None, name: str, exc: Exception) -> None:
    if junit is not None:
        from duplexctl.export import junit as junit_xml
        from duplexctl.export.junit_cases import error_suite

        junit_xml.write(junit, [error_suite("replay", name, str(exc))])


def run(job: ReplayJob, progress: Callable[[str], None] = _progress) -> int:
    """Run ``job``; the exit code (DuplexctlError for bad input or an unreachable server)."""
    from duplexctl.scenario.suite import suite_inputs

    suite = suite_inputs(job.inputs)
    if suite is not None:
        return _run_suite(job, suite, progress)
    return _run_one(job, progress)


def _run_one(job: ReplayJob, progress: Callable[[str], None]) -> int:
    from duplexctl.report.render import render
    from duplexctl.rundir import announce, prepare_run_dir
    from duplexctl.scenario.config import resolve
    from duplexctl.scenario.parse import load_inputs
    from duplexctl.scenario.runner import run_replay

    scenario = load_inputs(job.inputs)
    config = resolve(job.options, scenario.settings)
    for note in config.extra_notes:
        progress(f"note: {note}")
    if job.out is not None:
        prepare_run_dir(job.out, flag="--out", overwrite=job.overwrite, command="replay")
    try:
        result = asyncio.run(
            run_replay(
                scenario,
                config,
                job.url,
                api_key=job.api_key,
                out_dir=job.out,
                progress=progress,
                handle_sigint=True,
                scrape=job.scrape,
                push=job.push,
                server_settings=job.server_settings,
            )
        )
    except DuplexctlError as exc:  # the server could not be reached (exit 3) …: CI sees why
        _write_error_junit(job.junit, f"duplexctl replay {scenario.name}", exc)
        raise
    finally:
        if job.out is not None:
            announce(job.out)
    _write_junit(job.junit, [result.report])
    render(result.report, as_json=job.json_output)
    if result.report.get("server_metrics") and not job.json_output:
        from duplexctl.prometheus.summary import render_lines

        print("\n".join(render_lines(result.report["server_metrics"])))
    if result.write_failure is not None:
        raise result.write_failure  # one line: the path and the cause (exit 4)
    if result.interrupted:
        progress("interrupted: partial results")
    elif result.exit_code == 1:
        bits = result.failure_reasons()
        reasons = [b for b in bits if b not in result.problems] + result.problems[:3]
        progress(f"check failed: {'; '.join(reasons)}")
        missing = (result.report.get("needs_behaviour") or {}).get("missing")
        if missing:
            progress(f"note: {missing}")
    return result.exit_code


def _run_suite(job: ReplayJob, paths: list[Path], progress: Callable[[str], None]) -> int:
    """``replay a.toml b.toml …`` / ``replay DIR``: the scenarios in turn, one table;
    ``--junit``: one test suite per scenario."""
    from duplexctl.rundir import announce, prepare_run_dir
    from duplexctl.scenario.suite import run_suite, table_lines

    if job.out is not None:
        prepare_run_dir(job.out, flag="--out", overwrite=job.overwrite, command="replay")
    try:
        result = asyncio.run(
            run_suite(
                paths,
                job.options,
                job.url,
                api_key=job.api_key,
                out_dir=job.out,
                scrape=job.scrape,
                server_settings=job.server_settings,
                progress=progress,
                push=job.push,
            )
        )
    except DuplexctlError as exc:
        _write_error_junit(job.junit, "duplexctl replay (suite)", exc)
        raise
    finally:
        if job.out is not None:
            announce(job.out)
    _write_junit(job.junit, result.reports)
    if job.json_output:
        print(json_text(result.document()))
    else:
        print("\n".join(table_lines(result)))
    if result.write_failure is not None:
        raise result.write_failure  # one line: the path and the cause (exit 4)
    if result.interrupted:
        progress("interrupted: the scenarios not run are listed")
    elif result.failed:
        names = ", ".join(r["scenario"] for r in result.failed)
        progress(f"check failed: {len(result.failed)} scenario(s) failed: {names}")
    return result.exit_code
