"""What goes on the wire is what the resolver said, for every command, over real sockets.

Each command runs with all the layers at once (a scenario, a ``--session`` file and flags
that override some of their values) against the reference server on loopback, and the test
reads what was sent: replay's ``events.jsonl`` (``--out``), and for load, talk and probe the
server's own view — the real reference engine, with a tap that records each session's
opening object and the size of every append it receives. The report of each command must
echo the same values with their origin.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.commands import run_cli_async

from duplexctl.server.app import RunningServer, start_server
from duplexctl.server.config import ServerConfig
from duplexctl.server.registry import Emit, Engine, EngineLike, default_engine
from duplexctl.talk.config import InputFileSpec, TalkConfig
from duplexctl.talk.session import run_talk
from duplexctl.talk.view import PlainView

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "recordings" / "hello.wav"
SHORT = ROOT / "recordings" / "short_ack.wav"
FAST = {"voice": "tone", "reply_seconds": 1.0, "ttfa_ms": 100, "chunk_ms": 200}
CHUNK_40_MS_BYTES = 16000 * 40 // 1000 * 2  # pcm16 at 16 kHz


class WireTap:
    """The real engine of the reference server, recording what each session received."""

    def __init__(self, config: ServerConfig) -> None:
        self.base = default_engine(config)
        self.opened: list[dict[str, Any] | None] = []
        self.append_bytes: list[int] = []

    def engine(self) -> Engine:
        def create(session_id: str, session_obj: dict[str, Any] | None, emit: Emit) -> EngineLike:
            self.opened.append(session_obj)
            session = self.base.create(session_id, session_obj, emit)
            receive = session.receive

            def tapped(event: dict[str, Any]) -> None:
                if event.get("type") == "input_audio_buffer.append":
                    self.append_bytes.append(len(base64.b64decode(event["audio"])))
                receive(event)

            session.receive = tapped  # type: ignore[method-assign]
            return session

        return Engine(self.base.validate_open, create)


async def tapped_server(**changes: Any) -> tuple[RunningServer, WireTap]:
    config = ServerConfig(port=0, **{**FAST, **changes})
    tap = WireTap(config)
    return await start_server(config, engine=tap.engine()), tap


def scenario(tmp_path: Path, settings: str, session: str = "") -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(
        f"[settings]\n{settings}\n[session]\n{session}\n"
        f'[[step]]\naction = "say"\nfile = "{SHORT}"\n[[step]]\naction = "wait"\n'
    )
    return path


def session_file(tmp_path: Path, obj: dict[str, Any]) -> Path:
    path = tmp_path / "session.json"
    path.write_text(json.dumps(obj))
    return path


def test_replay_sends_what_its_report_echoes(tmp_path: Path) -> None:
    """scenario chunk 200 + model, --session model/voice/VAD, flags --chunk-ms 40 --model:
    the flags win, the session file beats the scenario, the rest passes through."""
    path = scenario(tmp_path, 'chunk_ms = 200\nmodel = "m-scenario"', "idle_timeout_s = 45")
    session = session_file(
        tmp_path,
        {
            "model": "m-file",
            "voice": "v-file",
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 600, "threshold": 0.6},
        },
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable, "-m", "duplexctl", "replay", str(path), "--out", str(out),
            "--session", str(session), "--chunk-ms", "40", "--model", "m-flag",
        ],
        capture_output=True, text=True, timeout=90, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    sent = [e for e in events if e["dir"] == "send"]
    opening = sent[0]
    assert opening["type"] == "session.update"
    obj = opening["event"]["session"]
    assert obj["model"] == "m-flag" and obj["voice"] == "v-file"
    assert obj["turn_detection"] == {
        "type": "server_vad",
        "silence_duration_ms": 600,
        "threshold": 0.6,
    }
    assert obj["idle_timeout_s"] == 45
    appends = [e["event"]["audio"] for e in sent if e["type"] == "input_audio_buffer.append"]
    assert appends and set(appends) == {CHUNK_40_MS_BYTES}

    report = json.loads((out / "report.json").read_text())
    config = report["config"]
    assert (config["chunk_ms"], config["model"], config["voice"]) == (40, "m-flag", "v-file")
    assert config["vad_silence_ms"] == 600 and config["end_mode"] == "server_vad"
    assert {k: config["origin"][k] for k in ("chunk_ms", "model", "voice", "vad_silence_ms")} == {
        "chunk_ms": "flag",
        "model": "flag",
        "voice": "session_file",
        "vad_silence_ms": "session_file",
    }
    assert report["pacing"]["chunk_ms"] == 40


async def test_load_sends_the_chunk_and_the_vad_its_report_states(tmp_path: Path) -> None:
    """A scenario's chunk_ms no longer beats --chunk-ms, the report judges pacing against
    the chunk sent, and load asks for replay's 800 ms VAD silence."""
    path = scenario(tmp_path, 'chunk_ms = 200\nturn_detection = "server_vad"')
    out = tmp_path / "out"
    server, tap = await tapped_server()
    async with server:
        code, _, stderr = await run_cli_async(
            "load", str(path), "--url", server.url, "--sessions", "1", "--count", "1",
            "--chunk-ms", "40", "--workers", "1", "--json", "--out", str(out),
        )  # fmt: skip
    assert code == 0, stderr
    assert tap.opened and tap.opened[0] is not None
    assert tap.opened[0]["turn_detection"] == {"type": "server_vad", "silence_duration_ms": 800}
    assert tap.append_bytes and set(tap.append_bytes) == {CHUNK_40_MS_BYTES}
    report = json.loads((out / "report.json").read_text())
    assert report["validity"]["chunk_ms"] == 40
    config = report["config"]
    assert (config["chunk_ms"], config["turn_detection"], config["vad_silence_ms"]) == (
        40,
        "server_vad",
        800,
    )
    assert config["origin"]["chunk_ms"] == "flag"
    assert config["origin"]["turn_detection"] == "scenario"
    assert config["origin"]["vad_silence_ms"] == "default"


