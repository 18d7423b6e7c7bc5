"""``duplexctl load`` against the reference server over real loopback websockets.

Every run is bounded (a few seconds of real-time audio each); assertions on time are
generous bounds only. Figures are checked against what the server's settings imply.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.loadconfig import load_config
from typer.testing import CliRunner

from duplexctl.cli import app
from duplexctl.load.config import LoadConfig, Mix
from duplexctl.load.run import run_load
from duplexctl.report.histogram import LatencyHistogram
from duplexctl.report.load_report import tally_of

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parent.parent
REC = ROOT / "recordings"
SHORT = str(REC / "short_ack.wav")
HELLO = str(REC / "hello.wav")
FAST_SERVER = {"reply_seconds": 1.0, "chunk_ms": 200}


def config(**kw: Any) -> LoadConfig:
    base: dict[str, Any] = {
        "inputs": [SHORT],
        "workers": 1,
        "live": False,
        "json_output": True,
        "server_overrides": dict(FAST_SERVER),
    }
    overrides = kw.pop("server", {})
    base.update(kw)
    base["server_overrides"].update(overrides)
    return load_config(**base)


@pytest.mark.timing
def test_closed_loop_admits_exactly_the_limit_and_counts_the_rest(capsys: Any) -> None:
    # hello.wav + a 2 s answer outlast the 3 s run: nobody closes before the stop, so the
    # first 8 are the only admissions and every later attempt hits the full server.
    result = run_load(
        config(
            inputs=[HELLO],
            sessions=12,
            duration_s=3.0,
            server={"max_sessions": 8, "reply_seconds": 2.0},
        )
    )
    report = result.report
    adm = report["admission"]
    # no turn completed: the run measured no latency and says so with exit 1; its admission
    # figures stand
    assert result.exit_code == 1 and report["turns"]["count"] == 0
    printed = capsys.readouterr()
    assert "measured nothing" in printed.err
    json.loads(printed.out)  # --json: stdout is one document
    assert adm["by_kind"]["admitted"] == 8
    assert adm["by_kind"]["rejected_capacity"] >= 4
    assert adm["attempts"] == sum(adm["by_kind"].values())
    assert adm["observed_capacity"] == 8
    assert adm["advertised_limit"] == 8
    assert set(adm["by_code"]) == {"rejected_capacity:resource_exhausted"}
    assert report["figures"]["time_to_reject_ms"]["n"] == adm["by_kind"]["rejected_capacity"]
    assert report["figures"]["time_to_reject_ms"]["p99"] < 1000  # generous
    assert report["sessions"]["closed_cleanly"] == 8
    assert report["validity"]["invalid_pacing"] is False
    assert report["scalars"]["rejection_rate"] == pytest.approx(
        adm["by_kind"]["rejected_capacity"] / adm["attempts"]
    )


@pytest.mark.timing
def test_turn_latency_matches_the_servers_injected_ttfa(tmp_path: Path) -> None:
    # commit lane: the client commits 200 ms after the end of speech, the server answers
    # ttfa_ms (300) after the commit; a 1 s reply in 200 ms chunks arrives in real time.
    result = run_load(
        config(sessions=2, duration_s=5.0, out=str(tmp_path), server={"max_sessions": 4})
    )
    figs = result.report["figures"]
    assert figs["ttfa_commit_ms"]["n"] >= 2
    assert 300 <= figs["ttfa_commit_ms"]["p50"] <= 450
    assert 500 <= figs["ttfa_ms"]["p50"] <= 650
    assert 0.9 <= figs["rtf"]["p50"] <= 1.2
    assert 150 <= figs["chunk_gap_ms"]["p50"] <= 260
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    sessions = [json.loads(x) for x in (tmp_path / "sessions.jsonl").read_text().splitlines()]
    assert len(turns) == result.report["turns"]["count"]
    assert len(sessions) == result.report["admission"]["attempts"]
    assert all(s["closed_cleanly"] for s in sessions if s["admission"] == "admitted")
    # raw records recompute the histogram exactly
    raw = LatencyHistogram()
    raw.record_many(t["figures"]["ttfa_ms"]["value"] for t in turns if "ttfa_ms" in t["figures"])
    assert raw == tally_of(result.report).headline()["ttfa_ms"]
    for name in ("report.json", "figures.csv", "slices.csv", "admission.csv"):
        assert (tmp_path / name).exists()
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["config"]["sessions"] == 2 and "api_key" not in saved["config"]
    assert saved["figures"]["ttfa_ms"]["measurement_origin"]


def test_mix_interrupts_cancels_and_resumes(tmp_path: Path) -> None:
    result = run_load(
        config(
            sessions=3,
            duration_s=6.0,
            seed=7,
            mix=Mix.parse("barge_in=0.34,cancel=0.33,drop_resume=0.33"),
            server={"max_sessions": 8, "reply_seconds": 2.0, "disconnect_grace_s": 10.0},
        )
    )
    r = result.report
    assert sum(r["interruptions"]["behaviours"].values()) >= 2
    attempted = r["interruptions"]["attempted"]
    if attempted:
        assert r["interruptions"]["cancelled"] == attempted
        assert r["figures"]["cancel_ack_ms"]["p99"] < 2000
    if r["resume"]["outcomes"]:
        assert set(r["resume"]["outcomes"]) == {"resumed"}
        assert r["resume"]["seq_gaps"] == 0
        assert r["figures"]["resume_ms"]["p50"] >= 500  # the scripted 500 ms wait
    # the mix's drops are scripted, not the server's: none unplanned, every one resumed
    drops = r["resume"]["drops"]
    assert r["resume"]["unplanned_drops"] == 0 and r["resume"]["scripted_drops"] == drops
    assert r["resume"]["resumes"] >= drops and r["resume"]["resume_failures"] == 0
    assert not r["violations"]


def test_open_loop_with_a_cap_records_client_queue_time() -> None:
    result = run_load(
        config(
            rate=6.0,
            arrival="constant",
            max_concurrency=2,
            count=6,
            seed=1,
            server={"max_sessions": 8},
        )
    )
    r = result.report
    assert r["admission"]["attempts"] == 6
    assert r["admission"]["observed_capacity"] <= 2
    queue = r["figures"]["client_queue_ms"]
    assert queue["n"] == 6 and queue["max"] > 500  # later arrivals waited for a slot
    assert r["figures"]["ttfa_with_queue_ms"]["max"] > r["figures"]["ttfa_ms"]["max"]


def test_slo_failure_exits_1(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "load", SHORT, "--sessions", "1", "--duration", "3s", "--workers", "1", "--plain",
            "--server-option", "reply_seconds=1", "--server-option", "chunk_ms=200",
            "--slo", "ttfa_p95<=1ms", "--slo", "rejection_rate<=0.01",
            "--out", str(tmp_path),
        ],
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "SLO FAIL ttfa_p95<=1ms" in res.stdout
    assert "SLO PASS rejection_rate<=0.01" in res.stdout
    saved = json.loads((tmp_path / "report.json").read_text())
    assert [s["passed"] for s in saved["slo"]] == [False, True]


def test_bad_slo_is_exit_2_before_any_run() -> None:
    res = CliRunner().invoke(
        app, ["load", "--sessions", "1", "--duration", "1s", "--slo", "ttfa_p95<=abc"]
    )
    assert res.exit_code == 2
    assert "SLO" in res.stderr and "Traceback" not in res.output


def test_workers_merge_exactly(tmp_path: Path) -> None:
    result = run_load(
        config(sessions=4, duration_s=4.0, workers=2, out=str(tmp_path), server={"max_sessions": 8})
    )
    r = result.report
    assert len(r["workers"]) == 2 and all("cpu_percent" in w for w in r["workers"])
    turns = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    sessions = [json.loads(x) for x in (tmp_path / "sessions.jsonl").read_text().splitlines()]
    assert {t["worker"] for t in turns} == {0, 1}
    assert not list(tmp_path.glob("*.w1.jsonl"))
    assert len(turns) == r["turns"]["count"] >= 4
    assert len(sessions) == r["admission"]["attempts"]
    headline = tally_of(r).headline()
    for name in ("ttfa_ms", "turn_ms"):
        raw = LatencyHistogram()
        raw.record_many(t["figures"][name]["value"] for t in turns if name in t["figures"])
        assert raw == headline[name]  # bucket for bucket
    lags = headline["send_lag_ms"].count
    assert lags == sum(s["appends"] for s in sessions)


def test_a_run_longer_than_the_slice_cap_doubles_its_slices_exactly(tmp_path: Path) -> None:
    """4 s at --slice 0.01 is 400 slices, more than a run keeps (MAX_SLICES): each worker
    doubles its slice length, the parent merges them (at the longer length if they
    differ), and the report says which length it used and why. Nothing is lost: every
    slice's turns and send lags add up to the run's."""
    result = run_load(
        config(
            sessions=4,
            duration_s=4.0,
            workers=2,
            slice_s=0.01,
            out=str(tmp_path),
            server={"max_sessions": 8},
        )
    )
    r = result.report
    slicing = r["slicing"]
    assert slicing["requested_slice_s"] == 0.01 and slicing["doublings"] >= 2
    assert slicing["slice_s"] == 0.01 * 2 ** slicing["doublings"]
    assert "--slice 0.01 s doubled" in slicing["note"]
    assert 0 < len(r["slices"]) <= slicing["max_slices"]
    assert all(s["start_s"] == s["index"] * slicing["slice_s"] for s in r["slices"])
    assert sum(s["turns"] for s in r["slices"]) == r["turns"]["count"] >= 4
    sessions = [json.loads(x) for x in (tmp_path / "sessions.jsonl").read_text().splitlines()]
    lags = sum(s["figures"].get("send_lag_ms", {}).get("n", 0) for s in r["slices"])
    assert lags == sum(s["appends"] for s in sessions)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["slicing"] == slicing


@pytest.mark.slow
@pytest.mark.timing
def test_find_capacity_finds_the_gpu_knee() -> None:
    """The simulated GPU (1 slot, 100 ms per 200 ms output unit) saturates at N*:

    each session's cycle is speech end 720 ms + commit tail 200 + ttfa 300 + first unit
    100 + playback 1000 = 2320 ms and occupies the GPU for 5 units × 100 ms = 500 ms, so
    N* = 2320 / 500 = 4.64 sessions. Below N* the first unit rarely waits; past it the queue
    grows every cycle and ttfa_commit climbs past 400 + 300 ms. Tolerance: the largest
    passing level lies within [0.6, 1.5] × N* (queueing near saturation and 8 s steps make
    the exact crossing noisy), and the first failure is above it.
    """
    n_star = (720 + 200 + 300 + 100 + 1000) / (5 * 100)
    for attempt in range(2):
        result = run_load(
            config(
                find_capacity=True,
                step_duration_s=8.0,
                max_level=12,
                slos=["ttfa_commit_p95<=700ms"],
                server={"max_sessions": 64, "gpu_slots": 1, "unit_compute_ms": 100.0,
                        "disconnect_grace_s": 2.0},
            )
        )  # fmt: skip
        cap = result.report["capacity_search"]
        # a step whose client could not keep real time measured nothing of the server (seen
        # once on CI, at 4 sessions, its SLO passing): the search rightly stops there, and
        # this test then learns nothing about the GPU knee; one more search, and no more
        if not str(cap["fail_reason"]).startswith("invalid_pacing") or attempt == 1:
            break
        print(f"\nsearch {attempt} stopped on invalid pacing: {cap['steps']}")
    assert cap["largest_pass"] is not None and result.exit_code == 0
    assert 0.6 * n_star <= cap["largest_pass"] <= 1.5 * n_star, cap["steps"]
    assert cap["first_fail"] is not None and cap["first_fail"] > cap["largest_pass"]
    assert "ttfa_commit_p95" in cap["fail_reason"]
    assert cap["rejections_began_at"] is None  # the GPU, not admission, was the limit
    release = result.report["slot_release"]
    assert release["clean_close"]["slot_release_ms"] < 1000
    assert 1500 <= release["abrupt_drop"]["slot_release_ms"] <= 10_000  # grace 2 s


def test_a_capacity_search_that_finds_no_capacity_fails(capsys: pytest.CaptureFixture[str]) -> None:
    """No level can meet a 1 ms time to first audio against a 300 ms model: the search has
    no answer, and that is a failed check (exit 1), not a success with an empty result."""
    result = run_load(
        config(
            find_capacity=True,
            step_duration_s=4.0,
            max_level=2,
            slos=["ttfa_p95<=1ms"],
            server={"max_sessions": 8, "disconnect_grace_s": 1.0},
        )
    )
    cap = result.report["capacity_search"]
    assert cap["largest_pass"] is None and cap["first_fail"] is not None
    assert result.exit_code == 1
    assert "no level met the capacity criteria" in capsys.readouterr().err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_ctrl_c_closes_sessions_and_writes_a_partial_report(
    signum: signal.Signals, tmp_path: Path
) -> None:
    """Ctrl-C, and SIGTERM alike (a service manager stopping the run): every admitted
    session ends with session.close, the partial report is written, exit 130."""
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "duplexctl", "load", SHORT, "--sessions", "3", "--duration", "60s",
        "--workers", "1", "--plain", "--out", str(out),
        "--server-option", "reply_seconds=1", "--server-option", "chunk_ms=200",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        sessions = out / "sessions.jsonl"
        while time.monotonic() < deadline:  # wait until sessions ran a full pass
            if sessions.exists() and len(sessions.read_text().splitlines()) >= 2:
                break
            time.sleep(0.2)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    report = json.loads((out / "report.json").read_text())
    assert report["interrupted"] is True
    assert report["sessions"]["admitted"] >= 3
    assert report["sessions"]["closed_cleanly"] == report["sessions"]["admitted"]
    records = [json.loads(x) for x in sessions.read_text().splitlines()]
    assert all(r["closed_cleanly"] for r in records if r["admission"] == "admitted")
    assert any(r["end_reason"] == "stopped" for r in records)
    assert "interrupted" in stdout
