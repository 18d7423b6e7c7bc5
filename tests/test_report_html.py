"""The load page (report.html): written by ``load --out`` (also on Ctrl-C) and by
``duplexctl report RUN… --html FILE``; opened in headless Chromium with the network blocked.

Every page test checks, in the real browser: no console or page error, no request leaving
the page (or failing), every chart drawn (``data-rendered`` and SVG marks in the DOM), and
keeps a full-page screenshot (tests/support/browser.py says where).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from support.browser import Opened, needs_browser, open_page, screenshot_path
from support.commands import ROOT, SHORT, ctrl_c_when, duplexctl_cmd, saved_load_run, serve

from duplexctl.prometheus.summary import explain_knee
from duplexctl.report.html import load_page, page

pytestmark = pytest.mark.realtime


def assert_clean(seen: Opened, *, min_charts: int) -> None:
    assert seen.problems() == []
    assert seen.charts >= min_charts
    assert seen.charts_rendered == seen.charts
    assert seen.svg_marks > 0


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    a = saved_load_run(
        tmp_path_factory.mktemp("a") / "run", "--slo", "ttfa_p95<=5s", "--slice", "1", duration="4s"
    )
    b = saved_load_run(
        tmp_path_factory.mktemp("b") / "run", "--slo", "ttfa_p95<=5s", "--slice", "1", duration="4s"
    )
    return a, b


@pytest.mark.slow
@needs_browser
def test_load_out_writes_a_page_that_renders_offline(
    two_runs: tuple[Path, Path], tmp_path: Path
) -> None:
    run = two_runs[0]
    html = run / "report.html"
    assert html.is_file()
    text = html.read_text()
    assert "<script src" not in text and "<link" not in text  # everything inline
    seen = open_page(
        html,
        screenshot_path(tmp_path, "load"),
        evaluate="({verdict: document.getElementById('verdict').textContent,"
        " slo: document.querySelectorAll('#slo-table tr.pass').length,"
        " command: (document.getElementById('command') || {}).textContent,"
        " server: document.querySelectorAll('.server-metrics').length})",
    )
    assert_clean(seen, min_charts=3)  # HDR curves, time slices, admission
    assert seen.facts["verdict"] == "PASS"
    assert seen.facts["slo"] == 1
    assert "--slo" in seen.facts["command"] and "load" in seen.facts["command"]
    assert seen.facts["server"] == 1  # the embedded server's /metrics was scraped


@needs_browser
def test_report_html_merges_runs_into_one_page(two_runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "merged.html"
    done = subprocess.run(
        duplexctl_cmd("report", *map(str, two_runs), "--html", str(out)),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = open_page(
        out,
        screenshot_path(tmp_path, "load-merged"),
        evaluate="({workers: document.querySelectorAll('#workers-table tr').length - 1,"
        " servers: Array.from(document.querySelectorAll('.server-metrics h4')).map(e => e.textContent),"
        " drawn: Array.from(document.querySelectorAll('.server-metrics div.chart[data-rendered]'))"
        ".filter(e => e.querySelector('svg .mark-line.role-mark path')).map(e => e.id)})",
    )
    assert_clean(seen, min_charts=5)  # … and each run's server series on its own clock
    merged = json.loads(
        json.dumps(two_runs and [json.loads((r / "report.json").read_text()) for r in two_runs])
    )
    assert seen.facts["workers"] == sum(len(r["workers"]) for r in merged)  # every run's workers
    # server_metrics_by_run: each run's section, under its source, drawn and tabulated
    assert seen.facts["servers"] == [str(r / "report.json") for r in two_runs]
    assert seen.facts["drawn"] == ["server-0", "server-1"]
    assert "merged from 2 runs" in out.read_text()


def test_report_html_refuses_a_directory_and_an_input(two_runs: tuple[Path, Path]) -> None:
    for target in (str(two_runs[0]), str(two_runs[0] / "report.json")):
        done = subprocess.run(
            duplexctl_cmd("report", str(two_runs[0] / "report.json"), "--html", target),
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and "--html" in done.stderr


@pytest.mark.slow
@needs_browser
def test_ctrl_c_leaves_a_page_of_the_partial_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        duplexctl_cmd(
            "load", SHORT, "--sessions", "2", "--duration", "60s", "--workers", "1", "--plain",
            "--out", str(out), "--server-option", "reply_seconds=1",
        ),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    stdout = proc.stdout

    def a_turn_counted() -> bool:
        line = stdout.readline()
        return not line or (" turns " in line and "turns 0 " not in line)

    assert ctrl_c_when(proc, a_turn_counted) == 130
    report = json.loads((out / "report.json").read_text())
    assert report["interrupted"] is True
    seen = open_page(
        out / "report.html",
        screenshot_path(tmp_path, "load-interrupted"),
        evaluate="document.getElementById('flags').textContent",
    )
    assert_clean(seen, min_charts=1)
    assert "interrupted" in seen.facts


#: what the page's script reads back: the titles of the time-slice panels, the server's
#: line marks drawn under them, and its tables' rows (counters, histograms)
_SERVER_FACTS = """({
  titles: Array.from(document.querySelectorAll('#slices svg .role-title-text'))
    .map(e => e.textContent),
  serverLines: Array.from(document.querySelectorAll('#slices svg .mark-line.role-mark'))
    .filter(g => g.querySelector('path')).length,
  counters: Array.from(document.querySelectorAll('.server-counters tr'))
    .slice(1).map(r => [r.cells[0].textContent, r.cells[1].textContent, r.cells[2].textContent]),
  histograms: Array.from(document.querySelectorAll('.server-histograms tr'))
    .slice(1).map(r => [r.cells[0].textContent, r.cells[2].textContent]),
})"""


@pytest.mark.slow
@needs_browser
def test_server_metrics_of_a_load_on_serve_share_the_latency_time_axis(tmp_path: Path) -> None:
    """A load against ``duplexctl serve`` (its real /metrics scraped): the page draws the
    server's key series per slice in the same stack as the latency slices (one x axis), and
    tabulates the counters' deltas and the histograms' percentiles."""
    out = tmp_path / "run"
    with serve("--gpu-slots", "1", "--unit-compute-ms", "150", "--max-sessions", "20") as (url, _p):
        done = subprocess.run(
            duplexctl_cmd(
                "load", SHORT, "--url", url, "--sessions", "3", "--duration", "4s",
                "--workers", "1", "--plain", "--slice", "1", "--scrape-interval", "0.25",
                "--out", str(out),
            ),
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    section = report["server_metrics"]
    seen = open_page(
        out / "report.html", screenshot_path(tmp_path, "load-serve-metrics"), evaluate=_SERVER_FACTS
    )
    assert_clean(seen, min_charts=3)
    titles = seen.facts["titles"]
    server_titles = [t for t in titles if t.startswith("server: ")]
    assert "ttfa percentiles" in titles  # the latency slices, in the same vconcat …
    assert server_titles == [
        "server: requests running and waiting (max) per slice",
        "server: KV cache usage (mean) per slice",
        "server: duplex sessions active and in disconnect grace (max) per slice",
    ]  # … no GPU utilisation panel: no DCGM endpoint was given
    # a line per series: running, waiting, KV cache, sessions active, sessions in grace
    assert seen.facts["serverLines"] >= 5
    admitted = report["admission"]["by_kind"]["admitted"]
    stops = next(
        c["delta"]
        for c in section["counters"]
        if c["name"] == "vllm:request_success_total" and c["labels"]["finished_reason"] == "stop"
    )
    assert admitted >= 1 and stops >= 1
    assert ["vllm:request_success_total", "finished_reason=stop", f"{stops:g}"] in seen.facts[
        "counters"
    ]
    ttft = next(h for h in section["histograms"] if h["name"] == "vllm:time_to_first_token_seconds")
    assert ["vllm:time_to_first_token_seconds", f"{ttft['count']:g}"] in seen.facts["histograms"]


def test_a_run_without_server_metrics_says_so(two_runs: tuple[Path, Path]) -> None:
    report = json.loads((two_runs[0] / "report.json").read_text())
    assert 'class="server-metrics"' in load_page.build(report)
    del report["server_metrics"]
    html = load_page.build(report)
    assert 'id="no-server-metrics"' in html and 'class="server-metrics"' not in html


def test_server_metrics_of_unknown_shape_are_shown_not_drawn(two_runs: tuple[Path, Path]) -> None:
    report = json.loads((two_runs[0] / "report.json").read_text())
    report["server_metrics"] = {"note": "scrape failed", "errors": 3}
    html = load_page.build(report)
    assert 'class="server-metrics"' not in html and "scrape failed" in html


def test_invalid_pacing_and_failed_slo_come_first() -> None:
    verdict, flags = load_page.verdict_of(
        {
            "slo": [{"expr": "ttfa_p95<=1ms", "passed": False}],
            "validity": {"invalid_pacing": True, "note": "lag"},
        }
    )
    assert verdict == ("FAIL", "fail")
    assert any(text.startswith("invalid_pacing") for text, _level in flags)
    assert load_page.verdict_of({"validity": {"invalid_pacing": True}})[0] == (
        "NOT TRUSTED",
        "warn",
    )


def test_the_api_key_is_never_in_the_command_line() -> None:
    line = page.command_line(
        ["x", "load", "--api-key", "sekrit", "--api-key=sekrit2", "--sessions", "2"]
    )
    assert "sekrit" not in line and line.startswith("duplexctl load")


@pytest.mark.slow
def test_an_hour_long_run_stays_under_5_mb() -> None:
    spec = importlib.util.spec_from_file_location("html_size", ROOT / "bench" / "html_size.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    report = bench.hour_report()
    html = load_page.build(report)
    assert report["turns"]["count"] == 36_000
    assert len(html.encode()) < 5_000_000


@pytest.mark.timing  # a capacity search: its steps fail when the client cannot pace
@pytest.mark.slow
@needs_browser
def test_capacity_search_page_shows_the_steps_and_the_knee(tmp_path: Path) -> None:
    out = saved_load_run(
        tmp_path / "cap",
        "--find-capacity", "--step-duration", "3s", "--max-level", "2", "--slo", "ttfa_p95<=5s",
        "--server-option", "reply_seconds=0.5", "--server-option", "disconnect_grace_s=1",
        duration="3s",  # a search runs timed steps: not bounded by --count
    )  # fmt: skip
    steps = json.loads((out / "report.json").read_text())["capacity_search"]["steps"]
    seen = open_page(
        out / "report.html",
        screenshot_path(tmp_path, "load-capacity"),
        evaluate="({rows: document.querySelectorAll('#capacity-table tr').length - 1,"
        " points: document.querySelectorAll('#capacity svg .mark-symbol.role-mark path').length,"
        " rules: document.querySelectorAll('#capacity svg .mark-rule.role-mark line').length,"
        " serverSteps: Array.from(document.querySelectorAll('#server-0-steps svg .role-legend-label text'))"
        ".map(e => e.textContent).slice(0, 2)})",
    )
    assert_clean(seen, min_charts=5)  # … and the server's series per step
    assert seen.facts["rows"] == len(steps) >= 1
    assert seen.facts["points"] == 2 * len(steps)  # achieved and the percentile, per step
    assert seen.facts["rules"] >= 3  # the SLO line and the knee on both charts
    assert seen.facts["serverSteps"] == ["running requests", "waiting requests"]


@pytest.mark.slow
@needs_browser
def test_the_knee_is_explained_in_server_terms_beside_the_steps(tmp_path: Path) -> None:
    """A search on ``duplexctl serve`` (one batch slot: replies run and queue); the knee text
    of docs/metrics.md, computed from its scraped steps (as if its last level had failed),
    is on the page beside the server's series per step."""
    out = tmp_path / "cap"
    with serve("--gpu-slots", "1", "--unit-compute-ms", "150", "--max-sessions", "20") as (url, _p):
        done = subprocess.run(
            duplexctl_cmd(
                "load", SHORT, "--url", url, "--find-capacity", "--step-duration", "4s",
                "--max-level", "2", "--slo", "ttfa_p95<=20s", "--workers", "1", "--plain",
                "--scrape-interval", "0.25", "--out", str(out),
            ),
            capture_output=True, text=True, timeout=180, cwd=ROOT,
        )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    report = json.loads((out / "report.json").read_text())
    section = report["server_metrics"]
    levels = [s["level"] for s in report["capacity_search"]["steps"]]
    knee = explain_knee(section, levels[-2] if len(levels) > 1 else None, levels[-1], "sessions")
    assert knee is not None and knee["text"].startswith(f"at {levels[-1]} sessions: ")
    section["knee"] = knee
    html = page.write_atomic(tmp_path / "knee.html", load_page.build(report))
    seen = open_page(
        html,
        screenshot_path(tmp_path, "load-capacity-knee"),
        evaluate="({knee: document.getElementById('server-0-knee').textContent,"
        " lines: document.querySelectorAll('#server-0-steps svg .mark-line.role-mark path').length})",
    )
    assert_clean(seen, min_charts=5)
    assert knee["text"] in seen.facts["knee"]
    assert seen.facts["lines"] >= 4  # running, waiting, KV cache, sessions active …


def test_what_a_run_says_is_text_never_markup(two_runs: tuple[Path, Path]) -> None:
    """Settings, causes and server data reach the page as text: a scenario's instructions
    holding a script tag cannot close the page's script elements or run."""
    report = json.loads((two_runs[0] / "report.json").read_text())
    hostile = "</script><script>alert(1)</script>"
    report["config"]["instructions"] = hostile
    report["admission"]["causes"] = {hostile: 1}
    report["workers"][0]["node"] = hostile
    html = load_page.build(report)
    assert "<script>alert(1)" not in html
    assert html.count("</script>") == 2  # the runtime's and the charts' own
    assert "<th>node</th>" in html  # workers that name their node get a column for it


def test_a_page_that_cannot_be_built_is_one_warning_not_a_failed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken() -> str:
        raise ValueError("no such field")

    assert page.write_beside(broken, tmp_path) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning" in err and "report.html not written" in err
    assert not (tmp_path / "report.html").exists()
