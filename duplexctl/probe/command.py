"""``duplexctl probe`` end to end: the probes, the report saved after each, JUnit, verdict.

The command line builds a :class:`~duplexctl.probe.runner.ProbeConfig` and calls :func:`run`
with the outputs it was asked for. Each probe's verdict is printed as it comes (unless
``--json``), and ``--out`` / ``--junit`` are rewritten after every probe, so a Ctrl-C keeps
what was reached. An unreachable server is raised (exit 3) after ``--junit`` says why.
Exit 1 when any probe failed.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from duplexctl.errors import BadInput, DuplexctlError, WriteFailed
from duplexctl.probe.runner import ProbeConfig
from duplexctl.terminal import json_text


def check(config: ProbeConfig) -> None:
    """What the probes cannot run with (BadInput, before anything starts)."""
    from duplexctl.probe.probes import select

    try:
        select(config.only)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if config.max_sessions is not None and config.max_sessions < 1:
        raise BadInput(f"--max-sessions must be at least 1, not {config.max_sessions}")
    if config.disconnect_grace_s is not None and config.disconnect_grace_s < 0:
        raise BadInput("--disconnect-grace-s must not be negative")


def _say(line: str) -> None:
    print(f"duplexctl: {line}", file=sys.stderr, flush=True)


def run(
    config: ProbeConfig,
    *,
    out: Path | None = None,
    overwrite: bool = False,
    junit: Path | None = None,
    json_output: bool = False,
    say: Callable[[str], None] = _say,
) -> int:
    """Probe; the exit code (0 every probe passed or was skipped, 1 one failed)."""
    from duplexctl.probe.render import result_lines, summary_line
    from duplexctl.probe.runner import probe_target

    check(config)
    for note in config.settings.notes:
        say(f"note: {note}")

    def embedded(line: str) -> None:
        print(f"duplexctl: {line}", file=sys.stderr if json_output else sys.stdout)

    out_dir = None
    if out is not None:
        from duplexctl.rundir import prepare_run_dir

        out_dir = prepare_run_dir(out, flag="--out", overwrite=overwrite, command="probe")
    reached: list[dict[str, Any]] = []

    def save(doc: dict[str, Any]) -> None:
        if out_dir is not None:
            from duplexctl.report.html import probe_page

            probe_page.save(out_dir, doc)
        if junit is not None:
            from duplexctl.export import junit as junit_xml
            from duplexctl.export.junit_cases import probe_suite

            junit_xml.write(junit, [probe_suite(doc)])

    def live(result: Any) -> None:
        if not json_output:
            print("\n".join(result_lines(result)), flush=True)
        reached.append(result.to_dict())
        save({"url": config.url, "partial": True, "results": reached})  # Ctrl-C keeps it

    try:
        report = asyncio.run(probe_target(config, on_result=live, on_embedded=embedded))
        save(report.to_dict())
    except DuplexctlError as exc:  # unreachable (exit 3), a file not written (4): say why
        if junit is not None and not isinstance(exc, WriteFailed):
            from duplexctl.export import junit as junit_xml
            from duplexctl.export.junit_cases import error_suite

            name = f"duplexctl probe {config.url or ''}".strip()
            junit_xml.write(junit, [error_suite("probe", name, str(exc))])
        raise
    finally:
        if out_dir is not None:
            from duplexctl.rundir import announce

            announce(out_dir)
    if json_output:
        print(json_text(report.to_dict(), indent=2))
    else:
        if report.server_metrics:
            from duplexctl.prometheus.summary import render_lines

            print("\n".join(render_lines(report.server_metrics)))
        print(summary_line(report))
    if not report.ok:
        say(f"check failed: probe failed: {', '.join(r.name for r in report.failed)}")
        return 1
    return 0
