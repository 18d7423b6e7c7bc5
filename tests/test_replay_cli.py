"""The replay command end to end: exit codes 0/1/2/3/130 and Ctrl-C keeping everything.

A reference server runs as its own process (``duplexctl serve``) so the command under test
talks to it over real loopback sockets, exactly as a user would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import soundfile as sf
from support.paths import with_parent
from typer.testing import CliRunner
from websockets.sync.client import connect

from duplexctl.cli import app

ROOT = Path(__file__).resolve().parent.parent
RECORDINGS = ROOT / "recordings"

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(120)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """``duplexctl serve`` with one admission slot and short replies."""
    port = _free_port()
    proc = subprocess.Popen(
        with_parent(
            [
                sys.executable,
                "-m",
                "duplexctl",
                "serve",
                "--port",
                str(port),
                "--max-sessions",
                "1",
                "--output-chunk-ms",
                "200",
                "--reply-seconds",
                "1.0",
                "--disconnect-grace-s",
                "2",
            ]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("reference server did not start") from None
                time.sleep(0.2)
        yield f"ws://127.0.0.1:{port}/v1/realtime?duplex=1"
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["replay", *args])
    return result.exit_code, result.stdout, result.stderr


def test_success_is_0_with_plain_lines(server: str) -> None:
    code, out, err = _run(
        str(RECORDINGS / "short_ack.wav"),
        "--url",
        server,
        "--turn-detection",
        "none",
        "--pace",
        "fast",
    )
    assert code == 0, err
    assert "turn 1 source=short_ack.wav outcome=spoke" in out
    assert out.splitlines()[0].startswith("capabilities: ")


def test_json_report_on_stdout(server: str) -> None:
    code, out, err = _run(
        str(RECORDINGS / "short_ack.wav"),
        "--url",
        server,
        "--turn-detection",
        "none",
        "--pace",
        "fast",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["turns"][0]["outcome"] == "spoke"
    assert report["config"]["end_mode"] == "commit"


def test_bad_wav_is_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not really a wave file")
    code, _out, err = _run(str(bad), "--url", "ws://127.0.0.1:9/v1/realtime")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "bad.wav" in err and "Traceback" not in err


def test_malformed_scenario_is_2_with_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "x.toml"
    scenario.write_text('[[step]]\naction = "bargein"\nfile = "a.wav"\n')
    code, _, err = _run(str(scenario))
    assert code == 2
    assert err.strip() == (
        f"duplexctl: error: {scenario}: step 1: unknown action 'bargein' "
        "(expected one of barge_in, cancel, commit, drop, pause, say, silence, tool_output, wait)"
    )


def test_unreachable_url_is_3() -> None:
    url = f"ws://127.0.0.1:{_free_port()}/v1/realtime?duplex=1"
    code, _, err = _run(str(RECORDINGS / "short_ack.wav"), "--url", url)
    assert code == 3
    assert len(err.strip().splitlines()) == 1 and "cannot connect" in err


def test_admission_rejection_is_3_naming_the_limit(server: str) -> None:
    with connect(server + "&autostart=0", compression=None, max_size=None) as holder:
        holder.send(json.dumps({"type": "session.update", "session": {"turn_detection": None}}))
        assert json.loads(holder.recv(timeout=10))["type"] == "session.created"
        code, _, err = _run(str(RECORDINGS / "short_ack.wav"), "--url", server)
        holder.send(json.dumps({"type": "session.close"}))
        while json.loads(holder.recv(timeout=10))["type"] != "session.closed":
            pass
    assert code == 3
    assert "limit 1" in err and len(err.strip().splitlines()) == 1


def test_failed_expectation_is_1(server: str, tmp_path: Path) -> None:
    scenario = tmp_path / "strict.toml"
    scenario.write_text(
        '[settings]\nturn_detection = "none"\npace = "fast"\n'
        f'[[step]]\naction = "say"\nfile = "{RECORDINGS / "short_ack.wav"}"\n'
        '[[step]]\naction = "wait"\nexpect = { outcome = "spoke", ttfa_ms = "<1" }\n'
    )
    code, out, err = _run(str(scenario), "--url", server)
    assert code == 1
    assert "expectations: 1 of 2 failed" in out
    assert "step 2 turn 1: ttfa_ms" in out
    assert "1 expectation(s) failed" in err


def _replay_interrupted(
    server: str, out: Path, *inputs: str, signum: int = signal.SIGINT
) -> tuple[int, str, str]:
    """A real ``duplexctl replay`` process, sent ``signum`` while its first answer plays;
    (return code, stdout, stderr)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "duplexctl",
            "replay",
            *inputs,
            "--url",
            server,
            "--turn-detection",
            "none",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    events = out / "events.jsonl"
    deadline = time.monotonic() + 30
    # interrupt mid-run: after the first answer's audio has arrived
    while time.monotonic() < deadline:
        if events.exists() and b"response.output_audio.delta" in events.read_bytes():
            break
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=30)
    return proc.returncode, stdout.decode(), stderr.decode()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_ctrl_c_stops_saves_and_closes(server: str, tmp_path: Path, signum: int) -> None:
    """Ctrl-C, and SIGTERM alike: the run stops, closes, writes its report, exit 130."""
    out = tmp_path / "run"
    code, _stdout, stderr = _replay_interrupted(
        server,
        out,
        str(RECORDINGS / "short_ack.wav"),
        str(RECORDINGS / "count.wav"),
        str(RECORDINGS / "hello.wav"),
        signum=signum,
    )
    assert code == 130, stderr
    assert "interrupted" in stderr
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "interrupted" and report["exit_code"] == 130
    events = out / "events.jsonl"
    lines = [json.loads(x) for x in events.read_text().splitlines()]
    closed = [x for x in lines if x["dir"] == "recv" and x["type"] == "session.closed"]
    assert closed and closed[0]["event"]["reason"] == "client_close"  # the server saw session.close
    wavs = sorted(out.glob("*.wav"))
    assert out / "conversation.wav" in wavs and len(wavs) >= 2
    for wav in wavs:
        _data, rate = sf.read(wav)
        assert rate == 24000
    assert not list(out.glob("*in_progress*"))


def test_ctrl_c_lists_steps_never_reached_as_not_reached(server: str, tmp_path: Path) -> None:
    """issue 17.6: expectations of steps the run never reached are "not reached", never
    failures of "turn None"."""
    scenario = tmp_path / "three.toml"
    wait = '[[step]]\naction = "wait"\nexpect = { outcome = "spoke", ttfa_ms = "<5000" }\n'
    say = f'[[step]]\naction = "say"\nfile = "{RECORDINGS / "short_ack.wav"}"\n'
    scenario.write_text((say + wait) * 3)
    out = tmp_path / "run"
    code, stdout, stderr = _replay_interrupted(server, out, str(scenario))
    assert code == 130, stderr
    expectations = json.loads((out / "report.json").read_text())["expectations"]
    assert expectations["failed"] == [], expectations
    not_reached = expectations["not_reached"]
    assert {n["step"] for n in not_reached} >= {4, 6}  # the later waits never ran
    assert all(n["name"] in ("outcome", "ttfa_ms") for n in not_reached)
    assert "not reached" in stdout and "turn None" not in stdout
