"""The ``duplexctl`` command line: a thin Typer layer.

Each command parses its options, builds a config, calls one function of the package and
renders the result. Heavy imports (numpy, websockets, sounddevice) happen inside the
commands so ``duplexctl --help`` stays fast and every command but ``talk`` works without
PortAudio. Errors of :mod:`duplexctl.errors` become one line on stderr and their exit code.
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from duplexctl import __version__
from duplexctl.errors import STOP_SIGNALS, DuplexctlError
from duplexctl.terminal import guarded

app = typer.Typer(
    name="duplexctl",
    help="Test full-duplex speech servers (vLLM-Omni duplex Realtime protocol).",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    add_completion=False,
)

F = TypeVar("F", bound=Callable[..., Any])

# Options every client command shares (docs/architecture.md: command-line contract), defined
# once so their names, environment variables and help read the same in every command.
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="DUPLEXCTL_URL",
        help="Server, e.g. ws://host:8000/v1/realtime?duplex=1 (none: start the embedded "
        "reference server on a free loopback port). http:// and https:// are taken as ws:// "
        "and wss://; a URL without a path gets /v1/realtime?duplex=1.",
        show_default=False,
    ),
]
CaFileOption = Annotated[
    Path | None,
    typer.Option(
        "--ca-file",
        envvar="DUPLEXCTL_CA_FILE",
        help="wss://: trust server certificates signed by this CA (a PEM file), e.g. a "
        "self-signed or private one (default: the system trust store).",
        show_default=False,
    ),
]
InsecureOption = Annotated[
    bool,
    typer.Option(
        "--insecure",
        envvar="DUPLEXCTL_INSECURE",
        help="wss:// without verifying the server's certificate: anyone on the path can "
        "impersonate the server (a warning is printed on every run).",
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="DUPLEXCTL_API_KEY",
        help="Sent as a bearer header on the upgrade; never printed or written.",
        show_default=False,
    ),
]
ModelOption = Annotated[str | None, typer.Option("--model", help="Session model name.")]
VoiceOption = Annotated[str | None, typer.Option("--voice", help="Session voice.")]
InstructionsOption = Annotated[
    str | None, typer.Option("--instructions", help="Session instructions (system prompt).")
]
VadSilenceOption = Annotated[
    int | None,
    typer.Option(
        "--vad-silence-ms",
        help="Server VAD silence that ends a turn, sent as silence_duration_ms (default 800).",
        show_default=False,
    ),
]
# Every session/turn option defaults to None = not given: duplexctl.resolver decides, with
# one precedence for every command (defaults < scenario < --session < flags).

OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace the run in a non-empty output directory (only one duplexctl wrote); "
        "without it a non-empty directory is refused.",
    ),
]


ServerMetricsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--server-metrics",
        help="Also scrape this Prometheus /metrics URL (DCGM, node exporter …; repeatable). "
        "The server's own /metrics is scraped by default.",
    ),
]
NoServerMetricsOption = Annotated[
    bool, typer.Option("--no-server-metrics", help="Do not scrape any server /metrics.")
]
ScrapeIntervalOption = Annotated[
    float | None,
    typer.Option("--scrape-interval", help="Seconds between scrapes of /metrics (default 1)."),
]


PrometheusRwOption = Annotated[
    str | None,
    typer.Option(
        "--prometheus-rw",
        metavar="URL",
        help="Push the run's figures by Prometheus remote write to this receiver while it "
        "runs (e.g. http://prometheus:9090/api/v1/write; user:password@ for basic auth).",
    ),
]
PrometheusRwIntervalOption = Annotated[
    float | None,
    typer.Option("--prometheus-rw-interval", help="Seconds between pushes (default 5)."),
]
PrometheusRwHistogramsOption = Annotated[
    str | None,
    typer.Option(
        "--prometheus-rw-histograms",
        help="native (default; percentiles when the receiver refuses them) or percentiles.",
    ),
]
JunitOption = Annotated[
    Path | None,
    typer.Option("--junit", metavar="FILE", help="Write the verdicts as JUnit XML (for CI)."),
]


def push_options(url: str | None, interval: float | None, histograms: str | None) -> Any:
    """The remote-write options of load and replay, checked once (exit 2)."""
    from duplexctl.export.options import PushOptions

    return PushOptions.resolve(url, interval, histograms)


def junit_path(path: Path | None) -> Path | None:
    """``--junit FILE``, checked before the run (exit 2)."""
    if path is None:
        return None
    from duplexctl.export.junit import check_path

    return check_path(path)


ServerBehaviourOption = Annotated[
    list[str] | None,
    typer.Option(
        "--server-behaviour",
        help="Embedded server (no --url): the model's behaviour, as serve --behaviour takes it, "
        "e.g. backchannel-rate=6,stop-latency-ms=300 (repeatable).",
    ),
]


def scrape_options(
    server_metrics: list[str] | None, no_server_metrics: bool, scrape_interval: float | None
) -> Any:
    """The server-metrics options of load, replay and probe, checked once (exit 2)."""
    from duplexctl.prometheus.endpoints import resolve

    return resolve(server_metrics, enabled=not no_server_metrics, interval_s=scrape_interval)


def server_url(url: str | None, ca_file: Path | None, insecure: bool) -> str | None:
    """The shared --url / --ca-file / --insecure of every client command, before anything
    starts (duplexctl.client.target): the URL to connect to (None: the embedded server), one
    line when it was normalised, the --insecure warning; exit 2 when malformed."""
    from duplexctl.client.target import TlsPolicy, prepare

    resolved, lines = prepare(url, TlsPolicy(ca_file=ca_file, insecure=insecure))
    for line in lines:
        print(f"duplexctl: {line}", file=sys.stderr)
    return resolved


def _as_ctrl_c(_signum: int, _frame: Any) -> None:
    signal.raise_signal(signal.SIGINT)


def reports_errors(fn: F) -> F:
    """Turn DuplexctlError into one stderr line and its exit code; Ctrl-C into 130; show
    everything the command prints through duplexctl.terminal (no control character a server
    sent reaches the terminal).

    The other stop signals (``errors.STOP_SIGNALS``: SIGTERM) are made a Ctrl-C for the
    command's whole run: replay, talk and load handle both in their event loops; any other
    command (probe) gets the Ctrl-C path — its sessions closed as its task is cancelled —
    instead of dying with them open."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = {
            signum: signal.signal(signum, _as_ctrl_c)
            for signum in STOP_SIGNALS
            if signum != signal.SIGINT
        }
        try:
            with guarded():
                try:
                    return fn(*args, **kwargs)
                except DuplexctlError as exc:
                    print(f"duplexctl: error: {exc}", file=sys.stderr)
                    raise typer.Exit(exc.exit_code) from None
                except KeyboardInterrupt:
                    print("duplexctl: interrupted", file=sys.stderr)
                    raise typer.Exit(130) from None
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    return wrapper  # type: ignore[return-value]


