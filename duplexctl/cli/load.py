"""``duplexctl load``: many sessions at once; capacity, latency under load, SLOs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from duplexctl.cli import options as o
from duplexctl.cli.app import command
from duplexctl.cli.help import Example

EXAMPLES = (
    Example(
        'load --find-capacity --slo "ttfa_p95<=800ms" --url ws://gpu:8000',
        "How many conversations does it hold with time to first audio p95 under 800 ms?",
    ),
    Example(
        "load --sessions 50 --duration 60s --url ws://gpu:8000 --out run1",
        "50 conversations at once for a minute, saved for report and compare",
    ),
    Example(
        "load --rate 2 --arrival gamma --burstiness 4 --max-concurrency 40 --duration 5m",
        "Open loop: 2 new sessions a second, in bursts",
    ),
    Example(
        "load --sessions 12 --duration 60s --mix barge_in=0.2,cancel=0.1,drop_resume=0.05",
        "Interruptions, cancels and dropped connections in the mix",
    ),
    Example(
        'load --sessions 20 --duration 60s --slo "failure_rate<=0" --junit load.xml',
        "A verdict for CI",
    ),
)


def _input(text: object) -> object:
    """A load input: a WAV or a scenario file (a directory is named as one)."""
    return o.input_file("WAV files or one scenario .toml (replay runs a directory)")(text)


@command(
    panels=(o.SHAPE, o.TARGET, o.CAPACITY, o.OUTPUT, o.SESSION, o.SERVER, o.ADVANCED),
    examples=EXAMPLES,
)
def load(
    inputs: Annotated[
        list[Path] | None,
        typer.Argument(
            parser=_input,
            help="WAVs (one turn each) or one scenario .toml; none: the bundled turns.",
            show_default=False,
        ),
    ] = None,
    sessions: Annotated[
        int | None,
        typer.Option(rich_help_panel=o.SHAPE, help="Closed loop: this many sessions at once."),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            metavar="RATE",
            parser=o.rate,
            rich_help_panel=o.SHAPE,
            help="Open loop: new sessions per second (2, 2/s, 120/m).",
        ),
    ] = None,
    duration: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=o.duration,
            rich_help_panel=o.SHAPE,
            help="Measured time after the warm-up (60s, 5m).",
        ),
    ] = None,
    count: Annotated[
        int | None,
        typer.Option(rich_help_panel=o.SHAPE, help="Stop after this many sessions."),
    ] = None,
    ramp: Annotated[
        str | None,
        typer.Option(
            metavar="TIME:LEVEL,...",
            parser=o.ramp,
            rich_help_panel=o.SHAPE,
            help="Move the level linearly through these points, e.g. 0:1,60s:50: sessions "
            "with --sessions, new sessions per second with --rate.",
        ),
    ] = None,
    warmup: Annotated[
        float,
        typer.Option(
            metavar="DURATION",
            parser=o.duration,
            rich_help_panel=o.SHAPE,
            help="Run this long first, left out of the figures.",
        ),
    ] = "0s",  # type: ignore[assignment]  # parsed by o.duration
    arrival: Annotated[
        Literal["poisson", "constant", "gamma"],
        typer.Option(rich_help_panel=o.SHAPE, help="Open loop: the arrival process."),
    ] = "poisson",
    burstiness: Annotated[
        float,
        typer.Option(
            rich_help_panel=o.SHAPE,
            help="--arrival gamma: squared coefficient of variation (1: Poisson, more: burstier).",
        ),
    ] = 1.0,
    max_concurrency: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=o.SHAPE,
            help="Open loop: at most this many sessions in flight (the client's limit).",
        ),
    ] = None,
    mix: Annotated[
        str | None,
        typer.Option(
            metavar="KIND=P,...",
            rich_help_panel=o.SHAPE,
            help="Per-turn behaviours and their probabilities: barge_in, cancel, drop_resume, "
            "tool_call (e.g. barge_in=0.2,cancel=0.1; tool_call needs --tools and "
            "--tool-outputs).",
        ),
    ] = None,
    stagger: Annotated[
        bool,
        typer.Option(
            "--stagger",
            rich_help_panel=o.SHAPE,
            help="Closed loop: user i of N begins its first session i/N of the way into its "
            "conversation, so the run starts in steady state, not as a cold-start burst.",
        ),
    ] = False,
    seed: Annotated[
        int | None,
        typer.Option(rich_help_panel=o.SHAPE, help="Seed of the arrivals and the mix."),
    ] = None,
    url: o.UrlOption = None,
    api_key: o.ApiKeyOption = None,
    ca_file: o.CaFileOption = None,
    insecure: o.InsecureOption = False,
    slo: Annotated[
        list[str] | None,
        typer.Option(
            metavar="EXPR",
            rich_help_panel=o.CAPACITY,
            help='A threshold checked at the end, e.g. "ttfa_p95<=800ms" (exit 1 if missed).',
        ),
    ] = None,
    find_capacity: Annotated[
        bool,
        typer.Option(
            "--find-capacity",
            rich_help_panel=o.CAPACITY,
            help="Step the load up until a step fails its SLOs, then bisect: the most "
            "sessions the server holds.",
        ),
    ] = False,
    step_duration: Annotated[
        float,
        typer.Option(
            metavar="DURATION",
            parser=o.duration,
            rich_help_panel=o.CAPACITY,
            help="Capacity search and --sweep: the time of one step (level).",
        ),
    ] = "20s",  # type: ignore[assignment]  # parsed by o.duration
    sweep: Annotated[
        str | None,
        typer.Option(
            metavar="N,N,...",
            rich_help_panel=o.CAPACITY,
            help="Fixed levels of concurrent sessions, e.g. 1,2,4,8,16: each a step of "
            "--step-duration with a joining session, every SLO judged per level.",
        ),
    ] = None,
    join_samples: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=o.CAPACITY,
            help="Sessions that join the N running ones in steady state, one after the other.",
            show_default="10 with --sweep, else 0",
        ),
    ] = None,
    continuity_thresholds: Annotated[
        str | None,
        typer.Option(
            metavar="MS,MS,...",
            rich_help_panel=o.CAPACITY,
            help="Audio continuity-OK thresholds (worst underrun of a response at most this).",
            show_default="50,100,200",
        ),
    ] = None,
    max_level: Annotated[
        int,
        typer.Option(rich_help_panel=o.CAPACITY, help="Capacity search: the highest level."),
    ] = 256,
    measure_slot_release: Annotated[
        bool,
        typer.Option(
            "--measure-slot-release",
            rich_help_panel=o.CAPACITY,
            help="Time a full server takes to admit again after a close and after a drop.",
        ),
    ] = False,
    no_slot_release: Annotated[
        bool,
        typer.Option(
            "--no-slot-release",
            rich_help_panel=o.CAPACITY,
            help="Capacity search without its slot-release measurement.",
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            rich_help_panel=o.OUTPUT,
            help="Write report.json, the JSONL and CSV records and report.html here.",
        ),
    ] = None,
    overwrite: o.OverwriteOption = False,
    json_output: o.JsonOption = False,
    live: o.LiveOption = None,
    junit: o.JunitOption = None,
    prometheus_rw: o.PrometheusRwOption = None,
    slice_seconds: Annotated[
        float,
        typer.Option(
            "--slice",
            metavar="DURATION",
            parser=o.duration,
            rich_help_panel=o.OUTPUT,
            help="Length of a time slice of the report.",
        ),
    ] = "10s",  # type: ignore[assignment]  # parsed by o.duration
    turn_detection: o.TurnDetectionOption = None,
    vad_silence_ms: o.VadSilenceOption = None,
    commit: o.CommitOption = None,
    auto_response: o.AutoResponseOption = None,
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
    server_max_sessions: Annotated[
        int,
        typer.Option(rich_help_panel=o.SERVER, help="Its admission limit."),
    ] = 64,
    server_gpu_slots: Annotated[
        int,
        typer.Option(rich_help_panel=o.SERVER, help="Its simulated GPU slots (0: unlimited)."),
    ] = 0,
    server_unit_compute_ms: Annotated[
        float,
        typer.Option(
            metavar="MS", rich_help_panel=o.SERVER, help="GPU time one output unit holds a slot."
        ),
    ] = 0.0,
    server_option: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=VALUE",
            rich_help_panel=o.SERVER,
            help="Any setting of it, e.g. reply_seconds=1 (a wrong key lists them all).",
        ),
    ] = None,
    server_behaviour: o.ServerBehaviourOption = None,
    workers: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=o.ADVANCED,
            help="Processes that run the sessions; with --ray, Ray actors.",
            show_default="one per core",
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            rich_help_panel=o.ADVANCED,
            help="Run the workers on a Ray cluster: auto, HOST:PORT or ray://HOST:10001 (the "
            "ray extra; docs/cluster.md).",
        ),
    ] = None,
    workers_per_node: Annotated[
        int | None,
        typer.Option(
            rich_help_panel=o.ADVANCED,
            help="With --ray: this many workers on every node, instead of --workers.",
        ),
    ] = None,
    send_phases: Annotated[
        int,
        typer.Option(
            rich_help_panel=o.ADVANCED,
            help="Appends go out on this many evenly spaced instants per chunk (fewer: a "
            "cheaper client, a burstier arrival at the server).",
        ),
    ] = 10,
    no_uvloop: Annotated[
        bool,
        typer.Option("--no-uvloop", rich_help_panel=o.ADVANCED, help="asyncio's own loop."),
    ] = False,
    server_metrics: o.ServerMetricsOption = None,
    no_server_metrics: o.NoServerMetricsOption = False,
    scrape_interval: o.ScrapeIntervalOption = None,
    prometheus_rw_interval: o.PrometheusRwIntervalOption = None,
    prometheus_rw_histograms: o.PrometheusRwHistogramsOption = None,
) -> int:
    """Many sessions at once: capacity, latency under load, admission, SLOs.

    Closed loop (--sessions) or open loop (--rate), for a --duration, a --count or a --ramp;
    --find-capacity answers how many conversations the server holds. Exit 1 when an SLO
    failed, 3 when no session was ever admitted."""
    from duplexctl.cli.app import say_notes
    from duplexctl.client.target import process_tls
    from duplexctl.load import config as c
    from duplexctl.load.run import run_load

    url = o.target(url, ca_file, insecure)
    config = c.LoadConfig(
        target=c.Target(url=url, api_key=api_key, tls=process_tls()),
        conversation=c.Conversation(
            inputs=tuple(str(p) for p in inputs or []),
            flags={
                "model": model,
                "voice": voice,
                "ref_audio": ref_audio,
                "instructions": instructions,
                "turn_detection": turn_detection,
                "vad_silence_ms": vad_silence_ms,
                "auto_response": auto_response,
                "commit": commit,
                "chunk_ms": chunk_ms,
                "prebuffer_ms": prebuffer_ms,
                "response_timeout_s": response_timeout_s,
                "tools": None if tools is None else str(tools),
                "tool_outputs": None if tool_outputs is None else str(tool_outputs),
            },
            session_file=None if session is None else str(session),
        ),
        shape=c.Shape(
            sessions=sessions,
            rate=rate,
            arrival=arrival,
            burstiness=burstiness,
            seed=seed,
            max_concurrency=max_concurrency,
            ramp=ramp,
            duration_s=duration,
            count=count,
            warmup_s=warmup,
            mix=c.Mix.parse(mix),
            stagger=stagger,
        ),
        capacity=c.Capacity(
            slos=tuple(slo or ()),
            find_capacity=find_capacity,
            step_duration_s=step_duration,
            max_level=max_level,
            measure_slot_release=measure_slot_release,
            no_slot_release=no_slot_release,
            sweep=None if sweep is None else c.parse_sweep(sweep),
            join_samples=join_samples,
            continuity_thresholds_ms=o.continuity_thresholds(continuity_thresholds),
        ),
        output=c.Output(
            out=out,
            overwrite=overwrite,
            json_output=json_output,
            live=live,
            slice_s=slice_seconds,
            junit=o.junit_path(junit),
            scrape=o.scrape(server_metrics, no_server_metrics, scrape_interval),
            push=o.push(prometheus_rw, prometheus_rw_interval, prometheus_rw_histograms),
        ),
        server=c.embedded_server(
            max_sessions=server_max_sessions,
            gpu_slots=server_gpu_slots,
            unit_compute_ms=server_unit_compute_ms,
            options=server_option,
            behaviour=o.embedded_behaviour(url, server_behaviour),
        ),
        execution=c.Execution(
            **c.workers_for(workers, ray=ray, workers_per_node=workers_per_node),
            ray=ray,
            send_phases=send_phases,
            uvloop=not no_uvloop,
        ),
    )
    say_notes(config.settings.notes)
    return run_load(config).exit_code
