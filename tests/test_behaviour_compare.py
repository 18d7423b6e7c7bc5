"""``report A B --compare`` on the behaviour figures: load writes every session's trials to
``behaviour.jsonl`` as its conversation ends, and the comparison bootstraps them like the
turns' figures — an A/A pair flags no behaviour figure, a model that stops 300 ms later is
flagged and fails ``--fail-on-regression``; rates are compared as proportions."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from support.commands import ROOT, duplexctl_cmd, serving

from duplexctl.audio.manifest import DEFAULT_DIR as RECORDINGS
from duplexctl.behaviour.figures import Figures
from duplexctl.load.recorder import Recorder
from duplexctl.report import compare

pytestmark = [pytest.mark.realtime, pytest.mark.timeout(400)]

SESSIONS = "10"  # one interruption each: p50 is compared from 10 trials
BEHAVIOUR = ("stop_latency_ms", "response_gap_ms", "takeover_rate", "no_response_rate")


def _load(url: str, out: Path, workers: str = "1") -> Path:
    cmd = duplexctl_cmd("load", str(RECORDINGS / "interruption.toml"), "--url", url)
    cmd += ["--sessions", SESSIONS, "--count", SESSIONS, "--workers", workers, "--plain"]
    cmd += ["--out", str(out), "--prebuffer-ms", "0", "--turn-detection", "server_vad"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two runs against a model that stops 300 ms after an interruption (the second in two
    worker processes, whose parts are merged), one against 600."""
    tmp = tmp_path_factory.mktemp("behaviour_compare")
    with serving("--max-sessions", "16", "--behaviour", "stop-latency-ms=300") as url:
        a1, a2 = _load(url, tmp / "a1"), _load(url, tmp / "a2", workers="2")
    with serving("--max-sessions", "16", "--behaviour", "stop-latency-ms=600") as url:
        b = _load(url, tmp / "b")
    return {"a1": a1, "a2": a2, "b": b}


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = duplexctl_cmd("report", *args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)


@pytest.mark.timing  # the runs' stop latencies are bounded to ±30 ms (a quiet machine)
@pytest.mark.slow
def test_load_writes_every_sessions_trials(runs: dict[str, Path]) -> None:
    lines = [json.loads(x) for x in (runs["a1"] / "behaviour.jsonl").read_text().splitlines()]
    assert len(lines) == int(SESSIONS)
    assert len({line["session_id"] for line in lines}) == int(SESSIONS)
    for line in lines:
        assert len(line["stop_latency_ms"]) == 1 and line["interruptions"] == 1
        assert abs(line["stop_latency_ms"][0] - 300.0) <= 30.0
        assert line["turn_ends"] == len(line["response_gap_ms"]) + line["unanswered_turn_ends"]
    # the report's histogram holds exactly the lines' trials
    report = json.loads((runs["a1"] / "report.json").read_text())
    assert report["figures"]["stop_latency_ms"]["n"] == int(SESSIONS)