def _say_notes(notes: Any) -> None:
    """Settings the resolver ignored (a command's fixed value asked otherwise): one line each."""
    for note in notes:
        print(f"duplexctl: note: {note}", file=sys.stderr)


def _version(value: bool) -> None:
    if value:
        print(f"duplexctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Test full-duplex speech servers: talk, replay, load, probe, serve."""


@app.command()
@reports_errors
def serve(
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0 = a free one).")] = 8765,
    max_sessions: Annotated[int, typer.Option(help="Admission limit.")] = 4,
    dialect: Annotated[str, typer.Option(help="Wire dialect: g2 (vLLM-Omni 0.30+) or g1.")] = "g2",
    model_profile: Annotated[
        str,
        typer.Option(
            help="native: MiniCPM-o-like (auto_response allowed); turn: Qwen3-Omni-like "
            "(commit or server VAD only)."
        ),
    ] = "native",
    voice: Annotated[str, typer.Option(help="Simulated reply: tone or echo.")] = "tone",
    reply_seconds: Annotated[float, typer.Option(help="Length of a tone reply.")] = 2.0,
    ttfa_ms: Annotated[float, typer.Option(help="Simulated time to first audio.")] = 300.0,
    ttfa_jitter_ms: Annotated[float, typer.Option(help="Uniform jitter added to ttfa.")] = 0.0,
    chunk_ms: Annotated[int, typer.Option(help="Output audio chunk (model unit) in ms.")] = 1000,
    realtime_factor: Annotated[
        float, typer.Option(help="Delta pacing: 1 = real time, 0 = as fast as computed.")
    ] = 1.0,
    gpu_slots: Annotated[int, typer.Option(help="Simulated GPU batch slots (0 = unlimited).")] = 0,
    unit_compute_ms: Annotated[
        float, typer.Option(help="GPU time one output unit occupies a slot.")
    ] = 0.0,
    disconnect_grace_s: Annotated[float, typer.Option(help="Resume window after a drop.")] = 30.0,
    idle_ttl_s: Annotated[float, typer.Option(help="Session idle TTL (0 = none).")] = 300.0,
    config_timeout_s: Annotated[
        float, typer.Option(help="Wait for the first client event.")
    ] = 10.0,
    resume_replay_ttl_s: Annotated[float, typer.Option(help="Journal entry TTL.")] = 60.0,
    reaper_interval_s: Annotated[float, typer.Option(help="Lease reaper tick.")] = 1.0,
    seed: Annotated[int | None, typer.Option(help="Seed for jitter.")] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            help="Inject a fault: leak-undelivered-created, orphan-response, stuck-gate, "
            "drop-after=N, latency-ms=MS, fail-append-every=N (repeatable)."
        ),
    ] = None,
    behaviour: Annotated[
        list[str] | None,
        typer.Option(
            help="Model behaviour with known ground truth (server VAD sessions): "
            "takeover-on-pause=P,backchannel-rate=R,stop-latency-ms=M,response-gap-ms=G (repeatable)."
        ),
    ] = None,
) -> None:
    """Run the reference duplex server (simulated model) until Ctrl-C."""
    from duplexctl.errors import BadInput
    from duplexctl.protocol.names import Dialect
    from duplexctl.server.behaviour import parse_behaviours
    from duplexctl.server.config import ServerConfig, parse_fault

    try:
        faults = [parse_fault(spec) for spec in fault or []]
        behaviours = parse_behaviours(behaviour or [])
        config = ServerConfig(
            host=host,
            port=port,
            max_sessions=max_sessions,
            dialect=Dialect(dialect.lower()),
            model_profile=model_profile,  # type: ignore[arg-type]
            voice=voice,  # type: ignore[arg-type]
            reply_seconds=reply_seconds,
            ttfa_ms=ttfa_ms,
            ttfa_jitter_ms=ttfa_jitter_ms,
            chunk_ms=chunk_ms,
            realtime_factor=realtime_factor,
            gpu_slots=gpu_slots,
            unit_compute_ms=unit_compute_ms,
            disconnect_grace_s=disconnect_grace_s,
            idle_ttl_s=idle_ttl_s or None,
            config_timeout_s=config_timeout_s,
            resume_replay_ttl_s=resume_replay_ttl_s,
            reaper_interval_s=reaper_interval_s,
            seed=seed,
            faults=faults,
            behaviour=behaviours,
        )
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if model_profile not in ("native", "turn"):
        raise BadInput(f"--model-profile must be native or turn, not {model_profile!r}")
    if voice not in ("tone", "echo"):
        raise BadInput(f"--voice must be tone or echo, not {voice!r}")
    if max_sessions < 1:
        raise BadInput("--max-sessions must be at least 1")

    from duplexctl.server.app import run

    run(config)


