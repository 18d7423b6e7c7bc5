"""The capacity search explains its knee in server terms (issue 19, item 3): against
``duplexctl serve --gpu-slots 2 --unit-compute-ms 150`` (a real process on loopback), the
waiting queue scraped from its ``/metrics`` grows at the level where the search failed.

Why a single session can be the reference: one session's output units are computed one after
another, so with two batch slots nothing ever waits at level 1; at the knee, units queue.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.commands import ROOT, SHORT, duplexctl_cmd, serve

pytestmark = pytest.mark.realtime


@pytest.mark.timing
@pytest.mark.slow
def test_the_knee_shows_the_waiting_queue_growing(tmp_path: Path) -> None:
    out = tmp_path / "search"
    with serve(
        "--gpu-slots", "2", "--unit-compute-ms", "150", "--max-sessions", "200",
        "--disconnect-grace-s", "1",
    ) as (url, _proc):  # fmt: skip
        run = subprocess.run(
            duplexctl_cmd(
                "load", SHORT, "--url", url, "--find-capacity", "--step-duration", "8s",
                "--slo", "ttfa_p95<=1000ms", "--max-level", "48", "--workers", "1",
                "--plain", "--scrape-interval", "0.25", "--out", str(out),
            ),
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr
    report = json.loads((out / "report.json").read_text())
    cap = report["capacity_search"]
    assert cap["first_fail"] is not None, "the search never found the GPU's knee"
    section = report["server_metrics"]
    steps = {int(s["label"]): s["key"] for s in section["steps"]}
    assert set(steps) == {s["level"] for s in cap["steps"]}
    assert steps[1]["waiting"]["max"] == 0.0  # one session never queues on two slots
    at_knee = steps[cap["first_fail"]]
    assert at_knee["waiting"]["max"] >= 1.0
    assert at_knee["waiting"]["max"] > steps[1]["waiting"]["max"]
    assert at_knee["kv_cache_usage"]["max"] == 1.0  # both slots busy at some scrape
    knee = section["knee"]
    assert knee["level"] == cap["first_fail"]
    waiting = next(c for c in knee["changes"] if c["series"] == "waiting")
    assert waiting["after"] == at_knee["waiting"]["max"]
    assert f"knee: at {cap['first_fail']} sessions: " in run.stdout
    assert "waiting requests" in knee["text"]
    windows = [x for x in map(json.loads, (out / "server_metrics.jsonl").read_text().splitlines())
               if x["kind"] == "window"]  # fmt: skip
    assert len(windows) == len(cap["steps"])