@pytest.mark.timing  # the runs' stop latencies are bounded to ±30 ms (a quiet machine)
def test_worker_parts_and_merged_runs_keep_every_trial(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    two = [json.loads(x) for x in (runs["a2"] / "behaviour.jsonl").read_text().splitlines()]
    assert len(two) == int(SESSIONS) and {line["worker"] for line in two} == {0, 1}
    assert not list(runs["a2"].glob("behaviour.w*.jsonl"))
    done = _report(str(runs["a1"]), str(runs["a2"]), "--out", str(tmp_path / "merged"))
    assert done.returncode == 0, done.stdout + done.stderr
    merged = (tmp_path / "merged" / "behaviour.jsonl").read_text().splitlines()
    assert len(merged) == 2 * int(SESSIONS)


@pytest.mark.timing  # the runs' stop latencies are bounded to ±30 ms (a quiet machine)
def test_a_a_flags_no_behaviour_figure(runs: dict[str, Path]) -> None:
    done = _report(str(runs["a1"]), str(runs["a2"]), "--compare", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    rows = [r for r in doc["rows"] if r["figure"] in BEHAVIOUR]
    tested = {(r["figure"], r["stat"]) for r in rows if r["ci_low"] is not None}
    assert {("stop_latency_ms", "p50"), ("response_gap_ms", "p50")} <= tested
    assert ("no_response_rate", "rate") in tested  # 20 turn ends, every one answered
    assert not [r for r in rows if r["flagged"]], rows


@pytest.mark.timing  # the runs' stop latencies are bounded to ±30 ms (a quiet machine)
def test_a_later_stop_is_flagged_and_fails_the_threshold(runs: dict[str, Path]) -> None:
    done = _report(str(runs["a1"]), str(runs["b"]), "--compare", "--fail-on-regression", "10")
    assert done.returncode == 1, done.stdout + done.stderr
    stop = next(line for line in done.stdout.splitlines() if "stop_latency_ms p50" in line)
    assert "REGRESSION" in stop
    assert "regression beyond 10 %" in done.stderr and "stop_latency_ms p50" in done.stderr
    doc = json.loads(_report(str(runs["a1"]), str(runs["b"]), "--compare", "--json").stdout)
    row = next(r for r in doc["rows"] if r["figure"] == "stop_latency_ms" and r["stat"] == "p50")
    assert 250 < row["change"] < 350 and row["ci_low"] > 0  # the 300 ms, inside its interval
    assert row["n_baseline"] == row["n_candidate"] == int(SESSIONS)


def _written(folder: Path, takeovers: list[int], pauses: int = 10) -> Path:
    """A run folder as load's recorder writes it: one conversation per entry, each with
    ``pauses`` pause trials and that many takeovers."""
    folder.mkdir()  # as load --out makes it (rundir.prepare_run_dir)
    rec = Recorder(origin=time.monotonic(), out_dir=folder)
    for k in takeovers:
        rec.behaviour(time.monotonic(), Figures(pause_trials=pauses, takeovers=k))
    rec.close()
    return folder


def test_takeover_rates_are_compared_as_proportions(tmp_path: Path) -> None:
    base = _written(tmp_path / "a", [1, 0, 2, 1, 0, 1])  # 5 of 60
    same = _written(tmp_path / "a2", [0, 1, 1, 2, 0, 1])  # 5 of 60
    worse = _written(tmp_path / "b", [7, 6, 8, 6, 7, 6])  # 40 of 60
    for candidate, flagged in ((same, False), (worse, True)):
        doc = compare.compare(base, candidate)
        (row,) = [r for r in doc["rows"] if r["figure"] == "takeover_rate"]
        assert row["stat"] == "rate" and row["n_baseline"] == row["n_candidate"] == 60
        assert row["baseline"] == pytest.approx(5 / 60) and row["ci_low"] is not None
        assert row["flagged"] is flagged and row["worse"] is flagged
    assert compare.regressions(compare.compare(base, worse), 10.0)
    # too few trials (p50's rule: 10 each) are shown, never tested
    few = compare.compare(_written(tmp_path / "f", [0], 9), _written(tmp_path / "g", [9], 9))
    (row,) = [r for r in few["rows"] if r["figure"] == "takeover_rate"]
    assert row["note"] == "too few samples" and not row["flagged"]


def test_trials_of_one_conversation_are_resampled_together(tmp_path: Path) -> None:
    """The same totals, 10 of 60 against 30 of 60: spread evenly over six conversations the
    change is flagged; all-or-nothing per conversation (one conversation takes over every
    pause against three) six conversations cannot tell, and trial by trial they would have
    (a 0.17 → 0.50 shift over 60 trials each)."""
    even = _written(tmp_path / "even_a", [2, 2, 2, 2, 1, 1])
    even_b = _written(tmp_path / "even_b", [5, 5, 5, 5, 5, 5])
    lumped = _written(tmp_path / "lumped_a", [10, 0, 0, 0, 0, 0])
    lumped_b = _written(tmp_path / "lumped_b", [10, 10, 10, 0, 0, 0])
    rows = {}
    for key, (a, b) in {"even": (even, even_b), "lumped": (lumped, lumped_b)}.items():
        (rows[key],) = [r for r in compare.compare(a, b)["rows"] if r["figure"] == "takeover_rate"]
    for row in rows.values():
        assert row["baseline"] == pytest.approx(10 / 60) and row["candidate"] == pytest.approx(0.5)
        assert (
            row["n_baseline"] == 60
            and row["units_baseline"] == 6
            and row["unit"] == "conversations"
        )
    assert rows["even"]["flagged"] and rows["even"]["ci_low"] > 0
    assert not rows["lumped"]["significant"] and rows["lumped"]["ci_low"] < 0
    # the interval by conversation is wider than the trial-by-trial one
    width = {k: r["ci_high"] - r["ci_low"] for k, r in rows.items()}
    assert width["lumped"] > 2 * width["even"]


def test_too_few_conversations_are_shown_not_tested(tmp_path: Path) -> None:
    """Four conversations of ten pauses each: 40 trials, enough for p50's rule, too few
    conversations to resample."""
    doc = compare.compare(_written(tmp_path / "a", [0, 1, 0, 1]), _written(tmp_path / "b", [9] * 4))
    (row,) = [r for r in doc["rows"] if r["figure"] == "takeover_rate"]
    assert row["n_baseline"] == 40 and row["units_candidate"] == 4
    assert row["note"] == "too few conversations" and row["ci_low"] is None
    assert not row["flagged"] and doc["comparisons"] == 0


def test_weighted_statistics_equal_the_statistics_of_the_repeated_values() -> None:
    """What a conversation resample computes (each value counted as often as its
    conversation was drawn) is exactly the nearest-rank percentile, or the mean, of the
    values repeated that often."""
    rng = np.random.default_rng(7)
    values = np.sort(rng.normal(500, 120, size=37).round(1))
    weights = rng.integers(0, 4, size=(50, 37))
    weights[:, 0] += 1  # never an empty resample
    stats = ("p50", "p95", "p99")
    got = compare._weighted_statistics(values, weights, stats)
    for row in range(len(weights)):
        repeated = np.repeat(values, weights[row])
        assert list(got[:, row]) == list(compare._statistics(repeated, stats))
        rate = compare._weighted_statistics(values, weights[row : row + 1], ("rate",))
        assert rate[0, 0] == pytest.approx(repeated.mean())
