"""The options several commands share, the help panels, and the parsers of each kind of value.

An option that several commands take is declared here once, so its name, its meaning, its
parser, its environment variable and its help read the same in every command (issue 35: "one
meaning per option name"). A command module adds its own options next to its function; either
way an option joins a panel with its ``rich_help_panel=`` keyword (one line).

Parsers: each kind of value has one (duplexctl.values): durations (``8``, ``8s``, ``500ms``,
``2m``), rates (``2``, ``2/s``, ``120/m``), ramps, input files (a directory is named as one).
A value a parser refuses is one line naming the option, the value and the valid forms, exit 2
(duplexctl.cli.app).

Session and turn settings default to None ("not given"): duplexctl.resolver decides, with one
precedence for every command (defaults < scenario < --session < flags), and the help shows the
command's own default from the resolver's table (:func:`resolved_defaults`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import typer

from duplexctl import values
from duplexctl.cli.help import provide_defaults

# --- panels, in the order most commands show them ----------------------------------------------

TARGET: Final = "Target and TLS"
SHAPE: Final = "Load shape"
CAPACITY: Final = "Capacity and SLOs"
SESSION: Final = "Session"
OUTPUT: Final = "Output"
SERVER: Final = "Embedded server (no --url)"
ADVANCED: Final = "Advanced"
# talk's and serve's own
AUDIO: Final = "Microphone and speaker"
LISTEN: Final = "Listening"
MODEL: Final = "Simulated model"
LIFECYCLE: Final = "Session lifecycle"
FAULTS: Final = "Faults and behaviour"
PROBES: Final = "Probes"
INPUTS: Final = "Inputs"


# --- parsers -----------------------------------------------------------------------------------


def _parser(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A Typer ``parser=``: ``parse``'s ValueError becomes a usage error with its message
    (None and values already parsed, such as a default, pass through ``parse`` unharmed)."""

    def convert(value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse(value)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    convert.__name__ = getattr(parse, "__name__", "parse")
    return convert


duration = _parser(values.parse_duration)
rate = _parser(values.parse_rate)


def _ramp(text: str) -> str:
    from duplexctl.load.arrivals import Ramp

    Ramp.parse(str(text))  # ValueError naming the point
    return str(text)


ramp = _parser(_ramp)


def input_file(takes: str) -> Callable[[Any], Any]:
    """An existing, readable file (a directory is refused as one; ``takes`` says what to give)."""
    return _parser(lambda text: values.input_file(text, takes=takes))


input_path = _parser(values.input_path)


def continuity_thresholds(text: str | None) -> tuple[int, ...]:
    """``--continuity-thresholds 50,100,200`` (None: the defaults); BadInput naming it."""
    from duplexctl.errors import BadInput
    from duplexctl.report.continuity import parse_thresholds

    try:
        return tuple(parse_thresholds(text))
    except ValueError as exc:
        raise BadInput(f"--continuity-thresholds {text!r}: {exc}") from None


def _voice_clip(text: str) -> str:
    """A voice clip: a file, or a data: URI given as is."""
    if str(text).startswith("data:"):
        return str(text)
    return str(values.input_file(text, takes="an audio file (WAV, FLAC, ...)"))


voice_clip = _parser(_voice_clip)
session_file = input_file("a JSON file holding the session object")

# --- target and TLS (every client command) ---------------------------------------------------

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="DUPLEXCTL_URL",
        metavar="URL",
        rich_help_panel=TARGET,
        help="The server, e.g. ws://host:8000/v1/realtime?duplex=1; http:// and https:// are "
        "taken as ws:// and wss://, a URL without a path gets /v1/realtime?duplex=1. "
        "None: the reference server, started in-process on a free loopback port.",
        show_default=False,
    ),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="DUPLEXCTL_API_KEY",
        metavar="KEY",
        rich_help_panel=TARGET,
        help="Sent as a bearer header on the upgrade; never printed or written.",
        show_default=False,
    ),
]
CaFileOption = Annotated[
    Path | None,
    typer.Option(
        "--ca-file",
        envvar="DUPLEXCTL_CA_FILE",
        metavar="PEM",
        rich_help_panel=TARGET,
        parser=input_file("a PEM file of CA certificates"),
        help="wss://: trust server certificates signed by this CA (a private or self-signed "
        "one) instead of the system trust store.",
        show_default=False,
    ),
]
InsecureOption = Annotated[
    bool,
    typer.Option(
        "--insecure",
        envvar="DUPLEXCTL_INSECURE",
        rich_help_panel=TARGET,
        help="wss:// without verifying the server's certificate: anyone on the path can "
        "impersonate the server (a warning is printed on every run).",
    ),
]

# --- session and turn settings (resolver flags) ----------------------------------------------

