"""``replay`` runs a suite, and says what the embedded model lacks (issue 29, item 7).

``replay a.toml b.toml …`` or a directory runs each scenario in turn, prints one table and
writes ``--out DIR/index.html`` linking each scenario's page, exit 1 when any failed; a
scenario states the model behaviour it needs (``needs_behaviour``), ``--server-behaviour``
turns it on in the embedded server (``replay`` and ``load``), and a failure against the
default model says that model lacks it and how to turn it on. A backchannel is the model's
response, not a user turn; a stop latency larger than configured says why.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from support.browser import chromium_missing, open_page, screenshot_path
from support.commands import ROOT, SHORT, duplexctl_cmd

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(300)]
RECORDINGS = ROOT / "duplexctl" / "recordings"
COUNT = RECORDINGS / "count.wav"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd(*args), capture_output=True, text=True, timeout=240, cwd=ROOT
    )


def _scenarios(folder: Path) -> Path:
    """A suite of two: a short turn that passes, and one long turn that expects a
    backchannel (which the default reference model never says)."""
    folder.mkdir()
    (folder / "a_short.toml").write_text(
        f'name = "short"\nneeds_behaviour = ""\n[[step]]\naction = "say"\nfile = "{SHORT}"\n'
        '[[step]]\naction = "wait"\nexpect = { outcome = "spoke" }\n'
    )
    (folder / "b_listens.toml").write_text(
        'name = "listens"\nneeds_behaviour = "backchannel-rate=120"\n'
        '[settings]\nturn_detection = "server_vad"\nvad_silence_ms = 1000\n'
        f'[[step]]\naction = "say"\nfile = "{COUNT}"\n[[step]]\naction = "wait"\n'
        '[expect]\nbackchannels = ">=1"\n'
    )
    return folder


@pytest.fixture(scope="module")
def suite(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    tmp = tmp_path_factory.mktemp("suite")
    folder = _scenarios(tmp / "scenarios")
    out = tmp / "out"
    return _run("replay", str(folder), "--out", str(out), "--no-server-metrics"), out


def test_a_directory_runs_as_a_suite_with_one_table(
    suite: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, out = suite
    assert done.returncode == 1, done.stdout + done.stderr  # one scenario failed
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "scenario",
        "verdict",
        "turns",
        "ttfa",
        "p50",
        "expectations",
        "why",
    ]
    short = next(x for x in lines if x.startswith("short "))
    listens = next(x for x in lines if x.startswith("listens "))
    assert short.split()[1] == "PASS" and "1/1 held" in short
    assert listens.split()[1] == "FAIL" and "0/1 held" in listens
    assert "the run: backchannels expected >=1, was 0" in listens
    # the default model lacks the behaviour: the failure says so, and how to turn it on
    assert (
        "the embedded reference model has no backchannels by default; run with "
        "--server-behaviour backchannel-rate=120 to turn it on" in listens
    )
    assert lines[-1] == "suite: FAIL: 1 of 2 scenarios passed"
    assert "check failed: 1 scenario(s) failed: listens" in done.stderr
    doc = json.loads((out / "suite.json").read_text())
    assert [r["scenario"] for r in doc["scenarios"]] == ["short", "listens"]
    for row in doc["scenarios"]:
        assert (out / row["page"]).is_file() and row["page"] == f"{row['scenario']}/report.html"


@pytest.mark.browser
@pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))
def test_the_index_page_links_every_scenarios_page(
    suite: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    _done, out = suite
    seen = open_page(
        out / "index.html",
        screenshot_path(tmp_path, "suite-index"),
        evaluate="({verdict: document.getElementById('verdict').innerText,"
        " summary: document.getElementById('suite-summary').innerText,"
        " rows: Array.from(document.querySelectorAll('#suite-table tr')).slice(1)"
        ".map(r => [r.querySelector('a').getAttribute('href'), r.cells[1].innerText,"
        " r.cells[5].innerText])})",
    )
    assert seen.problems() == []
    assert seen.facts["verdict"] == "FAIL" and seen.facts["summary"] == "1 of 2 scenarios passed"
    (short, listens) = seen.facts["rows"]
    assert short[:2] == ["short/report.html", "PASS"]
    assert listens[:2] == ["listens/report.html", "FAIL"]
    assert "--server-behaviour backchannel-rate=120" in listens[2]
    for href, _verdict, _why in seen.facts["rows"]:
        assert (out / href).is_file()
    # the failing scenario's own page says the same, as text
    page = open_page(
        out / "listens" / "report.html",
        screenshot_path(tmp_path, "suite-listens"),
        evaluate="Array.from(document.querySelectorAll('#expectation-failures li')).map(e => e.innerText)",
    )
    assert page.problems() == []
    assert any("has no backchannels by default" in x for x in page.facts)


def test_server_behaviour_turns_it_on_and_a_backchannel_is_no_user_turn(tmp_path: Path) -> None:
    folder = _scenarios(tmp_path / "scenarios")
    out = tmp_path / "run"
    done = _run(
        "replay", str(folder / "b_listens.toml"), "--server-behaviour", "backchannel-rate=120",
        "--out", str(out), "--no-server-metrics",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["behaviour"]["backchannels"] >= 1
    assert len(report["turns"]) == 1  # the user's one turn; the "mm-hm"s are not turns
    assert report["backchannel_responses"] and all(
        b["audio_ms"] == 400 for b in report["backchannel_responses"]
    )
    turn_lines = [x for x in done.stdout.splitlines() if x.startswith("turn ")]
    assert len(turn_lines) == 1 and "source=count.wav" in turn_lines[0]
    assert "backchannel responses (the model's, not user turns): " in done.stdout
    assert [x for x in done.stderr.splitlines() if x.startswith("duplexctl: turn ")] == [
        x for x in done.stderr.splitlines() if x.startswith("duplexctl: turn 1:")
    ]


def test_load_takes_the_server_behaviour_too(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _run(
        "load", str(COUNT), "--sessions", "1", "--duration", "9s", "--workers", "1", "--plain",
        "--turn-detection", "server_vad", "--server-behaviour", "backchannel-rate=120",
        "--no-server-metrics", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert "'backchannel_rate': 120.0" in report["embedded_server"]["behaviour"]
    assert report["behaviour"]["backchannels"] >= 1
    turns = [json.loads(x) for x in (out / "turns.jsonl").read_text().splitlines()]
    assert report["turns"]["count"] == len(turns) == 1  # no backchannel counted as a turn
    assert turns[0]["source"] == "count.wav"


def test_a_stop_latency_larger_than_configured_says_why(tmp_path: Path) -> None:
    """300 ms configured; the answer's 1000 ms units already sent play out, so the heard
    stop latency is larger, and the report says so."""
    out = tmp_path / "run"
    done = _run(
        "replay", str(RECORDINGS / "interruption.toml"), "--server-behaviour",
        "stop-latency-ms=300", "--out", str(out), "--no-server-metrics",
    )  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    measured = report["behaviour"]["stop_latency_ms"]
    assert measured > 300 + 250, report["behaviour"]
    note = report["behaviour"]["notes"]["stop_latency_ms"]
    assert note.startswith(f"{measured:.0f} ms against the embedded model's configured 300 ms")
    assert "1000 ms output units (chunk_ms)" in note
    assert f"  stop_latency_ms: {note}" in done.stdout.splitlines()
    assert done.returncode == 1  # the scenario's stop_latency_ms < 400 failed, as it should


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["replay", str(RECORDINGS / "cancel.toml"), "--server-behaviour", "bogus=1"],
            "--server-behaviour: unknown behaviour 'bogus'",
        ),
        (
            ["replay", str(RECORDINGS / "cancel.toml"), SHORT, str(RECORDINGS / "pause.toml")],
            "a suite takes scenario files only",
        ),
        (["replay", str(ROOT / "docs")], "no .toml file in it"),
    ],
)
def test_bad_suite_input_is_one_line_exit_2(args: list[str], says: str) -> None:
    done = _run(*args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr


def test_every_bundled_scenario_states_the_behaviour_it_needs() -> None:
    for path in sorted(RECORDINGS.glob("*.toml")):
        doc = tomllib.loads(path.read_text())
        assert "needs_behaviour" in doc, path.name
    assert tomllib.loads((RECORDINGS / "backchannel.toml").read_text())["needs_behaviour"]
