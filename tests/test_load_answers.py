"""A load run answers its question first, and a run that measured nothing says so (issue 29).

Reproductions: a ``--find-capacity`` run against ``serve --max-sessions 3`` whose header,
tiles, summary and SLO lines described only its last step; a ``--step-duration`` shorter
than one turn that found "capacity: none"; a 3 s run that ended with a quiet "turns: 0".
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.browser import chromium_missing, open_page, screenshot_path
from support.commands import ROOT, SHORT, duplexctl_cmd, serve

pytestmark = [pytest.mark.timeout(300), pytest.mark.realtime]


def _load(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd("load", SHORT, "--workers", "1", "--plain", *args),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def search(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A capacity search against a server that admits 3 sessions (a 2 s disconnect grace,
    so the slot release after a drop is measured in seconds, not 30)."""
    out = tmp_path_factory.mktemp("search") / "run"
    serve_args = ("--max-sessions", "3", "--reply-seconds", "0.5", "--disconnect-grace-s", "2")
    with serve(*serve_args) as (url, _proc):
        done = _load(
            "--url", url, "--find-capacity", "--step-duration", "3s", "--max-level", "8",
            "--slo", "ttfa_p95<=5s", "--out", str(out),
        )  # fmt: skip
    return done, out


@pytest.mark.timing
def test_the_search_leads_with_its_answer(
    search: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, out = search
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    lines = done.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("capacity: "))
    assert lines[first].startswith("capacity: holds 3 sessions with every SLO met (ttfa_p95<=5s")
    assert "first failure at 4 sessions: " in lines[first] and "capacity rejections" in lines[first]
    assert lines[first].endswith("the server advertised limit 3")
    # before the step's own figures (and said to be the step's)
    figures = next(i for i, line in enumerate(lines) if line.startswith("ttfa_ms: "))
    assert first < figures
    assert "the step at 3 sessions (every figure below is that step's own):" in lines
    report = json.loads((out / "report.json").read_text())
    cap = report["capacity_search"]
    assert cap["largest_pass"] == 3 and cap["first_fail"] == 4 and cap["advertised_limit"] == 3
    assert cap["answer"] == lines[first].removeprefix("capacity: ")
    totals = cap["totals"]
    steps = cap["steps"]
    assert totals["wall_s"] >= sum(s["duration_s"] for s in steps)  # the whole search
    assert totals["attempts"] == sum(
        sum(s["admission"].values()) + s["admitted"] for s in steps
    ) or totals["runs"] > len(steps)
    assert totals["by_kind"]["rejected_capacity"] >= 1
    search_line = next(line for line in lines if line.startswith("capacity search: "))
    assert f"{len(steps)} steps" in search_line and f"{totals['attempts']} attempts" in search_line
    # the slot release: announced with its bound, measured, in the summary
    assert "each waits at most 45 s; --no-slot-release skips this" in done.stderr
    clean = next(line for line in lines if line.startswith("slot release after clean close: "))
    drop = next(line for line in lines if line.startswith("slot release after abrupt drop: "))
    assert clean and drop and report["slot_release"]["abrupt_drop"]["slot_release_ms"] > 1000
    slo = [line for line in lines if line.startswith("SLO ")]
    assert slo == [line for line in slo if " at 3 sessions: " in line]  # which step they judge


