"""``report A B --compare`` compares what capacity and reliability are, not only latencies.

The reproduction (issue 29): a clean run against one where most attempts were rejected for
capacity printed "NO SIGNIFICANT CHANGE" and ``--fail-on-regression`` passed it. Here two
real runs differ only in the embedded server's admission limit; the comparison must lead
with the regression, exit 1 under ``--fail-on-regression``, and an A/A pair of the limited
run (both rejecting most attempts) must flag nothing. The synthetic tests pin the method:
attempts are resampled by user (a user who is rejected once retries into the same full
server), so a lumped difference is not flagged where an even one is, and many A/A pairs of a
strongly clustered process flag no more than the family-wise 5 % allows.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.browser import chromium_missing, open_page, screenshot_path
from support.commands import ROOT, SHORT, duplexctl_cmd

from duplexctl.report import compare

pytestmark = pytest.mark.timeout(300)


def _load(out: Path, *extra: str) -> Path:
    done = subprocess.run(
        duplexctl_cmd(
            "load", SHORT, "--sessions", "8", "--duration", "8s", "--workers", "1",
            "--plain", "--no-server-metrics", "--out", str(out), *extra,
        ),
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A clean run (the embedded server admits 64) and two runs of the same load against a
    server that admits 2 of the 8 users at a time."""
    tmp = tmp_path_factory.mktemp("admission")
    return {
        "clean": _load(tmp / "clean"),
        "full": _load(tmp / "full", "--server-max-sessions", "2"),
        "full2": _load(tmp / "full2", "--server-max-sessions", "2"),
    }


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd("report", *args), capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def _row(doc: dict[str, Any], figure: str) -> dict[str, Any]:
    return next(r for r in doc["rows"] if r["figure"] == figure)


def test_runs_differing_only_in_admission_are_a_regression(runs: dict[str, Path]) -> None:
    done = _report(str(runs["clean"]), str(runs["full"]), "--compare", "--fail-on-regression", "10")
    assert done.returncode == 1, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    # the verdict leads, with the worst regression: the capacity the server held
    assert first.startswith("compare: REGRESSION: observed_capacity 8 → 2"), first
    assert "NO SIGNIFICANT CHANGE" not in done.stdout
    assert "regression beyond 10 %" in done.stderr
    assert "observed_capacity" in done.stderr and "capacity_rejection_rate" in done.stderr
    doc = json.loads(_report(str(runs["clean"]), str(runs["full"]), "--compare", "--json").stdout)
    rejected = _row(doc, "capacity_rejection_rate")
    assert rejected["baseline"] == 0 and rejected["candidate"] > 0.3
    assert rejected["unit"] == "users" and rejected["units_candidate"] == 8
    assert rejected["ci_low"] > 0 and rejected["flagged"] and rejected["worse"]
    assert rejected["change_pct"] is None  # from 0: beyond every threshold, still failing
    assert doc["verdict"]["word"] == "REGRESSION"
    assert doc["verdict"]["worst"] == "observed_capacity peak"
    assert not _row(doc, "failure_rate")["flagged"]  # rejected for capacity, not failed


def test_a_a_pair_of_rejecting_runs_flags_nothing(runs: dict[str, Path]) -> None:
    done = _report(str(runs["full"]), str(runs["full2"]), "--compare", "--json")
    doc = json.loads(done.stdout)
    rejected = _row(doc, "capacity_rejection_rate")
    assert rejected["baseline"] > 0.3 and rejected["candidate"] > 0.3  # both rejected most
    assert rejected["ci_low"] is not None  # it was tested …
    assert doc["flagged"] == [], doc["flagged"]  # … and nothing changed
    # Two 8 s runs hold two completed turns each: a latency figure of n=2 can move by more
    # than the minimum change on a busy machine, and then the verdict says so
    # (INCONCLUSIVE: "changed but not testable", naming the figure), never a regression or
    # an improvement. What must hold: the admission rows were tested and nothing was flagged.
    assert doc["verdict"]["word"] in ("NO SIGNIFICANT CHANGE", "INCONCLUSIVE"), doc["verdict"]
    admission = [r for r in doc["rows"] if r["section"] == "admission"]
    assert admission and all(r["ci_low"] is not None for r in admission), admission
    done = _report(str(runs["full"]), str(runs["full2"]), "--compare", "--fail-on-regression", "0")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.browser
@pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))
def test_comparison_page_leads_with_the_worst_regression(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    page = tmp_path / "compare.html"
    done = _report(str(runs["clean"]), str(runs["full"]), "--compare", "--html", str(page))
    assert done.returncode == 0, done.stderr
    seen = open_page(
        page,
        screenshot_path(tmp_path, "compare-admission"),
        evaluate="({verdict: document.getElementById('verdict').innerText,"
        " lead: document.getElementById('verdict-text').innerText,"
        " headings: Array.from(document.querySelectorAll('main h3')).map(e => e.innerText),"
        " failing: Array.from(document.querySelectorAll('.compare-table tr.fail'))"
        ".map(e => e.innerText)})",
    )
    assert seen.problems() == []
    assert seen.facts["verdict"] == "REGRESSION"
    assert seen.facts["lead"].startswith("observed_capacity 8 → 2")
    assert seen.facts["headings"][:2] == [
        "Capacity: how many sessions the server held",
        "Admission: attempts not admitted",
    ]
    rejected = next(r for r in seen.facts["failing"] if "capacity_rejection_rate" in r)
    assert "0 %" in rejected and "users" in rejected and "REGRESSION" in rejected


# -- the method, on written runs ----------------------------------------------------------------


def _attempts(folder: Path, rejected_per_user: list[int], attempts: int = 10) -> Path:
    """A run folder whose sessions.jsonl holds ``attempts`` attempts per user, the first
    ``rejected_per_user[u]`` of user u rejected for capacity (turns.jsonl empty)."""
    folder.mkdir(parents=True)
    (folder / "turns.jsonl").write_text("")
    lines = []
    for user, rejected in enumerate(rejected_per_user):
        for k in range(attempts):
            admission = "rejected_capacity" if k < rejected else "admitted"
            lines.append({"worker": 0, "index": user, "attempt": k + 1, "admission": admission})
    (folder / "sessions.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def test_attempts_of_one_user_are_resampled_together(tmp_path: Path) -> None:
    """10 of 60 attempts rejected against 30 of 60, over six users: spread evenly the change
    is flagged; all-or-nothing per user (one user rejected every time against three) six
    users cannot tell it from chance."""
    pairs = {
        "even": ([2, 2, 2, 2, 1, 1], [5, 5, 5, 5, 5, 5]),
        "lumped": ([10, 0, 0, 0, 0, 0], [10, 10, 10, 0, 0, 0]),
    }
    rows = {}
    for key, (a, b) in pairs.items():
        doc = compare.compare(
            _attempts(tmp_path / f"{key}_a", a), _attempts(tmp_path / f"{key}_b", b)
        )
        rows[key] = _row(doc, "capacity_rejection_rate")
    for row in rows.values():
        assert row["baseline"] == pytest.approx(10 / 60) and row["candidate"] == pytest.approx(0.5)
        assert row["n_baseline"] == 60 and row["units_baseline"] == 6 and row["unit"] == "users"
    assert rows["even"]["flagged"] and rows["even"]["ci_low"] > 0
    assert not rows["lumped"]["significant"] and rows["lumped"]["ci_low"] <= 0


def test_too_few_users_are_shown_not_tested(tmp_path: Path) -> None:
    """Two users against four (the issue's run1 and run_mix): enough attempts, too few users
    to resample. The verdict says it changed but could not be tested, never "no significant
    change"."""
    doc = compare.compare(_attempts(tmp_path / "a", [0, 0]), _attempts(tmp_path / "b", [8] * 4))
    row = _row(doc, "capacity_rejection_rate")
    assert row["note"] == "too few users" and row["ci_low"] is None and not row["flagged"]
    assert doc["verdict"]["word"] == "INCONCLUSIVE"
    assert "capacity_rejection_rate 0 % → 80 %" in doc["verdict"]["text"]
    assert compare.lines(doc)[0].startswith("compare: INCONCLUSIVE")


def test_a_a_pairs_of_a_clustered_process_flag_at_most_the_family_rate(tmp_path: Path) -> None:
    """Forty A/A pairs, each user's rejection propensity drawn from Beta(0.5, 0.5) (strongly
    clustered: most users are rejected nearly always or nearly never). The cluster bootstrap
    flags at most a few of them; the same attempts treated one by one (every attempt its own
    user) flag many: the clustering is why attempts are resampled by user."""
    rng = np.random.default_rng(29)
    flagged = {"by user": 0, "attempt by attempt": 0}
    for i in range(40):
        runs = []
        for _side in "ab":
            p = rng.beta(0.5, 0.5, size=10)
            runs.append([int(k) for k in rng.binomial(20, p)])
        for how in flagged:
            folders = []
            for side, per_user in zip("ab", runs, strict=True):
                folder = _attempts(tmp_path / f"{how}-{i}-{side}", per_user, attempts=20)
                if how == "attempt by attempt":  # renumber: every attempt a user of its own
                    lines = [
                        json.loads(x) for x in (folder / "sessions.jsonl").read_text().splitlines()
                    ]
                    for j, line in enumerate(lines):
                        line["index"] = j
                    (folder / "sessions.jsonl").write_text(
                        "".join(json.dumps(x) + "\n" for x in lines)
                    )
                folders.append(folder)
            doc = compare.compare(*folders)
            flagged[how] += _row(doc, "capacity_rejection_rate")["flagged"]
    assert flagged["by user"] <= 4, flagged  # 5 % of 40 is 2; a little room for chance
    assert flagged["attempt by attempt"] >= 3 * max(flagged["by user"], 2), flagged


def _capacity_run(folder: Path, largest: int | None, first_fail: int | None) -> Path:
    folder.mkdir(parents=True)
    (folder / "turns.jsonl").write_text("")
    (folder / "report.json").write_text(
        json.dumps(
            {
                "kind": "duplexctl.load",
                "capacity_search": {
                    "unit": "sessions",
                    "largest_pass": largest,
                    "first_fail": first_fail,
                    "criteria": ["no capacity rejections"],
                },
            }
        )
    )
    return folder


def test_a_capacity_that_fell_is_a_regression_whatever_the_statistics(tmp_path: Path) -> None:
    a = _capacity_run(tmp_path / "a", 4, 5)
    b = _capacity_run(tmp_path / "b", 3, 4)
    doc = compare.compare(a, b)
    row = _row(doc, "capacity")
    assert row["worse"] and row["flagged"] and row["ci_low"] is None  # no test: one number
    assert doc["verdict"] == {
        "word": "REGRESSION",
        "worst": "capacity largest_pass",
        "text": "capacity 4 → 3 (-1, -25.0 %)",
    }
    assert [r["figure"] for r in compare.regressions(doc, 10)] == ["capacity"]
    assert compare.regressions(doc, 30) == []  # a fall of 25 % is within a 30 % allowance
    none = compare.compare(a, _capacity_run(tmp_path / "none", None, 1))
    assert (
        _row(none, "capacity")["candidate"] == 0
        and "no level passed" in _row(none, "capacity")["note"]
    )
    same = compare.compare(a, _capacity_run(tmp_path / "same", 4, 5))
    assert same["flagged"] == [] and same["verdict"]["word"] == "NO SIGNIFICANT CHANGE"
    rose = compare.compare(b, a)
    assert rose["verdict"]["word"] == "IMPROVED" and not _row(rose, "capacity")["worse"]
