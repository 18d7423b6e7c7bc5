"""The fault matrix: every probe against ``duplexctl serve`` with each injected server bug.

Each run is the real CLI (``duplexctl probe --url … --json``) against a real ``duplexctl
serve`` process on loopback, so the probes meet the server across a process boundary the way
they meet a deployed one (that boundary is what made abandoned-handshake racy before the
probe corked its last segment). For each known bug exactly the matching probe must fail and
every other probe must pass; the healthy server (embedded, defaults) must pass everything.

``orphan-response`` fails the append on which the model starts speaking and leaves that
response open; ``fail-append-every=2`` alone is the control: appends fail, but every response
they created is ended (failed), so every probe passes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from support.commands import serve as serve_process

pytestmark = pytest.mark.realtime

GRACE = ["--disconnect-grace-s", "3"]


@contextmanager
def serve(*args: str) -> Iterator[str]:
    """``duplexctl serve`` on a free loopback port (dies with the test process); yields its
    duplex URL."""
    with serve_process(*args) as (url, _proc):
        yield url


def run_probe(*args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "duplexctl", "probe", "--json", *args],
        capture_output=True,
        text=True,
        timeout=240,
    )
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {r["name"]: r["verdict"] for r in report["results"]}


@pytest.mark.slow
def test_every_probe_passes_against_the_embedded_reference_server() -> None:
    code, report, stderr = run_probe()
    assert "no --url" in stderr and "reference server" in stderr
    assert report["embedded"] is True
    v = verdicts(report)
    assert len(v) == 13
    # defaults: a 30 s disconnect grace is past the probe's 20 s bound, so that one skips;
    # the default model answers every turn without calling a tool (the frame profile calls
    # one: tests/test_frame_lane.py)
    assert {n for n, x in v.items() if x != "pass"} == {"resume-after-grace", "tool-calls"}
    skipped = {r["name"]: r["summary"] for r in report["results"] if r["verdict"] == "skipped"}
    assert "--disconnect-grace-s" in skipped["resume-after-grace"]
    assert "answered the turn without calling a tool" in skipped["tool-calls"]
    assert code == 0
    assert report["duration_ms"] < 120_000


@pytest.mark.parametrize(
    ("faults", "expected_failures"),
    [
        (["--fault", "leak-undelivered-created"], {"abandoned-handshake"}),
        (["--fault", "stuck-gate"], {"barge-in-race"}),
        (["--fault", "orphan-response"], {"responses"}),
        (["--fault", "fail-append-every=2"], set()),
    ],
    ids=["leak-undelivered-created", "stuck-gate", "orphan-response", "control-fail-append"],
)
@pytest.mark.slow
def test_only_the_matching_probe_fails(faults: list[str], expected_failures: set[str]) -> None:
    with serve(*GRACE, *faults) as url:
        code, report, _ = run_probe("--url", url, *GRACE)
    v = verdicts(report)
    failed = {n for n, x in v.items() if x == "fail"}
    assert failed == expected_failures, json.dumps(report, indent=1)[:6000]
    passed = {n for n, x in v.items() if x == "pass"}
    assert passed == set(v) - expected_failures - {"tool-calls"}, v  # no tool call: skipped
    assert code == (1 if expected_failures else 0)
    for r in report["results"]:
        if r["verdict"] == "fail":
            assert r["evidence"], "a failure must carry its evidence"
            assert r["catches"]


def test_leak_is_measured_as_the_disconnect_grace() -> None:
    with serve(*GRACE, "--fault", "leak-undelivered-created") as url:
        code, report, _ = run_probe("--url", url, *GRACE, "--only", "abandoned-handshake")
    assert code == 1
    (result,) = report["results"]
    assert "held its admission slot for" in result["summary"]
    held_s = float(result["summary"].split("for ")[1].split(" s")[0])
    assert 2.5 <= held_s <= 6.0  # grace 3 s + the reaper tick + polling