@app.command()
@reports_errors
def replay(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            help="Audio files (each one user turn: say it, wait for the answer) or one "
            "scenario .toml (see README: replay).",
            show_default=False,
        ),
    ],
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    ca_file: CaFileOption = None,
    insecure: InsecureOption = False,
    model: ModelOption = None,
    voice: VoiceOption = None,
    ref_audio: Annotated[
        Path | None, typer.Option(help="Reference voice clip, sent as a data: URI.")
    ] = None,
    instructions: InstructionsOption = None,
    turn_detection: Annotated[
        str | None,
        typer.Option(help="server_vad (default: the server ends turns) or none (client commits)."),
    ] = None,
    vad_silence_ms: VadSilenceOption = None,
    auto_response: Annotated[
        bool | None,
        typer.Option(
            "--auto-response/--no-auto-response",
            help="Model-native lane: the model decides when to answer.",
            show_default=False,
        ),
    ] = None,
    commit: Annotated[
        bool | None,
        typer.Option(
            "--commit/--no-commit",
            help="Client commits (response_create) after each turn's speech + a short tail.",
            show_default=False,
        ),
    ] = None,
    session: Annotated[
        Path | None,
        typer.Option(
            help="JSON session object: its typed keys rank between the scenario and flags; "
            "the rest goes into the opening session.update as is."
        ),
    ] = None,
    chunk_ms: Annotated[int | None, typer.Option(help="Append size in ms (default 100).")] = None,
    pace: Annotated[
        str | None, typer.Option(help="realtime (default) or fast (as fast as accepted).")
    ] = None,
    response_timeout_s: Annotated[
        float | None, typer.Option(help="Wait this long for an answer (default 20).")
    ] = None,
    prebuffer_ms: Annotated[
        float | None, typer.Option(help="Simulated playback jitter buffer (default 100).")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON report on stdout instead of tables.")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="Write report.json, events.jsonl and WAVs here (incrementally)."),
    ] = None,
    overwrite: OverwriteOption = False,
    server_metrics: ServerMetricsOption = None,
    no_server_metrics: NoServerMetricsOption = False,
    scrape_interval: ScrapeIntervalOption = None,
    prometheus_rw: PrometheusRwOption = None,
    prometheus_rw_interval: PrometheusRwIntervalOption = None,
    prometheus_rw_histograms: PrometheusRwHistogramsOption = None,
    junit: JunitOption = None,
    server_behaviour: ServerBehaviourOption = None,
) -> None:
    """Play scripted user turns against a server; per-turn timings, audio and a report.
    Several scenarios (or a directory of them) run as a suite: one table, DIR/index.html."""
    import asyncio

    url = server_url(url, ca_file, insecure)
    push = push_options(prometheus_rw, prometheus_rw_interval, prometheus_rw_histograms)
    junit = junit_path(junit)

    from duplexctl.client.target import server_behaviour as behaviour_setting
    from duplexctl.report.render import render
    from duplexctl.rundir import announce, prepare_run_dir
    from duplexctl.scenario.config import CliOptions, resolve
    from duplexctl.scenario.parse import load_inputs
    from duplexctl.scenario.runner import run_replay
    from duplexctl.scenario.suite import suite_inputs

    scrape = scrape_options(server_metrics, no_server_metrics, scrape_interval)
    server_settings = behaviour_setting(list(server_behaviour or []))
    _ignored_with_url(url, server_behaviour)
    options = CliOptions(
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
    )

    def progress(line: str) -> None:
        print(f"duplexctl: {line}", file=sys.stderr, flush=True)

    suite = suite_inputs(inputs)
    if suite is not None:
        _replay_suite(
            suite,
            options,
            url,
            api_key,
            out,
            overwrite,
            scrape,
            server_settings,
            json_output,
            progress,
            push,
            junit,
        )
        return
    scenario = load_inputs(inputs)
    config = resolve(options, scenario.settings)
    _say_notes(config.extra_notes)
    if out is not None:
        prepare_run_dir(out, flag="--out", overwrite=overwrite, command="replay")
    try:
        result = asyncio.run(
            run_replay(
                scenario,
                config,
                url,
                api_key=api_key,
                out_dir=out,
                progress=progress,
                handle_sigint=True,
                scrape=scrape,
                push=push,
                server_settings=server_settings,
            )
        )
    except DuplexctlError as exc:  # the server could not be reached (exit 3) …: CI sees why
        if junit is not None:
            from duplexctl.export import junit as junit_xml
            from duplexctl.export.junit_cases import error_suite

            junit_xml.write(
                junit, [error_suite("replay", f"duplexctl replay {scenario.name}", str(exc))]
            )
        raise
    finally:
        if out is not None:
            announce(out)
    if junit is not None:
        from duplexctl.export import junit as junit_xml
        from duplexctl.export.junit_cases import replay_suite

        junit_xml.write(junit, [replay_suite(result.report)])
    render(result.report, as_json=json_output)
    if result.report.get("server_metrics") and not json_output:
        from duplexctl.prometheus.summary import render_lines

        print("\n".join(render_lines(result.report["server_metrics"])))
    if result.write_failure is not None:
        raise result.write_failure  # one line: the path and the cause (exit 4)
    if result.interrupted:
        print("duplexctl: interrupted: partial results", file=sys.stderr)
    elif result.exit_code == 1:
        failed = len(result.failed_expectations)
        bits = [f"{failed} expectation(s) failed"] if failed else []
        if result.violations:
            bits.append(f"{result.violations} protocol violation(s)")
        if result.unanswered_turns:
            bits.append(f"{result.unanswered_turns} turn(s) without an answer")
        bits += result.problems[:3]
        print(f"duplexctl: check failed: {'; '.join(bits)}", file=sys.stderr)
        missing = (result.report.get("needs_behaviour") or {}).get("missing")
        if missing:
            print(f"duplexctl: note: {missing}", file=sys.stderr)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _ignored_with_url(url: str | None, server_behaviour: list[str] | None) -> None:
    """``--server-behaviour`` sets the embedded server's model: with ``--url`` it has none."""
    if url is not None and server_behaviour:
        print(
            "duplexctl: note: --server-behaviour sets the embedded server's model; with --url "
            "the server's own model answers (ignored)",
            file=sys.stderr,
        )


