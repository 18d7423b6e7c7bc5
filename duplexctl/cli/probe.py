"""``duplexctl probe``: lifecycle-bug probes, one verdict each."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from duplexctl.cli import options as o
from duplexctl.cli.app import command
from duplexctl.cli.help import Example

EXAMPLES = (
    Example("probe", "Every probe against the embedded reference server"),
    Example(
        "probe --url ws://gpu:8000 --disconnect-grace-s 3",
        "A server whose disconnect grace is 3 s (resume-after-grace runs too)",
    ),
    Example("probe --list", "Each probe and the bug it catches"),
    Example(
        "probe --only admission --only abandoned-handshake --json",
        "Two probes, one JSON document",
    ),
    Example("probe --junit probe.xml --out probe1", "A JUnit case per probe, and report.html"),
)


@command(panels=(o.PROBES, o.TARGET, o.SESSION, o.OUTPUT, o.ADVANCED), examples=EXAMPLES)
def probe(
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only", metavar="PROBE", rich_help_panel=o.PROBES, help="Run only this probe."
        ),
    ] = None,
    list_probes: Annotated[
        bool,
        typer.Option(
            "--list", rich_help_panel=o.PROBES, help="List the probes and what each catches."
        ),
    ] = False,
    max_sessions: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=o.PROBES,
            help="The server's admission limit (else learned from a rejection); without "
            "--url, the embedded server's.",
        ),
    ] = None,
    disconnect_grace_s: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=o.duration,
            rich_help_panel=o.PROBES,
            help="The server's disconnect grace (20 s or less: resume-after-grace runs); "
            "without --url, the embedded server's.",
        ),
    ] = None,
    budget_s: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=o.duration,
            rich_help_panel=o.PROBES,
            help="Time budget: probes that no longer fit are skipped.",
        ),
    ] = None,
    url: o.UrlOption = None,
    api_key: o.ApiKeyOption = None,
    ca_file: o.CaFileOption = None,
    insecure: o.InsecureOption = False,
    model: o.ModelOption = None,
    ref_audio: o.RefAudioOption = None,
    session: o.SessionFileOption = None,
    tools: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE.json",
            parser=o.tools_file,
            rich_help_panel=o.SESSION,
            help="The tools the tool-calls probe declares.",
            show_default="get_weather",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            rich_help_panel=o.OUTPUT,
            help="Write report.json and report.html here, updated after each probe.",
        ),
    ] = None,
    json_output: o.JsonOption = False,
    overwrite: o.OverwriteOption = False,
    junit: o.JunitOption = None,
    server_metrics: o.ServerMetricsOption = None,
    no_server_metrics: o.NoServerMetricsOption = False,
    scrape_interval: o.ScrapeIntervalOption = None,
) -> int:
    """Probe a server for lifecycle bugs: one verdict per probe, exit 1 if any fails.

    Leaked admission slots, responses that never end, stuck turn gates, gaps or duplicates
    across a resume: each probe says what it catches (--list) and, on failure, shows the
    frames around it."""
    if list_probes:
        from duplexctl.probe import all_probes

        for p in all_probes():
            print(f"{p.name:<20} {p.catches}")
        return 0
    from duplexctl.probe.command import run
    from duplexctl.probe.runner import DEFAULT_BUDGET_S, ProbeConfig

    config = ProbeConfig(
        url=o.target(url, ca_file, insecure),
        api_key=api_key,
        only=only,
        max_sessions=max_sessions,
        disconnect_grace_s=disconnect_grace_s,
        budget_s=DEFAULT_BUDGET_S if budget_s is None else budget_s,
        model=model,
        ref_audio=ref_audio,
        session_file=None if session is None else str(session),
        tools=None if tools is None else str(tools),
        scrape=o.scrape(server_metrics, no_server_metrics, scrape_interval),
    )
    return run(
        config,
        out=out,
        overwrite=overwrite,
        junit=o.junit_path(junit),
        json_output=json_output,
    )
