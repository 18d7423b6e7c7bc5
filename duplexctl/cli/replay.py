"""``duplexctl replay``: scripted user turns against a server, timed; a suite of scenarios."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from duplexctl.cli import options as o
from duplexctl.cli.app import command
from duplexctl.cli.help import Example

EXAMPLES = (
    Example("replay recordings/hello.wav recordings/followup.wav", "One user turn per file"),
    Example(
        "replay recordings/barge_in.toml --url ws://gpu:8000 --out replay1",
        "A scripted barge-in against a server; report.json, WAVs and report.html in replay1/",
    ),
    Example(
        "replay recordings/hello.wav --turn-detection none --json",
        "The client commits the turn; one JSON report on stdout",
    ),
    Example(
        "replay recordings/cancel.toml recordings/resume.toml --junit suite.xml",
        "A suite: one table, a JUnit test suite per scenario",
    ),
    Example(
        "replay recordings/backchannel.toml --server-behaviour backchannel-rate=30",
        "Turn on the behaviour a scenario needs in the embedded model",
    ),
)


@command(
    panels=(o.TARGET, o.SESSION, o.OUTPUT, o.SERVER, o.ADVANCED),
    examples=EXAMPLES,
)
def replay(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            parser=o.input_path,
            help="Audio files (each one user turn: said, then its answer awaited), one "
            "scenario .toml, or several scenarios or a directory of them (a suite).",
            show_default=False,
        ),
    ],
    url: o.UrlOption = None,
    api_key: o.ApiKeyOption = None,
    ca_file: o.CaFileOption = None,
    insecure: o.InsecureOption = False,
    turn_detection: o.TurnDetectionOption = None,
    vad_silence_ms: o.VadSilenceOption = None,
    commit: o.CommitOption = None,
    auto_response: o.AutoResponseOption = None,
    pace: Annotated[
        Literal["realtime", "fast"] | None,
        typer.Option(
            rich_help_panel=o.SESSION,
            help="Send audio in real time, or as fast as the server accepts it.",
        ),
    ] = None,
    model: o.ModelOption = None,
    voice: o.VoiceOption = None,
    ref_audio: o.RefAudioOption = None,
    instructions: o.InstructionsOption = None,
    session: o.SessionFileOption = None,
    chunk_ms: o.ChunkMsOption = None,
    response_timeout_s: o.ResponseTimeoutOption = None,
    prebuffer_ms: o.PrebufferOption = None,
    tools: o.ToolsOption = None,
    tool_outputs: o.ToolOutputsOption = None,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            rich_help_panel=o.OUTPUT,
            help="Write report.json, events.jsonl, the WAVs and report.html here, as the run "
            "goes (a suite: a directory per scenario and index.html).",
        ),
    ] = None,
    json_output: o.JsonOption = False,
    overwrite: o.OverwriteOption = False,
    junit: o.JunitOption = None,
    prometheus_rw: o.PrometheusRwOption = None,
    server_behaviour: o.ServerBehaviourOption = None,
    server_metrics: o.ServerMetricsOption = None,
    no_server_metrics: o.NoServerMetricsOption = False,
    scrape_interval: o.ScrapeIntervalOption = None,
    prometheus_rw_interval: o.PrometheusRwIntervalOption = None,
    prometheus_rw_histograms: o.PrometheusRwHistogramsOption = None,
) -> int:
    """Play scripted user turns against a server: per-turn timings, audio and a report.

    Several scenarios, or a directory of them, run as a suite: one table, DIR/index.html.
    Exit 1 when an expectation, an invariant or an answer failed."""
    from duplexctl.scenario.command import ReplayJob, run
    from duplexctl.scenario.config import CliOptions

    job = ReplayJob(
        inputs=list(inputs),
        options=CliOptions(
            model=model,
            voice=voice,
            ref_audio=ref_audio,
            instructions=instructions,
            turn_detection=turn_detection,
            vad_silence_ms=vad_silence_ms,
            auto_response=auto_response,
            commit=commit,
            session_file=session,
            chunk_ms=chunk_ms,
            pace=pace,
            response_timeout_s=response_timeout_s,
            prebuffer_ms=prebuffer_ms,
            tools=tools,
            tool_outputs=tool_outputs,
        ),
        url=o.target(url, ca_file, insecure),
        api_key=api_key,
        out=out,
        overwrite=overwrite,
        json_output=json_output,
        junit=o.junit_path(junit),
        scrape=o.scrape(server_metrics, no_server_metrics, scrape_interval),
        push=o.push(prometheus_rw, prometheus_rw_interval, prometheus_rw_histograms),
        server_settings=o.embedded_behaviour(url, server_behaviour),
    )
    return run(job)