def _replay_suite(
    paths: list[Path],
    options: Any,
    url: str | None,
    api_key: str | None,
    out: Path | None,
    overwrite: bool,
    scrape: Any,
    server_settings: dict[str, Any],
    json_output: bool,
    progress: Any,
    push: Any,
    junit: Path | None,
) -> None:
    """``replay a.toml b.toml …`` / ``replay DIR``: the scenarios in turn, one table;
    ``--junit``: one test suite per scenario."""
    import asyncio

    from duplexctl.rundir import announce, prepare_run_dir
    from duplexctl.scenario.suite import run_suite, table_lines
    from duplexctl.terminal import json_text

    if out is not None:
        prepare_run_dir(out, flag="--out", overwrite=overwrite, command="replay")
    try:
        result = asyncio.run(
            run_suite(
                paths,
                options,
                url,
                api_key=api_key,
                out_dir=out,
                scrape=scrape,
                server_settings=server_settings,
                progress=progress,
                push=push,
            )
        )
    except DuplexctlError as exc:  # the server could not be reached (exit 3) …: CI sees why
        if junit is not None:
            from duplexctl.export import junit as junit_xml
            from duplexctl.export.junit_cases import error_suite

            junit_xml.write(junit, [error_suite("replay", "duplexctl replay (suite)", str(exc))])
        raise
    finally:
        if out is not None:
            announce(out)
    if junit is not None:
        from duplexctl.export import junit as junit_xml
        from duplexctl.export.junit_cases import replay_suite

        junit_xml.write(junit, [replay_suite(report) for report in result.reports])
    if json_output:
        print(json_text(result.document()))
    else:
        print("\n".join(table_lines(result)))
    if result.write_failure is not None:
        raise result.write_failure  # one line: the path and the cause (exit 4)
    if result.interrupted:
        print("duplexctl: interrupted: the scenarios not run are listed", file=sys.stderr)
    elif result.failed:
        names = ", ".join(r["scenario"] for r in result.failed)
        print(
            f"duplexctl: check failed: {len(result.failed)} scenario(s) failed: {names}",
            file=sys.stderr,
        )
    if result.exit_code:
        raise typer.Exit(result.exit_code)


