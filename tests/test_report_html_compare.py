"""``duplexctl report A B --compare``: an A/A pair flags nothing, a server made 200 ms slower
(``serve --fault latency-ms=200``) is flagged; ``--fail-on-regression PCT``; printed, JSON
and the HTML page (in headless Chromium)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support.browser import needs_browser, open_page, screenshot_path
from support.commands import ROOT, SHORT, duplexctl_cmd, serve

from duplexctl.report import compare

pytestmark = pytest.mark.realtime

SERVER = ("--max-sessions", "16", "--reply-seconds", "0.5", "--ttfa-jitter-ms", "50", "--seed", "1")


def _load(url: str, out: Path) -> Path:
    done = subprocess.run(
        duplexctl_cmd(
            "load", SHORT, "--url", url, "--sessions", "4", "--duration", "8s",
            "--workers", "1", "--plain", "--out", str(out),
        ),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two runs against one server (A/A) and one against the same server 200 ms slower."""
    tmp = tmp_path_factory.mktemp("compare")
    with serve(*SERVER) as (url, _proc):
        a1, a2 = _load(url, tmp / "a1"), _load(url, tmp / "a2")
    with serve(*SERVER, "--fault", "latency-ms=200") as (url, _proc):
        b = _load(url, tmp / "b")
    return {"a1": a1, "a2": a2, "b": b}


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd("report", *args), capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.slow
def test_a_a_flags_nothing(runs: dict[str, Path]) -> None:
    done = _report(
        str(runs["a1"]), str(runs["a2"]), "--compare", "--fail-on-regression", "5", "--json"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["flagged"] == [] and doc["regressions"] == []
    tested = [r for r in doc["rows"] if r["ci_low"] is not None]
    assert {r["figure"] for r in tested} >= {"ttfa_ms", "turn_ms"}  # it did test, and found nothing


def test_injected_latency_is_flagged_and_fails_the_threshold(runs: dict[str, Path]) -> None:
    done = _report(str(runs["a1"]), str(runs["b"]), "--compare", "--fail-on-regression", "10")
    assert done.returncode == 1, done.stdout + done.stderr
    ttfa = next(line for line in done.stdout.splitlines() if "ttfa_ms p50" in line)
    assert "REGRESSION" in ttfa
    assert "regression beyond 10 %" in done.stderr and "ttfa_ms p50" in done.stderr
    # flagged, but below a larger threshold: reported, exit 0
    done = _report(
        str(runs["a1"]), str(runs["b"]), "--compare", "--fail-on-regression", "1000", "--json"
    )
    assert done.returncode == 0
    doc = json.loads(done.stdout)
    assert "ttfa_ms p50" in doc["flagged"] and doc["regressions"] == []
    row = next(r for r in doc["rows"] if r["figure"] == "ttfa_ms" and r["stat"] == "p50")
    assert 150 < row["change"] < 250 and row["ci_low"] > 0  # the 200 ms, inside its interval


@needs_browser
def test_comparison_page_renders_offline(runs: dict[str, Path], tmp_path: Path) -> None:
    page = tmp_path / "compare.html"
    done = _report(str(runs["a1"]), str(runs["b"]), "--compare", "--html", str(page))
    assert done.returncode == 0, done.stderr
    seen = open_page(
        page,
        screenshot_path(tmp_path, "compare"),
        evaluate="({verdict: document.getElementById('verdict').textContent,"
        " failing: Array.from(document.querySelectorAll('.compare-table tr.fail td:first-child'))"
        ".map(e => e.textContent)})",
    )
    assert seen.problems() == [] and seen.charts_rendered == seen.charts == 1 and seen.svg_marks
    assert seen.facts["verdict"] == "REGRESSION"
    assert "ttfa_ms p50" in seen.facts["failing"]


@pytest.mark.parametrize(
    "args, says",
    [
        (["--compare"], "two runs"),
        (["--fail-on-regression", "5"], "needs --compare"),
        (["--compare", "--slo", "ttfa_p95<=1s"], "not used with --compare"),
    ],
)
def test_bad_compare_input_is_one_line_exit_2(
    runs: dict[str, Path], args: list[str], says: str
) -> None:
    done = _report(str(runs["a1"]), str(runs["a2"]), str(runs["b"]), *args)
    assert done.returncode == 2 and says in done.stderr and done.stderr.count("\n") == 1


def test_a_run_without_turns_is_one_line_exit_2(runs: dict[str, Path], tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "report.json").write_text((runs["a1"] / "report.json").read_text())
    done = _report(str(runs["a1"]), str(bare), "--compare")
    assert done.returncode == 2 and "turns.jsonl" in done.stderr and done.stderr.count("\n") == 1


def test_bootstrap_flags_a_shift_not_noise(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)

    def run(name: str, shift: float) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        values = rng.lognormal(np.log(500), 0.2, 400) + shift
        lines = [
            json.dumps({"phase": "steady", "figures": {"ttfa_ms": {"value": v}}}) for v in values
        ]
        lines.append(json.dumps({"phase": "warmup", "figures": {"ttfa_ms": {"value": 1e6}}}))
        (folder / "turns.jsonl").write_text("\n".join(lines) + "\n")
        return folder

    same = compare.compare(run("a", 0), run("a2", 0))
    assert same["flagged"] == []
    assert {r["stat"] for r in same["rows"] if r["ci_low"] is not None} == {
        "p50",
        "p95",
    }  # p99: n < 500
    shifted = compare.compare(run("b", 0), run("b2", 100))
    assert shifted["flagged"] == ["ttfa_ms p50", "ttfa_ms p95"]
    assert all(r["candidate"] < 1e5 for r in shifted["rows"])  # warm-up excluded
