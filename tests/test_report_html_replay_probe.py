"""The replay page and the probe page: written by ``replay --out`` and ``probe --out`` (also
on Ctrl-C), re-rendered by ``duplexctl report DIR --html FILE``, opened in headless Chromium
with the network blocked (tests/support/browser.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.browser import Opened, needs_browser, open_page, screenshot_path
from support.commands import ROOT, ctrl_c_when, duplexctl_cmd, serve

pytestmark = pytest.mark.realtime

SCENARIOS = ROOT / "duplexctl" / "recordings"


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _clean(seen: Opened) -> None:
    assert seen.problems() == []
    assert seen.charts_rendered == seen.charts
    if seen.charts:
        assert seen.svg_marks > 0


@pytest.fixture(scope="module")
def barge_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replay") / "run"
    done = _run("replay", str(SCENARIOS / "barge_in.toml"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


AUDIO_AND_TURNS = """(async () => {
  const a = document.getElementById('conversation');
  if (a.readyState < 1) await new Promise((ok, bad) => {
    a.addEventListener('loadedmetadata', ok); a.addEventListener('error', bad); a.load(); });
  return {duration: a.duration, inline: a.src.startsWith('data:audio/flac;base64,'),
          turns: document.querySelectorAll('h3[id^=turn-]').length,
          held: document.querySelectorAll('table.expectations tr.pass').length,
          verdict: document.getElementById('verdict').textContent,
          rules: document.querySelectorAll('#timeline svg .mark-rule.role-mark line').length};
})()"""


@pytest.mark.slow
@needs_browser
def test_replay_out_page_has_the_timeline_turns_and_playable_audio(
    barge_in: Path, tmp_path: Path
) -> None:
    html = barge_in / "report.html"
    text = html.read_text()
    for mark in (
        "barge-in (speech started)",
        "first audio",
        "truncate",
        "commit" if "commit" in text else "speech stopped",
    ):
        assert mark in text  # the events marked on the timeline
    seen = open_page(html, screenshot_path(tmp_path, "replay"), evaluate=AUDIO_AND_TURNS)
    _clean(seen)
    assert seen.charts == 1
    report = json.loads((barge_in / "report.json").read_text())
    facts = seen.facts
    assert facts["inline"] and facts["duration"] > 5  # the conversation plays from the page
    assert facts["turns"] == len(report["turns"]) == 2
    assert facts["held"] == report["expectations"]["checked"]
    assert facts["verdict"] == "PASS"
    assert facts["rules"] >= 8  # speech, created, first audio, barge-in, truncate, done …


@needs_browser
def test_report_html_renders_a_saved_replay(barge_in: Path, tmp_path: Path) -> None:
    out = tmp_path / "replay.html"
    done = _run("report", str(barge_in), "--html", str(out))
    assert done.returncode == 0, done.stderr
    _clean(open_page(out, screenshot_path(tmp_path, "replay-rerendered")))


@pytest.mark.slow
@needs_browser
def test_replay_ctrl_c_leaves_a_page(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        duplexctl_cmd("replay", str(SCENARIOS / "two_turns.toml"), "--out", str(out)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    events = out / "events.jsonl"

    def answering() -> bool:  # stopped while the first answer is playing
        return events.exists() and "response.output_audio.delta" in events.read_text()

    assert ctrl_c_when(proc, answering) == 130
    seen = open_page(
        out / "report.html",
        screenshot_path(tmp_path, "replay-interrupted"),
        evaluate="({verdict: document.getElementById('verdict').textContent,"
        " rules: document.querySelectorAll('#timeline svg .mark-rule.role-mark line').length})",
    )
    _clean(seen)
    assert seen.facts["verdict"] == "INTERRUPTED"
    assert seen.facts["rules"] >= 2  # what happened before the stop is on the timeline


@pytest.mark.slow
@needs_browser
def test_probe_out_failure_shows_its_evidence(tmp_path: Path) -> None:
    out = tmp_path / "probe"
    with serve("--fault", "orphan-response") as (url, _proc):
        done = _run(
            "probe",
            "--url",
            url,
            "--only",
            "handshake",
            "--only",
            "responses",
            "--out",
            str(out),
            timeout=180,
        )
    assert done.returncode == 1, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["kind"] == "duplexctl.probe" and not report.get("partial")
    seen = open_page(
        out / "report.html",
        screenshot_path(tmp_path, "probe-fail"),
        evaluate="({verdict: document.getElementById('verdict').textContent,"
        " failed: Array.from(document.querySelectorAll('#verdicts tr.fail a')).map(a => a.textContent),"
        " evidence: document.querySelectorAll('table.evidence tr').length - 1,"
        " errors: document.querySelectorAll('table.evidence tr.fail').length})",
    )
    _clean(seen)
    assert seen.charts == 1  # the failure's evidence timeline
    (failed,) = [r for r in report["results"] if r["verdict"] == "fail"]
    assert seen.facts["verdict"] == "FAIL" and seen.facts["failed"] == ["responses"]
    assert seen.facts["evidence"] == len(failed["evidence"]) > 0
    assert seen.facts["errors"] >= 1  # the injected runtime_append_failed frame stands out


@needs_browser
def test_probe_out_pass_page_has_no_runtime_and_no_errors(tmp_path: Path) -> None:
    out = tmp_path / "probe"
    done = _run("probe", "--only", "handshake", "--out", str(out))
    assert done.returncode == 0, done.stderr
    html = out / "report.html"
    assert html.stat().st_size < 100_000  # no chart, so no Vega runtime inlined
    seen = open_page(
        html,
        screenshot_path(tmp_path, "probe-pass"),
        evaluate="document.getElementById('verdict').textContent",
    )
    _clean(seen)
    assert seen.facts == "PASS"


def test_probe_out_is_checked_like_every_out(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("not a run")
    done = _run("probe", "--only", "handshake", "--out", str(busy))
    assert (
        done.returncode == 2
        and "--out" in done.stderr
        and done.stderr.count("duplexctl: error") == 1
    )
