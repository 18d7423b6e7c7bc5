"""The evidence vLLM-Omni asks for, recovered from ``duplexctl serve``'s known truths
(docs/metrics.md "Audio continuity", "The joining session", "Level sweep"): a realtime factor
above 1 gives underruns of a computable size; busy GPU slots make the joining session wait
longer as N grows; a sweep's per-level table is what ``duplexctl report`` rebuilds from the
saved tallies, merged exactly across ``--workers``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.browser import needs_browser, open_page, screenshot_path
from support.commands import ROOT, SHORT, duplexctl_cmd, serve

from duplexctl import __version__
from duplexctl.report.load_report import tally_of

pytestmark = pytest.mark.realtime


def load(url: str, out: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd("load", SHORT, "--url", url, "--out", str(out), "--plain", *args),
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.timing
@pytest.mark.slow
def test_a_realtime_factor_above_1_gives_the_computed_underrun_and_ok_rates(
    tmp_path: Path,
) -> None:
    """R = 1.5, 100 ms units, 1.4 s replies: unit k leaves at k × 150 ms, so vLLM-Omni's worst
    underrun is (14 − 1) × 100 × 0.5 = 650 ms. The thresholds are set 250 ms and more away
    from it (not OK at 100 or 400 ms, OK at 1000 ms): a loopback hiccup of a busy 2-core host
    (100 ms has been seen) moves one response's value, never its verdict. Half the answers are
    cancelled 500 ms after their first audio with a 600 ms prebuffer: cut before any of it
    played, they are not measured — and never OK."""
    out = tmp_path / "run"
    with serve("--reply-seconds", "1.4", "--chunk-ms", "100", "--realtime-factor", "1.5") as (
        url,
        _,
    ):
        done = load(
            url, out, "--sessions", "2", "--duration", "10s", "--workers", "1",
            "--prebuffer-ms", "600", "--mix", "cancel=0.5", "--seed", "3",
            "--continuity-thresholds", "100,400,1000",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    cont = report["continuity"]
    turns = [t for t in lines_of(out / "turns.jsonl") if t["phase"] != "warmup"]
    measured = [t for t in turns if t["continuity"]["measured"]]
    cut = [t for t in turns if not t["continuity"]["measured"]]
    assert len(measured) >= 2 and len(cut) >= 1
    values = sorted(t["continuity"]["audio_underrun_ms"] for t in measured)
    assert 590 <= values[(len(values) - 1) // 2] <= 710, values  # the known truth: 650 ms
    for t in cut:  # cancelled before its first audio played: apart, never OK
        assert t["outcome"] == "cancelled" and t["continuity"]["ok"] is None
        assert t["continuity"]["not_measured"] == "cut_before_playing"
    assert cont["measured"] == len(measured) and cont["responses"] == len(turns)
    assert cont["not_measured"] == {"cut_before_playing": len(cut)}
    assert cont["ok_rate"] == {"100": 0.0, "400": 0.0, "1000": 1.0}
    assert report["scalars"]["continuity_ok_rate_1000"] == 1.0
    printed = done.stdout
    assert (
        f"continuity OK at 100 ms 0%, 400 ms 0%, 1000 ms 100% of {len(measured)} measured "
        f"responses; {len(cut)} not measured (cut before playing {len(cut)}), counted in no rate"
    ) in printed
    # the server's own, beside them: vLLM-Omni's families on the units' release times
    server = report["server_metrics"]["audio"]
    assert server["audio_underrun_s"]["count"] >= len(measured)
    assert 0.1 <= server["audio_underrun_s"]["mean"] <= 0.7  # cut replies have fewer units
    assert "100" in server["continuity_ok"]
    assert "the server's own (vllm_omni:*): audio_underrun_s" in printed
    # the pinned environment
    env = report["environment"]
    assert env["client"]["duplexctl"] == __version__ and "load" in env["client"]["command"]
    assert env["host_at_start"]["cpu_count"] == os.cpu_count()
    assert env["server"]["models"]["answer"]["data"][0]["id"] == "duplexctl/simulated-duplex"
    info = env["server"]["info_metrics"]["families"]
    assert {"name": "duplexctl:build_info", "labels": {"version": __version__}} in [
        {"name": f["name"], "labels": f["labels"]} for f in info
    ]
    assert f"duplexctl:build_info{{version={__version__}}}" in printed


@pytest.mark.timing
@pytest.mark.slow
@needs_browser
def test_a_sweep_joins_each_level_rebuilds_exactly_and_leads_the_page(tmp_path: Path) -> None:
    """One GPU slot, 80 ms per 100 ms unit: with 4 sessions talking the slot is busy, so the
    joining session's first unit waits: its ttfa rises with N. Two workers share each level;
    the table is what `report` rebuilds from the saved tallies, and every count in it is the
    two workers' raw lines added up."""
    out = tmp_path / "run"
    with serve(
        "--reply-seconds", "1", "--chunk-ms", "100", "--gpu-slots", "1",
        "--unit-compute-ms", "80", "--max-sessions", "8",
    ) as (url, _):  # fmt: skip
        done = load(
            url, out, "--sweep", "1,4", "--step-duration", "18s", "--workers", "2",
            "--join-samples", "4", "--stagger", "--junit", str(tmp_path / "junit.xml"),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    sweep = report["sweep"]
    one, four = sweep["levels"]
    # the summary leads with the table
    printed = done.stdout.splitlines()  # the live lines, then the final summary
    at = next(i for i, line in enumerate(printed) if line.startswith("sweep: "))
    assert printed[at].startswith("sweep: 2 levels of 18 s (1, 4 sessions); the N = 1 baseline")
    assert printed[at + 2].lstrip().startswith("1 sessions: pass | ttfa p50")
    assert printed[at + 3].lstrip().startswith("4 sessions: pass | ttfa p50")
    assert not any(line.startswith("[") for line in printed[at:])  # the summary's first
    # the joining session waits longer with 4 sessions keeping the slot busy
    j1, j4 = one["join"]["join_ttfa_ms"], four["join"]["join_ttfa_ms"]
    assert j1["n"] >= 2 and j4["n"] >= 2
    assert j4["p50"] > j1["p50"] + 50, (j1, j4)
    assert sweep["baseline"]["ttfa_ms"] == one["ttfa_ms"]
    # behaviour against load: every level's response gap, from its sessions' conversations
    assert one["behaviour"]["response_gap_ms"]["n"] and four["behaviour"]["response_gap_ms"]["n"]
    # duplexctl report rebuilds the very table from the saved tallies
    again = subprocess.run(
        duplexctl_cmd("report", str(out), "--json"),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    rebuilt = json.loads(again.stdout)["sweep"]
    assert rebuilt["levels"] == sweep["levels"] and rebuilt["baseline"] == sweep["baseline"]
    # merged exactly across the workers: each level's counts are its raw lines added up
    turns, sessions = lines_of(out / "turns.jsonl"), lines_of(out / "sessions.jsonl")
    for data, row in zip(sweep["data"], sweep["levels"], strict=True):
        level, tries = data["level"], len(data["runs"])
        mine = [t for t in turns if t["level"] == level and t["try"] == tries]
        users = [t for t in mine if not t.get("join")]
        assert {t["worker"] for t in users} == ({0, 1} if level > 1 else {0})
        counts = tally_of({"recorder": data["recorder"]}).counts
        measured = [t for t in users if t["continuity"]["measured"]]
        assert counts["continuity.measured"] == len(measured) == row["continuity"]["measured"]
        for t in ("50", "100", "200"):
            ok = sum(bool(u["continuity"]["ok"][t]) for u in measured)
            assert counts[f"continuity.ok.{t}"] == ok
        joined = [t for t in mine if t.get("join") and "ttfa_ms" in t["figures"]]
        assert row["join"]["join_ttfa_ms"]["n"] == len(joined) == counts["join.answered"]
        assert {t["worker"] for t in joined} == {0}  # one joining session at a time
    # --stagger: the 4 users' first sessions began at 0, 1/4, 2/4, 3/4 of a pass, across
    # both workers
    firsts = [s for s in sessions if s.get("level") == 4 and s["index"] >= 0 and s["attempt"] == 1]
    assert sorted(s["stagger"] for s in firsts) == [0.0, 0.25, 0.5, 0.75]
    assert Counter(s["worker"] for s in firsts) == {0: 2, 1: 2}
    # JUnit: a case per level
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="level 1 sessions" classname="duplexctl.load.sweep"' in junit
    assert 'name="level 4 sessions" classname="duplexctl.load.sweep"' in junit
    # the page leads with the sweep: its table, then its curves
    seen = open_page(
        out / "report.html",
        screenshot_path(tmp_path, "load-sweep"),
        evaluate="({first: document.querySelector('main h2').id,"
        " rows: document.querySelectorAll('#sweep-table tr.pass, #sweep-table tr.fail').length,"
        " curves: !!document.querySelector('#sweep-curves[data-rendered] svg'),"
        " continuity: !!document.getElementById('continuity-table'),"
        " environment: (document.getElementById('environment-table') || {}).textContent})",
    )
    assert seen.problems() == []
    assert seen.facts["first"] == "sweep-heading"
    assert seen.facts["rows"] == 2 and seen.facts["curves"] and seen.facts["continuity"]
    assert "duplexctl/simulated-duplex" in seen.facts["environment"]


@pytest.mark.slow
@needs_browser
def test_a_frame_lane_that_loses_every_4th_packet_shows_that_deficit_exactly(
    tmp_path: Path,
) -> None:
    """``serve --model-profile frame --fault drop-output-frame-every=4`` never sends the
    4th, 8th … packet of each session: every call ends exactly ``sent // 4`` frames short
    (the packets still in flight at the end are waited for, so none is counted lost), the
    counts merge exactly across two workers and ``report`` rebuilds them; the summary line,
    the SLO and the page say it."""
    out = tmp_path / "run"
    with serve(
        "--model-profile", "frame", "--max-sessions", "2",
        "--fault", "drop-output-frame-every=4",
    ) as (url, _):  # fmt: skip
        done = load(
            url, out, "--auto-response", "--sessions", "2", "--count", "4", "--workers", "2",
            "--no-server-metrics", "--warmup", "0s", "--slo", "frame_coverage>=0.9",
        )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the SLO failed, nothing else
    sessions = [s for s in lines_of(out / "sessions.jsonl") if s["admission"] == "admitted"]
    assert len(sessions) == 4 and {s["worker"] for s in sessions} == {0, 1}
    for s in sessions:
        f = s["frames"]
        assert f["frame_ms"] == 80 and f["frames_sent"] > 20, f
        assert f["frame_deficit"] == f["frames_sent"] // 4, f
        assert f["frames_received"] == f["frames_sent"] - f["frames_sent"] // 4
        assert f["frames_inserted"] == 0
    report = json.loads((out / "report.json").read_text())
    frames = report["frames"]
    sent = sum(s["frames"]["frames_sent"] for s in sessions)
    received = sum(s["frames"]["frames_received"] for s in sessions)
    assert (frames["sessions"], frames["frames_sent"], frames["frames_received"]) == (
        4,
        sent,
        received,
    )
    assert frames["frame_deficit"] == sent - received and frames["sessions_with_deficit"] == 4
    assert frames["coverage"] == pytest.approx(received / sent, abs=1e-6)
    deficits = [s["frames"]["frame_deficit"] for s in sessions]
    assert frames["frame_deficit_max"] == max(deficits)
    assert frames["sessions_by_deficit"] == {
        str(d): n for d, n in sorted(Counter(deficits).items())
    }
    # what a reader sees: the summary's line and the SLO's verdict with the measured value
    printed = done.stdout
    assert f"frames (frame-locked lane): {sent} sent, {received} received, coverage " in printed
    assert f"deficit at end of call {sent - received} frames in 4 of 4 sessions" in printed
    assert "SLO FAIL frame_coverage>=0.9: 0.7" in printed
    # report rebuilds the same section from the saved tallies
    again = subprocess.run(
        duplexctl_cmd("report", str(out), "--json"),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert again.returncode == 1, again.stderr  # the run's SLO, judged again
    assert json.loads(again.stdout)["frames"] == frames
    seen = open_page(
        out / "report.html",
        screenshot_path(tmp_path, "load-frames"),
        evaluate="(document.getElementById('frames-table') || {}).innerText",
    )
    assert seen.problems() == []
    text = seen.facts
    assert f"{sent} / {received}" in text and "4 of 4 sessions short" in text


def test_a_lane_that_is_not_frame_locked_has_no_frame_figures(tmp_path: Path) -> None:
    """No section, no summary line, and an SLO on frame coverage is not met: nothing was
    measured, which must not read as "no frame lost"."""
    out = tmp_path / "run"
    with serve() as (url, _):
        done = load(
            url, out, "--sessions", "1", "--count", "1", "--no-server-metrics",
            "--slo", "frame_coverage>=0.9",
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["frames"] is None
    assert all(s["frames"] is None for s in lines_of(out / "sessions.jsonl"))
    assert "frames (" not in done.stdout
    assert "SLO FAIL frame_coverage>=0.9: no samples" in done.stdout
