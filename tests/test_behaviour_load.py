"""The behaviour figures on ``load``'s sessions: the same figures, added up across sessions
(HDR histograms for times, rates with their n), recovered against a known behaviour."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from load_support import duplexctl_cmd
from test_behaviour_replay import serving

from duplexctl.audio.manifest import DEFAULT_DIR as RECORDINGS

pytestmark = pytest.mark.timeout(300)


def _load(url: str, scenario: str, out: Path, *args: str) -> dict:
    cmd = duplexctl_cmd("load", str(RECORDINGS / scenario), "--url", url)
    cmd += ["--workers", "1", "--plain", "--out", str(out), "--prebuffer-ms", "0"]
    cmd += ["--turn-detection", "server_vad", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "behaviour: " in done.stdout
    return dict(json.loads((out / "report.json").read_text()))


def test_stop_latency_and_takeover_rate_under_load(tmp_path: Path) -> None:
    with serving("--max-sessions", "8", "--behaviour", "stop-latency-ms=300") as url:
        stops = _load(url, "interruption.toml", tmp_path / "i", "--sessions", "3", "--count", "3")
    with serving("--max-sessions", "8", "--behaviour", "takeover-on-pause=0.5") as url:
        pauses = _load(
            url,
            "pause.toml",
            tmp_path / "p",
            "--sessions",
            "5",
            "--count",
            "5",
            "--vad-silence-ms",
            "2000",
        )
    stop = stops["figures"]["stop_latency_ms"]
    assert stop["n"] == 3 and stops["behaviour"]["interruptions"] == 3
    assert stop["min"] >= 270.0 and stop["max"] <= 330.0, stop
    assert stops["behaviour"]["no_response_rate"] == 0.0
    b = pauses["behaviour"]
    assert b["pause_trials"] == 50
    assert b["takeover_rate"] == b["takeovers"] / 50
    assert 14 <= b["takeovers"] <= 36  # Binomial(50, 0.5), two-sided 99.9 %
    assert pauses["scalars"]["takeover_rate"] == b["takeover_rate"]
    # saved runs merge exactly: the counts add up, the rates are recomputed from them
    cmd = duplexctl_cmd("report", str(tmp_path / "i"), str(tmp_path / "p"), "--json")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    merged = json.loads(done.stdout)["behaviour"]
    assert merged["pause_trials"] == 50 and merged["interruptions"] == 3
    assert merged["turn_ends"] == stops["behaviour"]["turn_ends"] + b["turn_ends"]
    assert merged["takeover_rate"] == b["takeover_rate"]


def test_load_refuses_a_pause_its_server_vad_would_end() -> None:
    cmd = duplexctl_cmd("load", str(RECORDINGS / "pause.toml"), "--sessions", "1", "--count", "1")
    cmd += ["--turn-detection", "server_vad", "--vad-silence-ms", "1000"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"duplexctl: error: {RECORDINGS / 'pause.toml'}: step 2: pause: 1500 ms would end the "
        "turn: server VAD commits after 1000 ms of silence (use a shorter pause or a longer "
        "vad_silence_ms)"
    )
