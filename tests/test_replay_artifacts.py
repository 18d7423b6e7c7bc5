"""report/artifacts and report/render without a server: files valid at every instant."""

from __future__ import annotations

import base64
import io
import json
import wave
from pathlib import Path

import numpy as np

from duplexctl.report.artifacts import RunArtifacts, redact
from duplexctl.report.render import capabilities_line, plain_lines, render
from duplexctl.report.turns import Delta, TurnTimes, compute_turn

MS = 1_000_000


def _wav_info(path: Path) -> tuple[int, int, int]:
    with wave.open(str(path), "rb") as w:
        return w.getnchannels(), w.getframerate(), w.getnframes()


def test_redact_replaces_audio_and_data_uris() -> None:
    audio = base64.b64encode(b"\x01\x02" * 800).decode()
    append = {"type": "input_audio_buffer.append", "audio": audio, "audio_end_ms": 100}
    assert redact(append, audio_keys=True) == {
        "type": "input_audio_buffer.append",
        "audio": 1600,
        "audio_end_ms": 100,
    }
    transcript = {"type": "response.output_audio_transcript.delta", "delta": "hello"}
    assert redact(transcript, audio_keys=False) == transcript
    done = {"type": "response.done", "response": {"metadata": {"audio": audio, "text": "hi"}}}
    assert redact(done, audio_keys=False)["response"]["metadata"] == {"audio": 1600, "text": "hi"}
    uri = "data:audio/wav;base64," + base64.b64encode(b"x" * 300).decode()
    update = {"type": "session.update", "session": {"ref_audio": uri}}
    assert (
        redact(update, audio_keys=False)["session"]["ref_audio"]
        == "data:audio/wav;base64,<300 bytes>"
    )


def test_artifacts_are_valid_while_being_written(tmp_path: Path) -> None:
    art = RunArtifacts(tmp_path, origin_ns=0, user_rate=16000, conversation_rate=24000)
    art.event("send", 5 * MS, {"type": "session.update", "session": {}})
    art.event(
        "recv",
        7 * MS,
        {
            "type": "response.output_audio.delta",
            "server_event_seq": 3,
            "delta": base64.b64encode(b"\0\0" * 240).decode(),
        },
    )
    tone = (0.2 * np.sin(np.arange(1600) / 5)).astype(np.float32)
    art.user_audio(tone, 0)
    art.user_audio(tone, 101 * MS)  # 1 ms late: snapped to 100 ms
    art.response_audio("resp-a", (np.ones(2400, dtype="<i2") * 1000).tobytes(), 24000)
    art.assistant_heard(np.full(2400, 0.03, dtype=np.float32), 24000, 300 * MS)
    art.write_report({"status": "running", "turns": []})
    # mid-run: everything on disk is already readable
    lines = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [x["dir"] for x in lines] == ["send", "recv"]
    assert lines[1]["seq"] == 3 and lines[1]["event"]["delta"] == 480 and lines[1]["t_ms"] == 7.0
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "running"
    assert _wav_info(tmp_path / "response_01_in_progress.wav") == (1, 24000, 2400)
    channels, rate, frames = _wav_info(tmp_path / "conversation.wav")
    assert (channels, rate) == (2, 24000) and frames >= 24000 * 400 // 1000 - 50
    # finish: renamed by status, unfinished ones "interrupted"
    assert art.response_finished("resp-a", "cancelled") == tmp_path / "response_01_cancelled.wav"
    art.response_started("resp-b", 24000)
    art.close()
    art.close()
    assert (tmp_path / "response_01_cancelled.wav").exists()
    assert _wav_info(tmp_path / "response_02_interrupted.wav") == (1, 24000, 0)
    assert not list(tmp_path.glob("*in_progress*")) and not list(tmp_path.glob(".report*"))


def _report() -> dict:
    t = TurnTimes(
        index=1,
        source="hello.wav",
        t_eos=0,
        t_created=10 * MS,
        deltas=[Delta(300 * MS, 200), Delta(500 * MS, 200)],
        t_done=520 * MS,
        status="completed",
        reason="stop",
    )
    return {
        "scenario": {"name": "demo"},
        "session": {
            "id": "duplex-1",
            "capabilities": {
                "implementation_level": "turn_based_duplex",
                "supports_session_resume": True,
                "supports_barge_in": False,
                "chunk_period_ms": 1000,
            },
        },
        "session_figures": {"connect_ms": {"value": 1.5, "measurement_origin": "x"}},
        "turns": [compute_turn(t).to_json()],
        "violations": [],
        "violation_counts": {},
        "expectations": {
            "checked": 2,
            "failed": [
                {"step": 2, "turn": 1, "name": "ttfa_ms", "actual": 300.0, "expected": "<100"}
            ],
        },
        "status": "failed",
    }


def test_plain_and_json_rendering() -> None:
    lines = plain_lines(_report())
    assert lines[0] == ("capabilities: turn_based_duplex +resume -barge_in chunk_period_ms=1000")
    assert lines[1] == "session duplex-1 connect_ms=1.50"
    assert lines[2].startswith("turn 1 source=hello.wav outcome=spoke reason=stop ttfa_ms=300")
    assert "violations: none" in lines
    assert "expectations: 1 of 2 failed" in lines
    assert any("ttfa_ms = 300, expected <100" in x for x in lines)
    buf = io.StringIO()
    render(_report(), as_json=True, out=buf)
    assert json.loads(buf.getvalue())["turns"][0]["outcome"] == "spoke"
    buf = io.StringIO()
    render(_report(), as_json=False, out=buf)  # not a TTY: plain lines
    assert buf.getvalue().splitlines() == lines


def test_table_rendering_on_a_terminal() -> None:
    from duplexctl.report.render import render_table

    buf = io.StringIO()
    render_table(_report(), buf, width=200)
    text = buf.getvalue()
    assert "hello.wav" in text and "spoke" in text and "ttfa_ms" in text


def test_capabilities_line_without_capabilities() -> None:
    assert capabilities_line({}) == "capabilities: (none announced)"
