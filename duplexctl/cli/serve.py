"""``duplexctl serve``: the reference server, until Ctrl-C."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from duplexctl.cli.app import command
from duplexctl.cli.help import Example
from duplexctl.cli.options import FAULTS, LIFECYCLE, LISTEN, MODEL, duration

#: Options renamed so that a name means one thing in every command (``--chunk-ms`` is the
#: client's append size, ``--voice`` the session's voice): the old name -> the new one.
OLD_NAMES = {"chunk_ms": "output_chunk_ms", "voice": "reply"}

EXAMPLES = (
    Example("serve", "The reference server on ws://127.0.0.1:8765/v1/realtime?duplex=1"),
    Example(
        "serve --model-profile turn --output-chunk-ms 200 --max-sessions 2",
        "Behave like the Qwen3-Omni peer: turn-based, 200 ms output units, 2 sessions",
    ),
    Example("serve --gpu-slots 4 --unit-compute-ms 150", "Latency that grows with load"),
    Example(
        "serve --fault stuck-gate --fault latency-ms=200",
        "Known server bugs, on request (probe catches them)",
    ),
    Example(
        "serve --host 0.0.0.0 --port 8000 --quiet",
        "Reachable from other machines, without the session log",
    ),
)


@command(panels=(LISTEN, MODEL, LIFECYCLE, FAULTS), examples=EXAMPLES)
def serve(
    host: Annotated[
        str | None,
        typer.Option(
            metavar="ADDRESS",
            rich_help_panel=LISTEN,
            help="Address to bind; anything but loopback is said in one line.",
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(rich_help_panel=LISTEN, help="TCP port (0: a free one, printed)."),
    ] = None,
    max_sessions: Annotated[
        int | None,
        typer.Option(rich_help_panel=LISTEN, help="Admission limit: sessions open at once."),
    ] = None,
    dialect: Annotated[
        Literal["g2", "g1"] | None,
        typer.Option(
            case_sensitive=False,
            rich_help_panel=LISTEN,
            help="Wire dialect: g2 (vLLM-Omni 0.30+) or g1 (the older spelling).",
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet",
            rich_help_panel=LISTEN,
            help="No line per session opened, resumed, closed or rejected.",
        ),
    ] = False,
    model_profile: Annotated[
        Literal["native", "turn", "frame"] | None,
        typer.Option(
            rich_help_panel=MODEL,
            help="native: MiniCPM-o-like (auto_response allowed); turn: Qwen3-Omni-like "
            "(commit or server VAD only); frame: Nemotron VoiceChat-like (80 ms frames, one "
            "output packet per frame, auto_response only, tool calls).",
        ),
    ] = None,
    tool_call: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            rich_help_panel=MODEL,
            help="frame profile: on a session's first turn the model calls this tool (when "
            "the session declares it) and answers after its function_call_output.",
        ),
    ] = None,
    tool_args: Annotated[
        str | None,
        typer.Option(
            metavar="JSON",
            rich_help_panel=MODEL,
            help="frame profile: the arguments of --tool-call (a JSON object).",
        ),
    ] = None,
    eou_ms: Annotated[
        float | None,
        typer.Option(
            metavar="MS",
            rich_help_panel=MODEL,
            help="frame profile: silence after the user's speech before the model speaks.",
        ),
    ] = None,
    barge_in_ms: Annotated[
        float | None,
        typer.Option(
            metavar="MS",
            rich_help_panel=MODEL,
            help="frame profile: speech over the answer before the model stops.",
        ),
    ] = None,
    reply: Annotated[
        Literal["tone", "echo"] | None,
        typer.Option(
            rich_help_panel=MODEL,
            help="What the simulated model answers with: a tone, or an echo of the turn.",
        ),
    ] = None,
    voice: Annotated[
        Literal["tone", "echo"] | None,
        typer.Option(hidden=True, help="The old name of --reply."),
    ] = None,
    reply_seconds: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=duration,
            rich_help_panel=MODEL,
            help="Length of a tone reply.",
        ),
    ] = None,
    ttfa_ms: Annotated[
        float | None,
        typer.Option(metavar="MS", rich_help_panel=MODEL, help="Time to first audio."),
    ] = None,
    ttfa_jitter_ms: Annotated[
        float | None,
        typer.Option(metavar="MS", rich_help_panel=MODEL, help="Uniform jitter added to it."),
    ] = None,
    output_chunk_ms: Annotated[
        int | None,
        typer.Option(
            metavar="MS",
            rich_help_panel=MODEL,
            help="The model's output unit: audio per step, in ms (80 for PersonaPlex-like).",
        ),
    ] = None,
    chunk_ms: Annotated[
        int | None,
        typer.Option(hidden=True, help="The old name of --output-chunk-ms."),
    ] = None,
    realtime_factor: Annotated[
        float | None,
        typer.Option(
            rich_help_panel=MODEL, help="Output pacing: 1 real time, 0 as fast as computed."
        ),
    ] = None,
    gpu_slots: Annotated[
        int | None,
        typer.Option(rich_help_panel=MODEL, help="Simulated GPU batch slots (0: unlimited)."),
    ] = None,
    unit_compute_ms: Annotated[
        float | None,
        typer.Option(
            metavar="MS", rich_help_panel=MODEL, help="GPU time one output unit holds a slot."
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(rich_help_panel=MODEL, help="Seed of the jitter.")
    ] = None,
    disconnect_grace_s: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=duration,
            rich_help_panel=LIFECYCLE,
            help="How long a dropped session can be resumed.",
        ),
    ] = None,
    idle_ttl_s: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=duration,
            rich_help_panel=LIFECYCLE,
            help="A session idle this long expires (0: never).",
        ),
    ] = None,
    config_timeout_s: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=duration,
            rich_help_panel=LIFECYCLE,
            help="Wait this long for a client's first event.",
        ),
    ] = None,
    resume_replay_ttl_s: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=duration,
            rich_help_panel=LIFECYCLE,
            help="How long the resume journal keeps an event.",
        ),
    ] = None,
    reaper_interval_s: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=duration,
            rich_help_panel=LIFECYCLE,
            help="How often expired sessions are reaped.",
        ),
    ] = None,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME[=N]",
            rich_help_panel=FAULTS,
            help="Turn on a known server bug: leak-undelivered-created, orphan-response, "
            "stuck-gate, drop-after=N, latency-ms=MS, fail-append-every=N, "
            "drop-output-frame-every=N (frame profile).",
        ),
    ] = None,
    behaviour: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SPEC",
            rich_help_panel=FAULTS,
            help="Conversational behaviour with a known truth (server VAD sessions): "
            "takeover-on-pause=P, backchannel-rate=R, stop-latency-ms=M, response-gap-ms=G.",
        ),
    ] = None,
) -> int:
    """Run the reference duplex server (a simulated model) until Ctrl-C.

    A protocol-faithful vLLM-Omni 0.30 duplex server on loopback: every other command talks to
    it when given no --url. One line per session opened, resumed, closed or rejected."""
    # every option but --quiet is a ServerConfig field of its name (the exceptions:
    # server.config.SERVE_OPTION_FIELDS), so a new option is one parameter above
    given = dict(locals())
    from duplexctl.errors import BadInput
    from duplexctl.server.app import print_sessions, run
    from duplexctl.server.config import from_options

    del given["quiet"]
    for old_name, name in OLD_NAMES.items():  # kept for existing scripts, not in the help
        value = given.pop(old_name)
        if value is not None:
            if given[name] is not None:
                raise BadInput(
                    f"--{old_name.replace('_', '-')} is the old name of "
                    f"--{name.replace('_', '-')}: give one"
                )
            given[name] = value
    run(from_options(given), session_log=None if quiet else print_sessions)
    return 0
