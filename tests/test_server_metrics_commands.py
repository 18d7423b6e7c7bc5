"""``replay`` and ``probe`` scrape the server's ``/metrics`` too (issue 19, item 4)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.cli import invoke, one_line
from support.commands import HELLO, ROOT, duplexctl_cmd

pytestmark = pytest.mark.realtime


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd(*args), capture_output=True, text=True, timeout=180, cwd=ROOT
    )


@pytest.mark.slow
def test_replay_writes_the_servers_side_of_the_run(tmp_path: Path) -> None:
    out = tmp_path / "replay"
    run = _run("replay", HELLO, "--out", str(out), "--scrape-interval", "0.2")
    assert run.returncode == 0, run.stderr
    assert "server metrics (scraped every 0.2 s)" in run.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["scrape_interval_s"] == 0.2  # the options echoed like the others
    section = report["server_metrics"]
    ttft = next(h for h in section["histograms"] if h["name"] == "vllm:time_to_first_token_seconds")
    assert ttft["count"] == 1.0  # one turn, one reply: the server saw exactly that
    kinds = {json.loads(x)["kind"] for x in (out / "server_metrics.jsonl").read_text().splitlines()}
    assert {"header", "family", "sample", "scrape"} <= kinds


def test_replay_without_scraping_has_no_section(tmp_path: Path) -> None:
    out = tmp_path / "replay"
    run = _run("replay", HELLO, "--out", str(out), "--no-server-metrics")
    assert run.returncode == 0, run.stderr
    assert "server_metrics" not in json.loads((out / "report.json").read_text())
    assert not (out / "server_metrics.jsonl").exists()


def test_probe_reports_the_rejections_the_server_counted() -> None:
    run = _run("probe", "--only", "admission", "--json", "--scrape-interval", "0.2")
    assert run.returncode == 0, run.stderr
    section = json.loads(run.stdout)["server_metrics"]
    rejected = [
        c for c in section["counters"] if c["name"] == "duplexctl:duplex_admission_rejections_total"
    ]
    assert rejected and rejected[0]["delta"] >= 1.0  # the probe fills the server, then one more


def test_bad_scrape_options_are_exit_2_in_replay_and_probe() -> None:
    for args in (
        ("replay", HELLO, "--server-metrics", "not a url"),
        ("probe", "--scrape-interval", "1000"),
    ):
        done = invoke(*args)
        assert done.code == 2, done.stderr
        one_line(done.stderr)
