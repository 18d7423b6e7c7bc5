"""Resumes visible in load (issue 17.4, load side): a server that drops every connection
mid-reply must not look healthy.

``duplexctl serve --fault drop-after=N`` drops each connection after N frames, so every
session is dropped and resumed during its answers. ``load`` must count the drops (unplanned,
not scripted) and resumes in its summary, report.json and sessions.jsonl, record each
resume's ``resume_ms``, and let ``--slo`` fail on them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.commands import ROOT, SHORT, duplexctl_cmd, serve

pytestmark = pytest.mark.realtime


@pytest.mark.slow
def test_a_server_that_drops_every_connection_fails_the_drop_slo(tmp_path: Path) -> None:
    out = tmp_path / "run"
    server = ("--fault", "drop-after=12", "--reply-seconds", "1", "--output-chunk-ms", "200")
    with serve(*server) as (url, _server):
        args = ["load", SHORT, "--url", url, "--sessions", "2", "--duration", "4s", "--plain"]
        slos = ["--slo", "unplanned_drops<=0", "--slo", "resume_ms_p95<=30s"]
        run = subprocess.run(
            duplexctl_cmd(*args, "--workers", "1", "--out", str(out), *slos),
            capture_output=True,
            text=True,
            timeout=180,
            cwd=ROOT,
        )
    assert run.returncode == 1, run.stdout + run.stderr  # the drop SLO failed
    report = json.loads((out / "report.json").read_text())
    resume = report["resume"]
    assert resume["unplanned_drops"] >= 1 and resume["scripted_drops"] == 0
    assert resume["drops"] == resume["unplanned_drops"]
    assert resume["resumes"] + resume["resume_failures"] == sum(resume["outcomes"].values())
    assert report["figures"]["resume_ms"]["n"] == resume["outcomes"].get("resumed", 0)
    assert [(s["expr"], s["passed"]) for s in report["slo"]] == [
        ("unplanned_drops<=0", False),
        ("resume_ms_p95<=30s", True),
    ]
    line = next(x for x in run.stdout.splitlines() if x.startswith("connection drops:"))
    assert f"connection drops: {resume['drops']} (unplanned {resume['drops']}, scripted 0)" in line
    assert "resume_ms p50" in line
    sessions = [json.loads(x) for x in (out / "sessions.jsonl").read_text().splitlines()]
    admitted = [s for s in sessions if s["admission"] == "admitted"]
    assert sum(s["unplanned_drops"] for s in admitted) == resume["unplanned_drops"]
    assert sum(len(s["resume_ms"]) for s in admitted) == resume["outcomes"].get("resumed", 0)
    assert all(ms > 0 for s in admitted for ms in s["resume_ms"])


def test_a_healthy_run_says_it_had_no_drops(tmp_path: Path) -> None:
    args = ["load", SHORT, "--sessions", "1", "--duration", "3s", "--workers", "1", "--plain"]
    run = subprocess.run(
        duplexctl_cmd(*args, "--slo", "drops<=0", "--server-option", "reply_seconds=1"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "connection drops: none" in run.stdout
    assert "SLO PASS drops<=0" in run.stdout
