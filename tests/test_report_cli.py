"""``duplexctl report``: re-render, merge two saved runs exactly, plot, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.loadconfig import load_config
from typer.testing import CliRunner

from duplexctl.cli import app
from duplexctl.load.run import run_load
from duplexctl.report.load_report import tally_of

pytestmark = pytest.mark.realtime

ROOT = Path(__file__).resolve().parent.parent
SHORT = str(ROOT / "recordings" / "short_ack.wav")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    dirs = []
    for i in range(2):
        out = tmp_path_factory.mktemp(f"run{i}")
        run_load(
            load_config(
                inputs=[SHORT],
                sessions=2 + i,
                duration_s=3.0,
                workers=1,
                live=False,
                json_output=True,
                out=str(out),
                server_overrides={"max_sessions": 8, "reply_seconds": 1.0, "chunk_ms": 200},
            )
        )
        dirs.append(out)
    return dirs[0], dirs[1]


def test_merge_of_two_runs_equals_their_histograms_combined(
    two_runs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = two_runs
    merged_dir = tmp_path / "merged"
    res = CliRunner().invoke(
        app, ["report", str(a), str(b / "report.json"), "--out", str(merged_dir), "--json"]
    )
    assert res.exit_code == 0, res.output
    merged = json.loads(res.stdout)
    ra, rb = (json.loads((d / "report.json").read_text()) for d in (a, b))
    expected = tally_of(ra).headline().merge(tally_of(rb).headline())
    assert tally_of(merged).headline() == expected  # bucket for bucket, every metric
    for name in ("ttfa_ms", "send_lag_ms", "connect_ms"):
        assert merged["figures"][name]["n"] == expected[name].count
        assert merged["figures"][name]["p99"] == expected[name].percentile(99)
    assert merged["admission"]["attempts"] == (
        ra["admission"]["attempts"] + rb["admission"]["attempts"]
    )
    assert merged["turns"]["count"] == ra["turns"]["count"] + rb["turns"]["count"]
    assert len(merged["merged_from"]) == 2
    # peaks and CPU of separate runs do not add: the largest of any one run, each listed
    peaks = [r["admission"]["observed_capacity"] for r in (ra, rb)]
    cpus = [r["validity"]["client_cpu_percent"] for r in (ra, rb)]
    assert peaks == [2, 3]  # the fixture's runs offered 2 and 3 sessions
    assert merged["admission"]["observed_capacity"] == 3
    assert merged["scalars"]["observed_capacity"] == 3.0
    assert merged["validity"]["client_cpu_percent"] == max(cpus)
    assert [(r["observed_capacity"], r["client_cpu_percent"]) for r in merged["runs"]] == list(
        zip(peaks, cpus, strict=True)
    )
    assert merged["wall_s"] == pytest.approx(ra["wall_s"] + rb["wall_s"], abs=0.01)
    assert "observed_capacity" in merged["merge_rules"]
    lines = (merged_dir / "turns.jsonl").read_text().splitlines()
    assert len(lines) == merged["turns"]["count"]
    assert json.loads((merged_dir / "report.json").read_text())["turns"] == merged["turns"]


def test_merged_summary_shows_each_runs_own_peak(two_runs: tuple[Path, Path]) -> None:
    a, b = two_runs
    res = CliRunner().invoke(app, ["report", str(a), str(b)])
    assert res.exit_code == 0, res.output
    assert "observed capacity 3 (largest of 2 runs)" in res.stdout
    assert "observed capacity 2, client CPU" in res.stdout  # run 1's own line
    assert "observed capacity 3, client CPU" in res.stdout  # run 2's own line


def test_single_run_rerenders_and_rejudges_slos(two_runs: tuple[Path, Path]) -> None:
    a, _ = two_runs
    res = CliRunner().invoke(app, ["report", str(a)])
    assert res.exit_code == 0, res.output
    assert "ttfa_ms" in res.stdout and "observed capacity" in res.stdout
    res = CliRunner().invoke(app, ["report", str(a), "--slo", "ttfa_p50<=1ms"])
    assert res.exit_code == 1
    assert "SLO FAIL ttfa_p50<=1ms" in res.stdout


def test_plots_are_written(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = two_runs
    plots = tmp_path / "plots"
    res = CliRunner().invoke(app, ["report", str(a), str(b), "--plot", str(plots)])
    assert res.exit_code == 0, res.output
    names = {p.name for p in plots.glob("*.png")}
    assert {"latency_over_time.png", "rejection_over_time.png"} <= names
    assert "latency_vs_concurrency.png" in names  # the two runs offered 2 and 3 sessions
    assert all(p.stat().st_size > 1000 for p in plots.glob("*.png"))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "no such file"),
        ("{not json", "not a readable JSON report"),
        ("{}", "not a duplexctl load report"),
    ],
)
def test_bad_results_are_one_line_exit_2(tmp_path: Path, content: Any, problem: str) -> None:
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    res = CliRunner().invoke(app, ["report", str(path)])
    assert res.exit_code == 2
    assert problem in res.stderr and "Traceback" not in res.output
