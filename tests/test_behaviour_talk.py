"""``talk --record`` reports how the conversation behaved, read off its conversation.wav."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.commands import duplexctl_cmd, serving

from duplexctl.audio.manifest import DEFAULT_DIR as RECORDINGS

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(120)]


@pytest.mark.timing
def test_talk_record_reports_the_response_gap(tmp_path: Path) -> None:
    """The model answers 1500 ms after the end of speech. talk records an append at the
    capture time of its first block but sends it when its last block is captured, one append
    (100 ms) later, and the server places speech by arrival: the gap read off the recording
    is longer than the model's by that and some tens of ms (measured 1670 ms; docs/metrics.md
    "Conversation behaviour"). Without the figure there is no ``behaviour`` at all."""
    rec = tmp_path / "rec"
    with serving("--behaviour", "response-gap-ms=1500") as url:
        cmd = duplexctl_cmd("talk", "--url", url, "--output-device", "none", "--duration", "8")
        cmd += ["--input-file", str(RECORDINGS / "hello.wav"), "--record", str(rec)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    figures = json.loads((rec / "report.json").read_text())["behaviour"]
    assert figures["turn_ends"] == 1 and figures["no_response_rate"] == 0.0
    assert 1470.0 <= figures["response_gap_ms"] <= 1800.0, figures
    assert figures["measurement_origins"]["response_gap_ms"]