ModelOption = Annotated[
    str | None,
    typer.Option("--model", metavar="NAME", rich_help_panel=SESSION, help="Session model name."),
]
VoiceOption = Annotated[
    str | None,
    typer.Option(
        "--voice",
        metavar="NAME",
        rich_help_panel=SESSION,
        help="The voice the session asks the model to answer in.",
    ),
]
RefAudioOption = Annotated[
    str | None,
    typer.Option(
        "--ref-audio",
        metavar="FILE",
        parser=voice_clip,
        rich_help_panel=SESSION,
        help="Reference voice clip, sent as a data: URI (MiniCPM-o refuses to open without).",
    ),
]
InstructionsOption = Annotated[
    str | None,
    typer.Option(
        "--instructions",
        metavar="TEXT",
        rich_help_panel=SESSION,
        help="Session instructions (system prompt).",
    ),
]
#: replay's and load's (talk's has an ``auto`` of its own: push-to-talk without server VAD)
TurnDetectionOption = Annotated[
    Literal["none", "server_vad"] | None,
    typer.Option(
        "--turn-detection",
        rich_help_panel=SESSION,
        help="Who ends a turn: none (the client commits each) or the server's VAD.",
    ),
]
VadSilenceOption = Annotated[
    int | None,
    typer.Option(
        "--vad-silence-ms",
        metavar="MS",
        rich_help_panel=SESSION,
        help="With server VAD: the silence that ends a turn (silence_duration_ms).",
    ),
]
AutoResponseOption = Annotated[
    bool | None,
    typer.Option(
        "--auto-response/--no-auto-response",
        rich_help_panel=SESSION,
        help="Model-native lane: the model decides when to answer.",
    ),
]
CommitOption = Annotated[
    bool | None,
    typer.Option(
        "--commit/--no-commit",
        rich_help_panel=SESSION,
        help="The client commits each turn 200 ms after its speech, even with server VAD.",
    ),
]
SessionFileOption = Annotated[
    Path | None,
    typer.Option(
        "--session",
        metavar="FILE.json",
        parser=session_file,
        rich_help_panel=SESSION,
        help="JSON session object: its keys that are settings rank between the scenario and "
        "the flags; the rest goes into the opening session.update as is.",
    ),
]
tools_file = input_file("a JSON file of function tools")
ToolsOption = Annotated[
    Path | None,
    typer.Option(
        "--tools",
        metavar="FILE.json",
        parser=tools_file,
        rich_help_panel=SESSION,
        help="The function tools the model may call, sent in the opening session.update "
        "(docs/protocol.md §13.4).",
        show_default=False,
    ),
]
tool_outputs_file = input_file("a JSON file of tool name -> output")
ToolOutputsOption = Annotated[
    Path | None,
    typer.Option(
        "--tool-outputs",
        metavar="FILE.json",
        parser=tool_outputs_file,
        rich_help_panel=SESSION,
        help='What each tool call is answered with: {"name": output} or {"name": {"output": '
        '..., "latency_ms": N}} (the simulated time the tool takes).',
        show_default=False,
    ),
]
ChunkMsOption = Annotated[
    int | None,
    typer.Option(
        "--chunk-ms",
        metavar="MS",
        rich_help_panel=SESSION,
        help="Input audio per append, in ms.",
    ),
]
PrebufferOption = Annotated[
    float | None,
    typer.Option(
        "--prebuffer-ms",
        metavar="MS",
        rich_help_panel=SESSION,
        help="Audio buffered before playback starts (simulated playback clock).",
    ),
]
ResponseTimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--response-timeout-s",
        "--response-timeout",
        metavar="DURATION",
        parser=duration,
        rich_help_panel=SESSION,
        help="Wait this long after a commit for an answer; a turn without one is an error.",
    ),
]

# --- output ---------------------------------------------------------------------------------

JsonOption = Annotated[
    bool,
    typer.Option(
        "--json",
        rich_help_panel=OUTPUT,
        help="Print one JSON document on stdout (also when the run could not start).",
    ),
]
OverwriteOption = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        rich_help_panel=OUTPUT,
        help="Replace the run in a non-empty output directory (only one duplexctl wrote).",
    ),
]
JunitOption = Annotated[
    Path | None,
    typer.Option(
        "--junit",
        metavar="FILE",
        rich_help_panel=OUTPUT,
        help="Write the verdicts as JUnit XML (for CI).",
    ),
]
LiveOption = Annotated[
    bool | None,
    typer.Option(
        "--live/--plain",
        rich_help_panel=OUTPUT,
        help="A live view, or plain lines.",
        show_default="by terminal: --live on a TTY",
    ),
]

# --- the server's /metrics and remote write (load, replay, probe) --------------------------

ServerMetricsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--server-metrics",
        metavar="URL",
        rich_help_panel=ADVANCED,
        help="Also scrape this Prometheus /metrics URL (DCGM, node exporter). The server's "
        "own /metrics is scraped by default.",
    ),
]
NoServerMetricsOption = Annotated[
    bool,
    typer.Option(
        "--no-server-metrics",
        rich_help_panel=ADVANCED,
        help="Scrape no server /metrics.",
    ),
]
ScrapeIntervalOption = Annotated[
    float | None,
    typer.Option(
        "--scrape-interval",
        metavar="DURATION",
        parser=duration,
        rich_help_panel=ADVANCED,
        help="Time between scrapes of /metrics.",
        show_default="1s",
    ),
]
PrometheusRwOption = Annotated[
    str | None,
    typer.Option(
        "--prometheus-rw",
        metavar="URL",
        rich_help_panel=OUTPUT,
        help="Push the run's figures by Prometheus remote write to this receiver while it "
        "runs, e.g. http://prometheus:9090/api/v1/write (user:password@ for basic auth).",
    ),
]
PrometheusRwIntervalOption = Annotated[
    float | None,
    typer.Option(
        "--prometheus-rw-interval",
        metavar="DURATION",
        parser=duration,
        rich_help_panel=ADVANCED,
        help="Time between remote-write pushes.",
        show_default="5s",
    ),
]
PrometheusRwHistogramsOption = Annotated[
    Literal["native", "percentiles"] | None,
    typer.Option(
        "--prometheus-rw-histograms",
        case_sensitive=False,
        rich_help_panel=ADVANCED,
        help="Latencies as native histograms (percentiles where the receiver refuses them) "
        "or as percentiles.",
        show_default="native",
    ),
]

# --- the embedded server (no --url) ---------------------------------------------------------

ServerBehaviourOption = Annotated[
    list[str] | None,
    typer.Option(
        "--server-behaviour",
        metavar="SPEC",
        rich_help_panel=SERVER,
        help="The reference model's behaviour, as serve --behaviour takes it, e.g. "
        "backchannel-rate=6,stop-latency-ms=300.",
    ),
]


# --- defaults decided elsewhere ---------------------------------------------------------------


def resolved_defaults(command: str) -> dict[str, str]:
    """The defaults a command's help shows that its options do not hold: the resolver's
    column for the session settings, ServerConfig's fields for ``serve``, the probe
    runner's time budget."""
    if command == "serve":
        from duplexctl.server.config import serve_defaults

        return serve_defaults()
    if command == "probe":
        from duplexctl.probe.runner import DEFAULT_BUDGET_S

        budget = {"--budget-s": values.format_duration(DEFAULT_BUDGET_S)}
    else:
        budget = {}
    from duplexctl.resolver import SPECS, Command, Fixed, defaults

    try:
        column = defaults(Command(command))
    except ValueError:  # report: no session settings
        return budget
    shown: dict[str, str] = dict(budget)
    for name, value in column.items():
        flag = SPECS[name].flag
        if flag is None or isinstance(value, Fixed) or value is None:
            continue
        if isinstance(value, bool):
            shown[flag] = flag if value else flag.replace("--", "--no-", 1)
        elif name == "response_timeout_s":
            shown[flag] = values.format_duration(float(value))
        else:
            shown[flag] = f"{value:g}" if isinstance(value, float) else str(value)
    return shown


provide_defaults(resolved_defaults)


# --- the shared options, checked and turned into config parts ------------------------------------


def target(url: str | None, ca_file: Path | None, insecure: bool) -> str | None:
    """``--url`` / ``--ca-file`` / ``--insecure`` before anything starts
    (duplexctl.client.target): the URL to connect to (None: the embedded server); one line
    when it was normalised, the --insecure warning; BadInput when malformed."""
    import sys

    from duplexctl.client.target import TlsPolicy, prepare

    resolved, lines = prepare(url, TlsPolicy(ca_file=ca_file, insecure=insecure))
    for line in lines:
        print(f"duplexctl: {line}", file=sys.stderr)
    return resolved


def scrape(
    server_metrics: list[str] | None, no_server_metrics: bool, scrape_interval: float | None
) -> Any:
    """The server-metrics options of load, replay and probe, checked (BadInput)."""
    from duplexctl.prometheus.endpoints import resolve

    return resolve(server_metrics, enabled=not no_server_metrics, interval_s=scrape_interval)


def push(url: str | None, interval: float | None, histograms: str | None) -> Any:
    """The remote-write options of load and replay, checked (BadInput)."""
    from duplexctl.export.options import PushOptions

    return PushOptions.resolve(url, interval, histograms)


def junit_path(path: Path | None) -> Path | None:
    """``--junit FILE``, checked before the run (BadInput)."""
    if path is None:
        return None
    from duplexctl.export.junit import check_path

    return check_path(path)


def embedded_behaviour(url: str | None, specs: list[str] | None) -> dict[str, Any]:
    """``--server-behaviour``: the embedded server's ``behaviour`` setting; with ``--url`` the
    server's own model answers, which one line says."""
    import sys

    from duplexctl.client.target import server_behaviour

    if url is not None and specs:
        print(
            "duplexctl: note: --server-behaviour sets the embedded server's model; with --url "
            "the server's own model answers (ignored)",
            file=sys.stderr,
        )
    return server_behaviour(list(specs or []))