@app.command()
@reports_errors
def talk(
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    ca_file: CaFileOption = None,
    insecure: InsecureOption = False,
    list_devices: Annotated[
        bool, typer.Option("--list-devices", help="List audio devices and exit.")
    ] = False,
    input_device: Annotated[
        str | None, typer.Option(help="Microphone: name (substring) or index; default input.")
    ] = None,
    output_device: Annotated[
        str | None,
        typer.Option(help="Speaker: name or index; 'none' = no sound, simulated playback clock."),
    ] = None,
    input_file: Annotated[
        list[str] | None,
        typer.Option(
            help="Feed FILE[@SECONDS] through the live path instead of the microphone, in real "
            "time, then silence (repeatable; @SECONDS places it on the user timeline)."
        ),
    ] = None,
    duration: Annotated[float | None, typer.Option(help="Stop after this many seconds.")] = None,
    record: Annotated[
        Path | None,
        typer.Option(help="Write conversation.wav, user.wav, response WAVs, events.jsonl here."),
    ] = None,
    turn_detection: Annotated[
        str | None,
        typer.Option(
            help="auto (default: server VAD when the server offers it, else push-to-talk), "
            "server_vad, or none (push-to-talk: Enter ends a turn)."
        ),
    ] = None,
    vad_silence_ms: VadSilenceOption = None,
    auto_response: Annotated[
        bool | None,
        typer.Option(
            "--auto-response/--no-auto-response",
            help="Model-native lane: the model decides.",
            show_default=False,
        ),
    ] = None,
    barge_in: Annotated[
        str,
        typer.Option(
            help="client: stop playback and send response.cancel; server: stop playback, let "
            "server VAD cancel; off: only the server's stop signals stop playback."
        ),
    ] = "client",
    barge_threshold_db: Annotated[
        float, typer.Option(help="Level (dBFS) the local barge-in detector counts as speech.")
    ] = -40.0,
    aec: Annotated[
        str,
        typer.Option(
            help="Acoustic echo cancellation (on|off): the speaker's sound is removed from the "
            "microphone, so talk works on laptop speakers (needs the aec extra)."
        ),
    ] = "on",
    noise_suppression: Annotated[
        bool,
        typer.Option(
            "--noise-suppression/--no-noise-suppression",
            help="WebRTC noise suppression on the microphone (with the aec extra).",
        ),
    ] = False,
    model: ModelOption = None,
    voice: VoiceOption = None,
    ref_audio: Annotated[
        str | None, typer.Option(help="Reference voice clip (sent as a data: URI).")
    ] = None,
    instructions: InstructionsOption = None,
    session: Annotated[
        Path | None,
        typer.Option(
            "--session",
            help="JSON session object: its typed keys rank below flags; the rest goes into "
            "session.update as is.",
        ),
    ] = None,
    chunk_ms: Annotated[
        int | None, typer.Option(help="Input append size in ms, a multiple of 20 (default 100).")
    ] = None,
    prebuffer_ms: Annotated[
        float | None, typer.Option(help="Jitter buffer before playback, ms (default 0).")
    ] = None,
    plain: Annotated[
        bool | None, typer.Option("--plain/--live", help="Force plain lines or the live view.")
    ] = None,
    overwrite: OverwriteOption = False,
) -> None:
    """Live conversation through a microphone and a speaker, with barge-in."""
    url = server_url(url, ca_file, insecure)
    if list_devices:
        from duplexctl.talk.session import list_device_lines

        for line in list_device_lines():
            print(line)
        return

    import asyncio

    from duplexctl.talk.config import InputFileSpec, TalkConfig
    from duplexctl.talk.session import run_talk
    from duplexctl.talk.view import make_view

    config = TalkConfig(
        url=url,
        api_key=api_key,
        input_device=input_device,
        output_device=output_device,
        input_files=[InputFileSpec.parse(f) for f in input_file or []],
        duration_s=duration,
        record_dir=record,
        turn_detection=turn_detection,  # type: ignore[arg-type]  # checked by the resolver
        vad_silence_ms=vad_silence_ms,
        auto_response=auto_response,
        barge_in=barge_in,  # type: ignore[arg-type]
        barge_threshold_db=barge_threshold_db,
        aec=aec,
        noise_suppression=noise_suppression,
        model=model,
        voice=voice,
        ref_audio=ref_audio,
        instructions=instructions,
        session_file=session,
        chunk_ms=chunk_ms,
        prebuffer_ms=prebuffer_ms,
    )
    _say_notes(config.settings.notes)
    from duplexctl.rundir import announce, prepare_run_dir

    if record is not None:
        prepare_run_dir(record, flag="--record", overwrite=overwrite, command="talk")
    try:
        result = asyncio.run(run_talk(config, make_view(plain)))
    finally:
        if record is not None:
            announce(record)
    if result.error is not None:
        raise result.error
    if result.interrupted:
        raise KeyboardInterrupt


