"""``duplexctl talk``: a live conversation through a microphone and a speaker."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, cast

import typer

from duplexctl.cli import options as o
from duplexctl.cli.app import command
from duplexctl.cli.help import Example


def _input_file(text: Any) -> Any:
    from duplexctl.talk.config import InputFileSpec

    if not isinstance(text, str):
        return text
    try:
        return InputFileSpec.parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


EXAMPLES = (
    Example("talk --url ws://gpu:8000", "Talk to a server through the default microphone"),
    Example("talk --list-devices", "The audio devices, and which are the defaults"),
    Example(
        "talk --input-file recordings/hello.wav --input-file recordings/interrupt.wav@5.7 "
        "--duration 12 --record conv1",
        "A file through the live path, an interruption at 5.7 s, recorded",
    ),
    Example(
        "talk --turn-detection none --aec off",
        "Push-to-talk (Enter ends a turn), headphones: no echo cancellation",
    ),
)


@command(panels=(o.TARGET, o.AUDIO, o.SESSION, o.OUTPUT), examples=EXAMPLES)
def talk(
    url: o.UrlOption = None,
    api_key: o.ApiKeyOption = None,
    ca_file: o.CaFileOption = None,
    insecure: o.InsecureOption = False,
    input_device: Annotated[
        str | None,
        typer.Option(
            metavar="NAME|INDEX",
            rich_help_panel=o.AUDIO,
            help="Microphone: a name (substring) or an index (--list-devices).",
            show_default="the default input",
        ),
    ] = None,
    output_device: Annotated[
        str | None,
        typer.Option(
            metavar="NAME|INDEX",
            rich_help_panel=o.AUDIO,
            help="Speaker: a name or an index; none: no sound, a simulated playback clock.",
            show_default="the default output",
        ),
    ] = None,
    input_file: Annotated[
        list[str] | None,
        typer.Option(
            metavar="FILE[@TIME]",
            parser=_input_file,
            rich_help_panel=o.AUDIO,
            help="Say FILE through the live path instead of the microphone, in real time, "
            "then silence; @TIME places it on the user's timeline (e.g. @5.7 or @5700ms).",
        ),
    ] = None,
    list_devices: Annotated[
        bool,
        typer.Option("--list-devices", rich_help_panel=o.AUDIO, help="List audio devices."),
    ] = False,
    barge_in: Annotated[
        Literal["client", "server", "off"],
        typer.Option(
            rich_help_panel=o.AUDIO,
            help="Speaking over the answer: client stops playback and cancels; server stops "
            "playback and lets server VAD cancel; off: only the server stops it.",
        ),
    ] = "client",
    barge_threshold_db: Annotated[
        float,
        typer.Option(
            metavar="DBFS",
            rich_help_panel=o.AUDIO,
            help="The level the local barge-in detector counts as speech.",
        ),
    ] = -40.0,
    aec: Annotated[
        Literal["on", "off"],
        typer.Option(
            rich_help_panel=o.AUDIO,
            help="Echo cancellation: the speaker's sound removed from the microphone, so "
            "talk works on laptop speakers (the aec extra).",
        ),
    ] = "on",
    noise_suppression: Annotated[
        bool,
        typer.Option(
            "--noise-suppression/--no-noise-suppression",
            rich_help_panel=o.AUDIO,
            help="WebRTC noise suppression on the microphone (the aec extra).",
        ),
    ] = False,
    turn_detection: Annotated[
        Literal["auto", "server_vad", "none"] | None,
        typer.Option(
            rich_help_panel=o.SESSION,
            help="Who ends a turn: auto (server VAD when the server offers it, else "
            "push-to-talk), server_vad, or none (push-to-talk: Enter ends a turn).",
        ),
    ] = None,
    vad_silence_ms: o.VadSilenceOption = None,
    auto_response: o.AutoResponseOption = None,
    model: o.ModelOption = None,
    voice: o.VoiceOption = None,
    ref_audio: o.RefAudioOption = None,
    instructions: o.InstructionsOption = None,
    session: o.SessionFileOption = None,
    chunk_ms: Annotated[
        int | None,
        typer.Option(
            metavar="MS",
            rich_help_panel=o.SESSION,
            help="Input audio per append, in ms: a multiple of 20 (the capture block).",
        ),
    ] = None,
    prebuffer_ms: o.PrebufferOption = None,
    duration: Annotated[
        float | None,
        typer.Option(
            metavar="DURATION",
            parser=o.duration,
            rich_help_panel=o.OUTPUT,
            help="Stop after this long (else q or Ctrl-C).",
        ),
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            rich_help_panel=o.OUTPUT,
            help="Write conversation.wav, user.wav, the answers' WAVs and events.jsonl here.",
        ),
    ] = None,
    overwrite: o.OverwriteOption = False,
    live: o.LiveOption = None,
) -> int:
    """A live conversation through a microphone and a speaker, with barge-in.

    The screen shows the session state, a level meter, the transcript and each turn's
    figures; c cancels the answer, q quits."""
    url = o.target(url, ca_file, insecure)
    if list_devices:
        from duplexctl.talk.session import list_device_lines

        print("\n".join(list_device_lines()))
        return 0
    from duplexctl.cli.app import say_notes
    from duplexctl.talk.command import run
    from duplexctl.talk.config import InputFileSpec, TalkConfig

    config = TalkConfig(
        url=url,
        api_key=api_key,
        input_device=input_device,
        output_device=output_device,
        input_files=cast("list[InputFileSpec]", list(input_file or [])),  # parsed above
        duration_s=duration,
        record_dir=record,
        turn_detection=turn_detection,
        vad_silence_ms=vad_silence_ms,
        auto_response=auto_response,
        barge_in=barge_in,
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
    say_notes(config.settings.notes)
    return run(config, live=live, overwrite=overwrite)
