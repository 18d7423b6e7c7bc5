"""A load test that never connected must not report success (issue 17.1).

``duplexctl load`` as a user runs it, against hostile peers on loopback: nothing listening,
a plain HTTP server, a server that drops the TCP connection right after the upgrade, a TLS
server with a self-signed certificate. Each run must exit 3, print every failed attempt's
cause (summary and report.json), and fail ``--slo rejection_rate<=0.01``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.commands import (
    ROOT,
    SHORT,
    background_ws_server,
    closed_port_url,
    drop_after_upgrade_server,
    duplexctl_cmd,
    plain_http_server,
    self_signed_tls_server,
)

pytestmark = pytest.mark.realtime


@contextlib.contextmanager
def nothing_listening(_tmp: Path) -> Iterator[str]:
    yield closed_port_url()


def plain_http(_tmp: Path) -> contextlib.AbstractContextManager[str]:
    return plain_http_server()


def drops_after_upgrade(_tmp: Path) -> contextlib.AbstractContextManager[str]:
    return drop_after_upgrade_server()


def untrusted_tls(tmp: Path) -> contextlib.AbstractContextManager[str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a self-signed certificate")
    return self_signed_tls_server(tmp)


PEERS: list[tuple[Callable[[Path], contextlib.AbstractContextManager[str]], str]] = [
    (nothing_listening, "refused"),
    (plain_http, "not_websocket"),
    (drops_after_upgrade, "closed_after_upgrade"),
    (untrusted_tls, "tls"),
]


def load(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["load", SHORT, "--url", url, "--sessions", "2", "--duration", "2s", "--plain"]
    return subprocess.run(
        duplexctl_cmd(*args, "--slo", "rejection_rate<=0.01", "--out", str(out), *extra),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.mark.parametrize(("peer", "cause"), PEERS, ids=[cause for _p, cause in PEERS])
def test_never_admitted_exits_3_with_causes_and_fails_the_slo(
    peer: Callable[[Path], contextlib.AbstractContextManager[str]], cause: str, tmp_path: Path
) -> None:
    with peer(tmp_path) as url:
        run = load(url, tmp_path / "run", "--workers", "1")
    assert run.returncode == 3, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    error_lines = [line for line in run.stderr.splitlines() if "no session was admitted" in line]
    assert len(error_lines) == 1 and f"({cause} " in error_lines[0]
    assert "not admitted: " in run.stdout and f"  {cause}: " in run.stdout
    assert "SLO FAIL rejection_rate<=0.01" in run.stdout
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    admission = report["admission"]
    assert admission["attempts"] >= 1
    assert admission["causes"] == {cause: admission["attempts"]}
    assert admission["failed"] == admission["attempts"]
    assert report["scalars"]["rejection_rate"] == 1.0
    assert report["scalars"]["failure_rate"] == 1.0
    assert report["scalars"]["capacity_rejection_rate"] == 0.0
    assert [s["passed"] for s in report["slo"]] == [False]
    sessions = [json.loads(line) for line in (tmp_path / "run" / "sessions.jsonl").open()]
    assert {s["cause"] for s in sessions if s["admission"] != "unfinished"} == {cause}


def test_causes_from_worker_processes_are_merged(tmp_path: Path) -> None:
    with drop_after_upgrade_server() as url:
        run = load(url, tmp_path / "run", "--workers", "2", "--json")
    assert run.returncode == 3, run.stderr
    report = json.loads(run.stdout)  # --json: stdout is exactly one document
    admission = report["admission"]
    assert admission["causes"] == {"closed_after_upgrade": admission["attempts"]}
    assert len(report["workers"]) == 2 and admission["attempts"] >= 2
    assert "closed_after_upgrade" in admission["cause_examples"]


async def _never_created(conn: object) -> None:
    await conn.wait_closed()  # type: ignore[attr-defined]  # upgrades, then says nothing


def test_opens_the_stop_abandons_are_not_failed_attempts(tmp_path: Path) -> None:
    """An open still waiting for ``session.created`` when the run stops got no answer either
    way: it is counted apart ("unfinished"), never as a timed-out attempt, so it cannot raise
    ``failure_rate`` at the end of a healthy run. A server where every open hangs still exits 3,
    and says the attempts were still opening."""
    with background_ws_server(_never_created) as url:
        run = load(url, tmp_path / "run", "--workers", "1")  # 2 s run, 30 s open timeout
    assert run.returncode == 3, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    line = next(x for x in run.stderr.splitlines() if "no session was admitted" in x)
    assert "still opening when the run stopped (handshake_timeout " in line
    assert "still opening when the run stopped: " in run.stdout
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    admission = report["admission"]
    assert admission["attempts"] == 0 and admission["causes"] == {}
    assert admission["unfinished"]["count"] >= 2
    assert admission["unfinished"]["causes"] == {
        "handshake_timeout": admission["unfinished"]["count"]
    }
    assert "gave up after" in admission["unfinished"]["cause_examples"]["handshake_timeout"]
    assert report["scalars"]["failure_rate"] is None
    sessions = [json.loads(line) for line in (tmp_path / "run" / "sessions.jsonl").open()]
    assert {s["admission"] for s in sessions} == {"unfinished"}