@app.command()
@reports_errors
def probe(
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    ca_file: CaFileOption = None,
    insecure: InsecureOption = False,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Run only this probe (repeatable; see --list)."),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print one JSON document instead of lines.")
    ] = False,
    max_sessions: Annotated[
        int | None,
        typer.Option(
            help="The server's admission limit (else learned from a rejection); "
            "sets the embedded server's limit when no --url."
        ),
    ] = None,
    disconnect_grace_s: Annotated[
        float | None,
        typer.Option(
            help="The server's disconnect grace (enables resume-after-grace when <= 20); "
            "sets the embedded server's grace when no --url."
        ),
    ] = None,
    budget_s: Annotated[
        float, typer.Option(help="Time budget: probes that no longer fit are skipped.")
    ] = 120.0,
    model: ModelOption = None,
    ref_audio: Annotated[
        str | None,
        typer.Option(help="Voice clip sent as ref_audio (MiniCPM-o refuses to open without)."),
    ] = None,
    session_file: Annotated[
        str | None,
        typer.Option(
            "--session",
            help="JSON session object for every probe session: its typed keys rank below "
            "flags (probes always commit turns themselves); the rest is sent as is.",
        ),
    ] = None,
    list_probes: Annotated[
        bool, typer.Option("--list", help="List the probes and what each catches.")
    ] = False,
    out: Annotated[
        str | None,
        typer.Option(help="Write report.json and report.html here, updated after each probe."),
    ] = None,
    overwrite: OverwriteOption = False,
    server_metrics: ServerMetricsOption = None,
    no_server_metrics: NoServerMetricsOption = False,
    scrape_interval: ScrapeIntervalOption = None,
    junit: JunitOption = None,
) -> None:
    """Probe a server for lifecycle bugs; one verdict per probe, exit 1 if any fails."""
    import asyncio

    from duplexctl.terminal import json_text

    url = server_url(url, ca_file, insecure)
    junit = junit_path(junit)

    from duplexctl.errors import BadInput, CheckFailed, WriteFailed
    from duplexctl.probe import ProbeConfig, all_probes, probe_target, select
    from duplexctl.probe.render import result_lines, summary_line

    if list_probes:
        for p in all_probes():
            print(f"{p.name:<20} {p.catches}")
        return
    try:
        select(only)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    if max_sessions is not None and max_sessions < 1:
        raise BadInput("--max-sessions must be at least 1")
    if disconnect_grace_s is not None and disconnect_grace_s < 0:
        raise BadInput("--disconnect-grace-s must not be negative")
    config = ProbeConfig(
        url=url,
        api_key=api_key,
        only=only,
        max_sessions=max_sessions,
        disconnect_grace_s=disconnect_grace_s,
        budget_s=budget_s,
        model=model,
        ref_audio=ref_audio,
        session_file=session_file,
        scrape=scrape_options(server_metrics, no_server_metrics, scrape_interval),
    )
    _say_notes(config.settings.notes)

    def embedded(line: str) -> None:
        print(f"duplexctl: {line}", file=sys.stderr if json_out else sys.stdout)

    out_dir = None
    if out is not None:
        from duplexctl.report.html import probe_page
        from duplexctl.rundir import announce, prepare_run_dir

        out_dir = prepare_run_dir(out, flag="--out", overwrite=overwrite, command="probe")
    reached: list[dict[str, Any]] = []

    def save_junit(doc: dict[str, Any]) -> None:
        if junit is not None:
            from duplexctl.export import junit as junit_xml
            from duplexctl.export.junit_cases import probe_suite

            junit_xml.write(junit, [probe_suite(doc)])

    def live(result: Any) -> None:
        if not json_out:
            print("\n".join(result_lines(result)), flush=True)
        reached.append(result.to_dict())
        partial = {"url": config.url, "partial": True, "results": reached}
        if out_dir is not None:  # saved after every probe: a Ctrl-C keeps what was reached
            probe_page.save(out_dir, partial)
        save_junit(partial)  # likewise

    try:
        report = asyncio.run(probe_target(config, on_result=live, on_embedded=embedded))
        save_junit(report.to_dict())
        if out_dir is not None:
            probe_page.save(out_dir, report.to_dict())
    except DuplexctlError as exc:  # unreachable (exit 3), a file not written (4): say why
        if junit is not None and not isinstance(exc, WriteFailed):
            from duplexctl.export import junit as junit_xml
            from duplexctl.export.junit_cases import error_suite

            junit_xml.write(
                junit,
                [error_suite("probe", f"duplexctl probe {config.url or ''}".strip(), str(exc))],
            )
        raise
    finally:
        if out_dir is not None:
            announce(out_dir)
    if json_out:
        print(json_text(report.to_dict(), indent=2))
    else:
        if report.server_metrics:
            from duplexctl.prometheus.summary import render_lines

            print("\n".join(render_lines(report.server_metrics)))
        print(summary_line(report))
    if not report.ok:
        names = ", ".join(r.name for r in report.failed)
        raise CheckFailed(f"probe failed: {names}")