@pytest.mark.timing
@pytest.mark.browser
@pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))
def test_the_search_page_opens_with_the_answer(
    search: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    _done, out = search
    seen = open_page(
        out / "report.html",
        screenshot_path(tmp_path, "capacity-answer"),
        evaluate="""({
          answer: document.getElementById('answer').innerText,
          answerTop: document.getElementById('answer').getBoundingClientRect().top,
          sub: document.querySelector('header .sub').innerText,
          cards: Array.from(document.querySelectorAll('#search-cards .card'))
            .map(c => c.innerText.replace(/\\n/g, ' | ')),
          capacityTop: document.getElementById('capacity-heading').getBoundingClientRect().top,
          latencyTop: Array.from(document.querySelectorAll('h2'))
            .find(h => h.innerText.startsWith('Latency')).getBoundingClientRect().top,
          sloHeading: Array.from(document.querySelectorAll('h2'))
            .find(h => h.innerText.startsWith('Service level')).innerText,
        })""",
    )
    assert seen.problems() == []
    facts = seen.facts
    assert facts["answer"].startswith("holds 3 sessions with every SLO met")
    assert facts["answer"].endswith("the server advertised limit 3")
    assert facts["answerTop"] < 150  # in the header, not 3,400 px down
    assert "capacity search" in facts["sub"] and "steps" in facts["sub"]
    cards = facts["cards"]
    assert "3 | holds (sessions, every criterion met)" in cards
    assert "4 | first failure at" in cards and "3 | advertised limit" in cards
    assert any("the whole search" in c for c in cards)
    assert any(c.endswith("slot release after a clean close") and "ms" in c for c in cards)
    assert any("slot release after a drop" in c and "ms" in c for c in cards)
    assert facts["capacityTop"] < facts["latencyTop"]
    assert facts["sloHeading"] == "Service level objectives at 3 sessions"


@pytest.mark.timing  # a capacity step fails as invalid_pacing when the client cannot keep time
def test_a_step_too_short_to_judge_runs_again_longer(tmp_path: Path) -> None:
    """A 1 s step completes no turn of the short clip (about 1.8 s with a 0.5 s answer): it
    is run again for 2 s, judged, and the search finds the level instead of "none"."""
    done = _load(
        "--find-capacity", "--step-duration", "1s", "--max-level", "1", "--no-slot-release",
        "--slo", "ttfa_p95<=5s", "--server-option", "reply_seconds=0.5",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert "--step-duration 1s is shorter than one turn of these inputs" in done.stderr
    assert "capacity step 1 sessions: no turn completed in 1 s; running it again for 2 s" in (
        done.stderr
    )
    cap = json.loads((tmp_path / "run" / "report.json").read_text())["capacity_search"]
    (step,) = cap["steps"]
    assert step["passed"] and step["duration_s"] == 2 and step["turns"] >= 1
    assert [r["duration_s"] for r in step["runs"]] == [1, 2] and step["runs"][0]["turns"] == 0
    assert cap["largest_pass"] == 1 and cap["totals"]["runs"] == 2
    assert "slot release: not measured (--no-slot-release)" in done.stdout
    if chromium_missing() is None:  # one step: every panel's single point is drawn, from 0
        seen = open_page(
            tmp_path / "run" / "report.html",
            screenshot_path(tmp_path, "one-step"),
            evaluate="""Array.from(document.querySelectorAll('#server-0-steps svg g.mark-group.role-scope'))
              .filter(g => g.querySelector('.role-title-text'))
              .map(g => ({title: g.querySelector('.role-title-text').textContent,
                points: g.querySelectorAll('.mark-symbol path').length,
                y0: (g.querySelector('.role-axis-label text') || {}).textContent}))""",
        )
        assert seen.problems() == [] and seen.charts_rendered == seen.charts
        panels = {p["title"]: p for p in seen.facts}
        running = panels["server: requests running and waiting (max) per step"]
        assert running["points"] >= 2  # running and waiting: one point each, visible
        assert all(p["points"] >= 1 for p in panels.values()), panels


def test_a_run_that_completed_no_turn_says_so_and_exits_1(tmp_path: Path) -> None:
    done = _load(
        "--sessions", "1", "--duration", "1s", "--no-server-metrics", "--out", str(tmp_path / "run")
    )
    assert done.returncode == 1, done.stdout + done.stderr
    warned = [x for x in done.stderr.splitlines() if "warning: --duration 1s is shorter" in x]
    assert len(warned) == 1 and "about 3.7 s" in warned[0]
    failed = [x for x in done.stderr.splitlines() if x.startswith("duplexctl: check failed")]
    assert failed == [
        "duplexctl: check failed: measured nothing: no turn completed in --duration 1 s; one "
        "turn of these inputs takes about 3.7 s (short_ack.wav speaks until 0.7 s, then about "
        "3 s for its answer): run for 8 s or more (--duration 8s)"
    ]
    turns = next(x for x in done.stdout.splitlines() if x.startswith("turns: "))
    assert turns.startswith("turns: 0 (none) — measured nothing")
    if chromium_missing() is None:
        seen = open_page(
            tmp_path / "run" / "report.html",
            screenshot_path(tmp_path, "measured-nothing"),
            evaluate="({verdict: document.getElementById('verdict').innerText,"
            " flags: document.getElementById('flags').innerText})",
        )
        assert seen.facts["verdict"] == "FAIL" and "measured nothing" in seen.facts["flags"]


def test_the_offered_load_is_stated_and_a_client_cap_is_the_clients(tmp_path: Path) -> None:
    """Open loop at 4 sessions/s with --max-concurrency 3: the cap is reached at once, so the
    observed capacity (3) is the client's limit — said so in the summary, the report, the
    live view and the page — and the arrivals that waited for it are counted."""
    out = tmp_path / "run"
    done = _load(
        "--rate", "4", "--arrival", "constant", "--max-concurrency", "3", "--duration", "5s",
        "--no-server-metrics", "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    lines = done.stdout.splitlines()
    offered = next(x for x in lines if x.startswith("offered: "))
    assert offered.startswith(
        "offered: 4 new sessions/s, evenly spaced arrivals (open loop), at most 3 in flight "
        "(the client's limit, --max-concurrency); "
    )
    sessions = next(x for x in lines if x.startswith("sessions: "))
    assert (
        "observed capacity 3 = the client's limit (--max-concurrency 3), not the server's"
        in sessions
    )
    live = [x for x in lines if x.strip().startswith("offered: 4 new sessions/s, constant")]
    assert live and "in flight" in live[-1] and "of 3 (the client's limit)" in live[-1]
    report = json.loads((out / "report.json").read_text())
    section = report["admission"]["offered"]
    assert section["loop"] == "open" and section["client_limit"] == 3
    assert section["observed_is_offered"] and section["queued_on_client"] >= 1
    assert f"; {section['queued_on_client']} arrivals queued on the client for a slot" in offered
    if chromium_missing() is None:
        seen = open_page(
            out / "report.html",
            screenshot_path(tmp_path, "offered"),
            evaluate="({offered: document.getElementById('offered').innerText,"
            " observed: document.getElementById('observed-card').innerText})",
        )
        assert seen.facts["offered"] == offered
        assert (
            "the client's limit (--max-concurrency 3), not the server's capacity"
            in (seen.facts["observed"])
        )


def test_the_live_view_says_the_ramps_target_now() -> None:
    from support.loadconfig import load_config

    from duplexctl.load.dashboard import offered_now

    closed = offered_now(load_config(inputs=[SHORT], ramp="0:0,10s:20", duration_s=10).shape)
    assert closed(5.0, {}) == "ramp target now 10 of 20 sessions (closed loop)"
    opened = offered_now(
        load_config(
            inputs=[SHORT], rate=2.0, ramp="0:0,10s:4", max_concurrency=5, duration_s=9
        ).shape
    )
    assert opened(5.0, {"active": 5, "queued": 2, "queued_total": 7}) == (
        "2 new sessions/s, poisson arrivals (ramp target now) · in flight 5 of 5 (the "
        "client's limit) · queued on the client 2 now, 7 so far"
    )


def test_the_answer_line_in_each_case() -> None:
    from duplexctl.load.search import answer
    from duplexctl.report.load_report import offered_load
    from duplexctl.report.slo import evaluate, parse_slos

    cap = {
        "unit": "sessions",
        "largest_pass": 3,
        "first_fail": 4,
        "fail_reason": "4 capacity rejections",
        "advertised_limit": 3,
    }
    (met,) = evaluate(parse_slos(["rejection_rate<=0.01"]), None, {"rejection_rate": 0.0})
    assert answer(cap, [met]) == (
        "holds 3 sessions with every SLO met (rejection_rate<=0.01: 0); first failure at 4 "
        "sessions: 4 capacity rejections; the server advertised limit 3"
    )
    assert answer({**cap, "advertised_limit": None}, []).startswith(
        "holds 3 sessions with no rejection and no failed attempt (no --slo: latency not judged)"
    )
    assert answer({**cap, "largest_pass": 8, "first_fail": None}, []).endswith(
        "; no failure up to 8 sessions (the highest level tried: --max-level); the server "
        "advertised limit 3"
    )
    assert answer({**cap, "largest_pass": None, "first_fail": 1}, []).startswith(
        "holds no level: not even 1 sessions met the criteria: 4 capacity rejections"
    )
    everyone = offered_load({"sessions": 8}, observed=8, queued=0)
    assert everyone["observed_is_offered"] and everyone["loop"] == "closed"
    assert not offered_load({"sessions": 8}, observed=3, queued=0)["observed_is_offered"]