async def test_talk_sends_what_its_record_report_echoes(tmp_path: Path) -> None:
    session = session_file(
        tmp_path, {"model": "m-file", "turn_detection": {"silence_duration_ms": 600}}
    )
    server, tap = await tapped_server()
    async with server:
        config = TalkConfig(
            url=server.url,
            output_device="none",
            input_files=[InputFileSpec(SHORT)],
            duration_s=3.0,
            record_dir=tmp_path / "rec",
            session_file=session,
            model="m-flag",
            chunk_ms=40,
        )
        result = await asyncio.wait_for(run_talk(config, PlainView(io.StringIO())), 60)
    assert result.error is None
    assert tap.opened[0] is not None
    assert tap.opened[0]["model"] == "m-flag"
    assert tap.opened[0]["turn_detection"] == {"type": "server_vad", "silence_duration_ms": 600}
    assert tap.append_bytes and set(tap.append_bytes) == {CHUNK_40_MS_BYTES}
    report = json.loads((tmp_path / "rec" / "report.json").read_text())
    echoed = report["config"]
    assert (echoed["model"], echoed["vad_silence_ms"], echoed["chunk_ms"]) == ("m-flag", 600, 40)
    assert (echoed["origin"]["model"], echoed["origin"]["vad_silence_ms"]) == (
        "flag",
        "session_file",
    )
    assert echoed["origin"]["turn_detection"] == "default" and echoed["turn_detection"] == "auto"


async def test_probe_sends_and_reports_its_settings(tmp_path: Path) -> None:
    """Probe sessions are client-committed whatever --session asks (said in a note), and a
    flag beats the session file."""
    session = session_file(
        tmp_path, {"model": "m-file", "voice": "v-file", "turn_detection": {"type": "server_vad"}}
    )
    server, tap = await tapped_server()
    async with server:
        code, stdout, stderr = await run_cli_async(
            "probe", "--url", server.url, "--only", "handshake", "--json",
            "--model", "m-flag", "--session", str(session),
        )  # fmt: skip
    assert code == 0, stderr
    assert tap.opened
    for obj in tap.opened:
        assert obj is not None
        assert (obj["model"], obj["voice"], obj["turn_detection"]) == ("m-flag", "v-file", None)
    settings = json.loads(stdout)["settings"]
    assert (settings["model"], settings["voice"], settings["turn_detection"]) == (
        "m-flag",
        "v-file",
        "none",
    )
    assert settings["origin"]["model"] == "flag"
    assert settings["origin"]["voice"] == "session_file"
    assert settings["origin"]["turn_detection"] == "fixed"
    assert len(settings["notes"]) == 1 and "ignored: probe always uses 'none'" in stderr