@app.command()
@reports_errors
def load(
    inputs: Annotated[
        list[str] | None,
        typer.Argument(help="WAVs (one turn each) or one scenario .toml; default: bundled turns."),
    ] = None,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    ca_file: CaFileOption = None,
    insecure: InsecureOption = False,
    sessions: Annotated[int | None, typer.Option(help="Closed loop: concurrent sessions.")] = None,
    rate: Annotated[float | None, typer.Option(help="Open loop: new sessions per second.")] = None,
    arrival: Annotated[str, typer.Option(help="poisson, constant or gamma.")] = "poisson",
    burstiness: Annotated[float, typer.Option(help="Gamma squared CV (1 = Poisson).")] = 1.0,
    seed: Annotated[int | None, typer.Option(help="Seed (arrivals and behaviour mix).")] = None,
    max_concurrency: Annotated[
        int | None, typer.Option(help="Open loop: cap on sessions in flight (client side).")
    ] = None,
    ramp: Annotated[
        str | None, typer.Option(help="Linear stages <time>:<target>,… e.g. 0:1,60s:50.")
    ] = None,
    duration: Annotated[
        str | None, typer.Option(help="Measured time after warm-up, e.g. 60s.")
    ] = None,
    count: Annotated[int | None, typer.Option(help="Stop after this many sessions.")] = None,
    warmup: Annotated[str, typer.Option(help="Warm-up, excluded from figures.")] = "0s",
    mix: Annotated[
        str | None,
        typer.Option(help="Per-turn behaviours: barge_in=0.2,cancel=0.1,drop_resume=0.05."),
    ] = None,
    slo: Annotated[
        list[str] | None, typer.Option(help='Threshold, e.g. "ttfa_p95<=800ms" (repeatable).')
    ] = None,
    find_capacity: Annotated[
        bool, typer.Option("--find-capacity", help="Step the load up, then bisect.")
    ] = False,
    step_duration: Annotated[str, typer.Option(help="Capacity search: time per step.")] = "20s",
    max_level: Annotated[int, typer.Option(help="Capacity search: highest level tried.")] = 256,
    measure_slot_release: Annotated[
        bool, typer.Option("--measure-slot-release", help="Time a full server takes to re-admit.")
    ] = False,
    no_slot_release: Annotated[
        bool,
        typer.Option("--no-slot-release", help="Capacity search: skip the slot-release wait."),
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(help="Processes (default: one per core); with --ray: Ray actors."),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="Run the workers on a Ray cluster: auto, HOST:PORT or ray://HOST:10001 "
            "(needs the ray extra).",
        ),
    ] = None,
    workers_per_node: Annotated[
        int | None,
        typer.Option(help="--ray: this many workers on every node (instead of --workers)."),
    ] = None,
    out: Annotated[str | None, typer.Option(help="Write report.json, JSONL and CSV here.")] = None,
    overwrite: OverwriteOption = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON report.")] = False,
    live: Annotated[
        bool | None, typer.Option("--live/--plain", help="Dashboard style (default: by TTY).")
    ] = None,
    slice_seconds: Annotated[float, typer.Option("--slice", help="Time slice length, s.")] = 10.0,
    chunk_ms: Annotated[int | None, typer.Option(help="Append size in ms (default 100).")] = None,
    send_phases: Annotated[
        int,
        typer.Option(
            help="Appends of all sessions go out on N evenly spaced instants per chunk "
            "(fewer: cheaper client, burstier arrival)."
        ),
    ] = 10,
    prebuffer_ms: Annotated[
        float | None, typer.Option(help="Simulated playback prebuffer, ms (default 0).")
    ] = None,
    response_timeout_s: Annotated[
        float | None,
        typer.Option(
            "--response-timeout-s",
            "--response-timeout",
            help="Seconds to wait for an answer (default 20).",
        ),
    ] = None,
    model: ModelOption = None,
    voice: VoiceOption = None,
    ref_audio: Annotated[str | None, typer.Option(help="Reference voice clip (WAV).")] = None,
    instructions: InstructionsOption = None,
    turn_detection: Annotated[
        str | None,
        typer.Option(help="none (default: the client commits each turn) or server_vad."),
    ] = None,
    vad_silence_ms: VadSilenceOption = None,
    auto_response: Annotated[
        bool | None, typer.Option("--auto-response/--no-auto-response", help="Model-native lane.")
    ] = None,
    commit: Annotated[
        bool | None,
        typer.Option(
            "--commit/--no-commit",
            help="Client commits after each turn's speech even with server VAD.",
            show_default=False,
        ),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(
            help="JSON session object: its typed keys rank between the scenario and flags; "
            "the rest goes into session.update as is."
        ),
    ] = None,
    server_max_sessions: Annotated[
        int, typer.Option(help="Embedded server: admission limit.")
    ] = 64,
    server_gpu_slots: Annotated[int, typer.Option(help="Embedded server: GPU slots.")] = 0,
    server_unit_compute_ms: Annotated[
        float, typer.Option(help="Embedded server: GPU ms per output unit.")
    ] = 0.0,
    server_option: Annotated[
        list[str] | None,
        typer.Option(help="Embedded server setting KEY=VALUE, e.g. reply_seconds=1 (repeatable)."),
    ] = None,
    no_uvloop: Annotated[bool, typer.Option("--no-uvloop", help="Use asyncio's own loop.")] = False,
    server_metrics: ServerMetricsOption = None,
    no_server_metrics: NoServerMetricsOption = False,
    scrape_interval: ScrapeIntervalOption = None,
    prometheus_rw: PrometheusRwOption = None,
    prometheus_rw_interval: PrometheusRwIntervalOption = None,
    prometheus_rw_histograms: PrometheusRwHistogramsOption = None,
    junit: JunitOption = None,
    server_behaviour: ServerBehaviourOption = None,
) -> None:
    """Many sessions at once: latency under load, admission limit, capacity, SLOs."""
    url = server_url(url, ca_file, insecure)
    push = push_options(prometheus_rw, prometheus_rw_interval, prometheus_rw_histograms)
    junit = junit_path(junit)

    from duplexctl.client.target import server_behaviour as behaviour_setting
    from duplexctl.errors import BadInput
    from duplexctl.load.arrivals import parse_duration
    from duplexctl.load.config import LoadConfig, Mix, workers_for
    from duplexctl.load.run import run_load

    _ignored_with_url(url, server_behaviour)
    overrides: dict[str, object] = {}
    for item in server_option or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise BadInput(f"--server-option {item!r} is not KEY=VALUE")
        value: object = raw
        for conv in (int, float):
            try:
                value = conv(raw)
                break
            except ValueError:
                continue
        overrides[key.strip().replace("-", "_")] = value

    def seconds(text: str | None, flag: str) -> float | None:
        if text is None:
            return None
        try:
            return parse_duration(text)
        except ValueError as exc:
            raise BadInput(f"{flag}: {exc}") from None

    config = LoadConfig(
        url=url,
        api_key=api_key,
        inputs=list(inputs or []),
        mix=Mix.parse(mix),
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
        send_phases=send_phases,
        prebuffer_ms=prebuffer_ms,
        response_timeout_s=response_timeout_s,
        sessions=sessions,
        rate=rate,
        arrival=arrival,
        burstiness=burstiness,
        seed=seed,
        max_concurrency=max_concurrency,
        ramp=ramp,
        duration_s=seconds(duration, "--duration"),
        count=count,
        warmup_s=seconds(warmup, "--warmup") or 0.0,
        slice_s=slice_seconds,
        find_capacity=find_capacity,
        step_duration_s=seconds(step_duration, "--step-duration") or 20.0,
        max_level=max_level,
        measure_slot_release=measure_slot_release,
        no_slot_release=no_slot_release,
        slos=list(slo or []),
        ray=ray,
        **workers_for(workers, ray=ray, workers_per_node=workers_per_node),
        out=out,
        overwrite=overwrite,
        json_output=json_output,
        live=live,
        uvloop=not no_uvloop,
        scrape=scrape_options(server_metrics, no_server_metrics, scrape_interval),
        push=push,
        junit=None if junit is None else str(junit),
        server_overrides={
            "max_sessions": server_max_sessions,
            "gpu_slots": server_gpu_slots,
            "unit_compute_ms": server_unit_compute_ms,
            **overrides,
            **behaviour_setting(list(server_behaviour or [])),
        },
    )
    _say_notes(config.settings.notes)
    result = run_load(config)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


