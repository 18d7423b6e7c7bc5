"""``duplexctl talk`` without a sound card: errors, exit codes, Ctrl-C, resume, push-to-talk.

These need neither PulseAudio nor (mostly) PortAudio: ``--output-device none`` plays into
the simulated playback clock and ``--input-file`` replaces the microphone, so the live loop,
the protocol and the recording are exercised for real against the reference server on
loopback. CLI behaviour (exit codes, one-line errors, SIGINT) is tested in a subprocess,
exactly as a user runs it.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from support.cli import invoke
from support.commands import run_cli_async

from duplexctl.client.connection import DuplexConnection
from duplexctl.protocol.settings import SessionSettings
from duplexctl.server.app import start_server
from duplexctl.server.config import ServerConfig, parse_fault
from duplexctl.talk.config import InputFileSpec, TalkConfig
from duplexctl.talk.keys import KeyReader
from duplexctl.talk.session import run_talk
from duplexctl.talk.view import PlainView

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "recordings" / "hello.wav"
pytestmark = pytest.mark.realtime

FAST = {"voice": "tone", "reply_seconds": 1.0, "ttfa_ms": 100, "chunk_ms": 200}

# Run the CLI with PortAudio hidden from ctypes (as on a machine without libportaudio2).
NO_PORTAUDIO = """
import ctypes.util, sys
_real = ctypes.util.find_library
ctypes.util.find_library = lambda name: None if "portaudio" in name else _real(name)
from duplexctl.cli import main
sys.argv = ["duplexctl", *sys.argv[1:]]
main()
"""


def run_cli(*args: str, hide_portaudio: bool = False, timeout: float = 60) -> Any:
    import subprocess

    cmd = [sys.executable]
    cmd += ["-c", textwrap.dedent(NO_PORTAUDIO)] if hide_portaudio else ["-m", "duplexctl"]
    return subprocess.run(
        [*cmd, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# --- no PortAudio ---------------------------------------------------------------------------


def test_list_devices_without_portaudio_is_one_line_exit_2() -> None:
    proc = run_cli("talk", "--list-devices", hide_portaudio=True)
    line = one_line_error(proc.stderr)
    print(line)
    assert proc.returncode == 2
    assert line == (
        "duplexctl: error: PortAudio is not installed: apt-get install libportaudio2 "
        "(or run install.sh)"
    )
    assert proc.stdout == ""


def test_talk_without_portaudio_is_one_line_exit_2() -> None:
    proc = run_cli("talk", "--duration", "1", hide_portaudio=True)
    assert proc.returncode == 2
    assert "PortAudio is not installed" in one_line_error(proc.stderr)


def test_talk_without_a_sound_card_still_works_with_output_none() -> None:
    """No PortAudio at all: --output-device none + --input-file runs a whole turn."""
    proc = run_cli(
        "talk", "--output-device", "none", "--input-file", str(HELLO), "--duration", "6",
        hide_portaudio=True,
    )  # fmt: skip
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert "started the reference server" in proc.stdout  # no --url: said in one line
    assert "turn 1: spoke" in proc.stdout
    assert "session closed (client_close" in proc.stdout


def test_bad_options_are_one_line_exit_2(tmp_path: Path) -> None:
    done = invoke("talk", "--barge-in", "maybe", "--output-device", "none")
    assert done.code == 2
    assert "--barge-in: 'maybe' is not one of 'client', 'server', 'off'" in one_line_error(
        done.stderr
    )
    done = invoke("talk", "--input-file", str(tmp_path / "missing.wav"))
    assert done.code == 2
    assert "no such file" in one_line_error(done.stderr)


# --- server problems ------------------------------------------------------------------------


def test_unreachable_url_exits_3() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"ws://127.0.0.1:{port}/v1/realtime?duplex=1"
    proc = run_cli("talk", "--url", url, "--output-device", "none", "--input-file", str(HELLO))
    line = one_line_error(proc.stderr)
    print(line)
    assert proc.returncode == 3
    assert "cannot connect" in line


async def test_capacity_rejection_says_full_with_the_limit_exit_3() -> None:
    async with await start_server(ServerConfig(port=0, max_sessions=1, **FAST)) as server:
        holder = await DuplexConnection.open(server.url, SessionSettings())
        try:
            code, _, err = await run_cli_async(
                "talk", "--url", server.url, "--output-device", "none",
                "--input-file", str(HELLO),
            )  # fmt: skip
        finally:
            await holder.close()
    line = one_line_error(err)
    print(line)
    assert code == 3
    assert "is full" in line and "limit 1" in line


# --- Ctrl-C with --record -------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
async def test_sigint_mid_conversation_keeps_the_recording_and_closes(
    tmp_path: Path, signum: int
) -> None:
    """Ctrl-C, and SIGTERM alike (a service manager): session.close, files kept, exit 130."""
    import soundfile as sf

    rec = tmp_path / "rec"
    async with await start_server(ServerConfig(port=0, **{**FAST, "reply_seconds": 4.0})) as srv:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "duplexctl", "talk", "--url", srv.url,
            "--output-device", "none", "--input-file", str(HELLO), "--record", str(rec),
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        events = rec / "events.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until the answer is playing
            if events.exists() and "response.output_audio.delta" in events.read_text():
                break
            await asyncio.sleep(0.1)
        else:
            proc.kill()
            pytest.fail("no answer within 30 s")
        await asyncio.sleep(0.5)
        proc.send_signal(signum)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        held = srv.registry.slots_held  # a dropped socket would hold the slot for 30 s
    print(out.decode(), err.decode())
    assert proc.returncode == 130
    assert "interrupted" in err.decode() and "Traceback" not in err.decode()
    assert held == 0

    lines = [json.loads(x) for x in events.read_text().splitlines()]
    closed = [e for e in lines if e["type"] == "session.closed"]
    assert closed and closed[-1]["event"]["reason"] == "client_close"
    assert any(e["type"] == "input_audio_buffer.append" for e in lines)
    conv, rate = sf.read(str(rec / "conversation.wav"))
    assert conv.shape[1] == 2 and conv.shape[0] > rate  # both channels, > 1 s
    user, _ = sf.read(str(rec / "user.wav"))
    assert user.size > 16000
    responses = sorted(rec.glob("response_01_*.wav"))
    assert len(responses) == 1 and responses[0].name == "response_01_interrupted.wav"
    assert sf.info(str(responses[0])).frames > 0
    report = json.loads((rec / "report.json").read_text())
    assert report["interrupted"] is True and report["stop_reason"] == "interrupted"
    first = report["turns"][0]
    assert first["outcome"] == "interrupted" and first["figures"]["ttfa_ms"]["value"] > 0


# --- in-process: lanes, resume, keys --------------------------------------------------------


async def talk_in_process(server_config: ServerConfig, **options: Any) -> tuple[Any, str]:
    out = io.StringIO()
    async with await start_server(server_config) as server:
        config = TalkConfig(url=server.url, output_device="none", **options)
        result = await asyncio.wait_for(run_talk(config, PlainView(out)), 60)
        assert server.registry.slots_held == 0
    print(out.getvalue())
    return result, out.getvalue()


async def test_push_to_talk_commits_at_the_end_of_each_file(tmp_path: Path) -> None:
    result, text = await talk_in_process(
        ServerConfig(port=0, model_profile="turn", **FAST),
        turn_detection="none",
        input_files=[InputFileSpec(HELLO)],
        duration_s=7.0,
        record_dir=tmp_path / "rec",
    )
    assert "turns: push-to-talk (Enter ends a turn); each input file ends a turn" in text
    assert result.error is None
    assert [t.outcome for t in result.turns] == ["spoke"]
    assert result.turns[0].end_mode == "commit"
    # one vocabulary for who ends a turn: the report's mode is its turns' end_mode (was "ptt")
    report = json.loads((tmp_path / "rec" / "report.json").read_text())
    assert report["turn_mode"] == "commit" == report["turns"][0]["end_mode"]
    assert result.turns[0].figures["ttfa_commit_ms"].value > 0


async def test_server_barge_in_mode_flushes_locally_and_server_vad_cancels() -> None:
    config = ServerConfig(port=0, **{**FAST, "reply_seconds": 4.0})
    result, text = await talk_in_process(
        config,
        input_files=[InputFileSpec(HELLO), InputFileSpec(ROOT / "recordings/interrupt.wav", 5.0)],
        barge_in="server",
        duration_s=7.5,
    )
    assert result.barge_ins and result.barge_ins[0].kind == "speech"
    assert not result.barge_ins[0].cancel_sent  # server mode: no response.cancel from us
    first = result.turns[0]
    assert first.outcome == "cancelled" and first.reason == "turn_detected"
    assert "barge-in: playback stopped" in text


async def test_dropped_connection_resumes_on_its_own_and_says_so() -> None:
    config = ServerConfig(port=0, faults=[parse_fault("drop-after=30")], **FAST)
    result, text = await talk_in_process(config, input_files=[InputFileSpec(HELLO)], duration_s=7.0)
    assert "connection lost" in text and "resuming on its own" in text
    assert "resumed session" in text
    assert result.error is None
    assert [t.outcome for t in result.turns] == ["spoke"]


def test_keys_do_nothing_without_a_terminal() -> None:
    pressed: list[str] = []
    reader = KeyReader(pressed.append, stream=io.StringIO("q\n"))
    assert reader.start() is False and not reader.active
    reader.stop()
    assert pressed == []


def test_input_file_spec_parses_a_start_time(tmp_path: Path) -> None:
    (tmp_path / "a.wav").write_bytes(b"")
    (tmp_path / "me@home.wav").write_bytes(b"")
    a, at_home = tmp_path / "a.wav", tmp_path / "me@home.wav"
    assert InputFileSpec.parse(f"{a}@2.5") == InputFileSpec(a, 2.5)
    assert InputFileSpec.parse(f"{a}@500ms") == InputFileSpec(a, 0.5)  # any duration
    assert InputFileSpec.parse(str(a)) == InputFileSpec(a)
    assert InputFileSpec.parse(str(at_home)) == InputFileSpec(at_home)
    with pytest.raises(ValueError, match="is a directory"):
        InputFileSpec.parse(str(tmp_path))


def test_the_recording_logs_every_frame_even_when_the_last_one_was_freed(
    tmp_path: Path,
) -> None:
    """Each frame is consumed (and freed) before the next arrives, as in a live session;
    CPython then gives the next frame's dict the freed one's address. The recording
    compared id()s and silently dropped such frames (once a session.closed, under load)."""
    from duplexctl.protocol import codec
    from duplexctl.protocol.client_state import ClientSession
    from duplexctl.report.artifacts import RunArtifacts
    from duplexctl.talk.session import TalkSession

    talk = TalkSession(TalkConfig(url="ws://127.0.0.1:9/", output_device="none"), PlainView())
    talk.artifacts = RunArtifacts(tmp_path, origin_ns=time.monotonic_ns())
    state = ClientSession()
    beat = {"type": "response.listen", "epoch": 0, "response": {"status": "listening"}}
    raws = [codec.dumps({**beat, "server_event_seq": seq}) for seq in range(1, 6)]
    for raw in raws:
        (happening,) = state.on_frame(codec.loads(raw), time.monotonic_ns())
        talk._record_recv(happening)
        del happening  # consumed: its frame is freed before the next one is parsed
    talk.artifacts.close()
    logged = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["seq"] for e in logged if e["dir"] == "recv"] == [1, 2, 3, 4, 5]


def test_the_recording_logs_violations_with_their_evidence(tmp_path: Path) -> None:
    """A malformed server event is a violation in events.jsonl with the frame as evidence,
    as replay logs it (it was left out of talk's recording: the happening has no frame)."""
    from duplexctl.client import ViolationRecorded
    from duplexctl.protocol.invariants import Violation
    from duplexctl.report.artifacts import RunArtifacts
    from duplexctl.talk.session import TalkSession

    talk = TalkSession(TalkConfig(url="ws://127.0.0.1:9/", output_device="none"), PlainView())
    talk.artifacts = RunArtifacts(tmp_path, origin_ns=time.monotonic_ns())
    bad = '{"type": "response.audio.delta", "delta": "not base64!"}'
    violation = Violation("audio_decode", "delta is not base64", time.monotonic_ns(), 7, "r1", bad)
    talk._record_recv(
        ViolationRecorded(
            type="client.violation", recv_ns=violation.recv_ns, seq=7, violation=violation
        )
    )
    talk.artifacts.close()
    logged = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    [note] = [e for e in logged if e["dir"] == "note" and e["type"] == "violation"]
    assert note["name"] == "audio_decode" and note["frame"] == bad and note["seq"] == 7
