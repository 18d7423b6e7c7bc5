"""``duplexctl report`` re-renders and merges the server's metrics of saved runs, and plots
them on the latency slices' time axis (issue 19, item 4)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.commands import ROOT, duplexctl_cmd, saved_load_run

from duplexctl.report.plots import draw

pytestmark = pytest.mark.realtime


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd("report", *args), capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def _ttft_count(section: dict) -> float:
    return next(
        h["count"] for h in section["histograms"] if h["name"] == "vllm:time_to_first_token_seconds"
    )


def test_report_summarises_again_from_server_metrics_jsonl(tmp_path: Path) -> None:
    run = saved_load_run(tmp_path / "run", "--scrape-interval", "0.2")
    saved = json.loads((run / "report.json").read_text())
    original = saved["server_metrics"]
    # the section is rebuilt from the JSONL file, not copied from report.json
    del saved["server_metrics"]
    (run / "report.json").write_text(json.dumps(saved))
    rendered = _report(str(run), "--json")
    assert rendered.returncode == 0, rendered.stderr
    again = json.loads(rendered.stdout)["server_metrics"]
    assert _ttft_count(again) == _ttft_count(original) >= 1
    assert again["key"] == original["key"]
    assert len(again["slices"]) == len(original["slices"])
    printed = _report(str(run))
    assert "server metrics (scraped every 0.2 s)" in printed.stdout


@pytest.mark.slow
def test_report_merges_each_runs_server_metrics_beside_the_others(tmp_path: Path) -> None:
    a = saved_load_run(tmp_path / "a", "--scrape-interval", "0.2")
    b = saved_load_run(tmp_path / "b", "--scrape-interval", "0.2")
    merged = _report(str(a), str(b), "--json")
    assert merged.returncode == 0, merged.stderr
    report = json.loads(merged.stdout)
    assert "server_metrics" not in report
    by_run = report["server_metrics_by_run"]
    assert [r["source"] for r in by_run] == [str(a / "report.json"), str(b / "report.json")]
    assert all(_ttft_count(r) >= 1 for r in by_run)
    printed = _report(str(a), str(b))
    assert f"{a / 'report.json'}: server metrics" in printed.stdout


def test_plots_put_the_server_on_the_latency_time_axis(tmp_path: Path) -> None:
    run = saved_load_run(tmp_path / "run", "--scrape-interval", "0.2")
    plotted = _report(str(run), "--plot", str(tmp_path / "plots"))
    assert plotted.returncode == 0, plotted.stderr
    assert (tmp_path / "plots" / "server_over_time.png").stat().st_size > 1000
    assert (tmp_path / "plots" / "latency_over_time.png").exists()


def test_a_capacity_search_plots_the_server_against_the_level(tmp_path: Path) -> None:
    key = {"running": {"max": 2.0}, "waiting": {"max": 5.0}, "kv_cache_usage": {"mean": 0.9}}
    report = {
        "capacity_search": {"unit": "sessions", "steps": []},
        "server_metrics": {"slices": [], "steps": [{"label": "4", "key": key}]},
    }
    written = draw(report, tmp_path)
    assert tmp_path / "server_vs_concurrency.png" in written