@app.command()
@reports_errors
def report(
    results: Annotated[list[str], typer.Argument(help="report.json files or --out directories.")],
    out: Annotated[str | None, typer.Option(help="Write the merged report here.")] = None,
    plot: Annotated[str | None, typer.Option(help="Draw PNG plots into this directory.")] = None,
    overwrite: OverwriteOption = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON report.")] = False,
    slo: Annotated[list[str] | None, typer.Option(help="Re-judge with these thresholds.")] = None,
    html: Annotated[
        str | None, typer.Option(help="Write one self-contained HTML page here (opens offline).")
    ] = None,
    compare: Annotated[
        bool, typer.Option(help="Compare run B with run A (the baseline) instead of merging.")
    ] = False,
    fail_on_regression: Annotated[
        float | None,
        typer.Option(
            metavar="PCT", help="With --compare: exit 1 when a flagged figure worsens by more."
        ),
    ] = None,
) -> None:
    """Re-render saved load runs; several are merged exactly (from their histograms)."""
    from duplexctl.report.merge import rerender

    code = rerender(
        results,
        out=out,
        plot=plot,
        overwrite=overwrite,
        json_output=json_output,
        slos=list(slo or []),
        html=html,
        compare=compare,
        fail_on_regression=fail_on_regression,
    )
    if code:
        raise typer.Exit(code)


def main() -> None:
    """Console-script entry point."""
    app()
