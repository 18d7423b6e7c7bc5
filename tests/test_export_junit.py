"""``--junit FILE`` of probe, load and replay (issue 36): every file validates against the
JUnit schema (Jenkins xUnit's ``junit-10.xsd``, tests/fixtures/junit/) and reads back with
junitparser, and its cases say what the command's verdict says — real commands against
``duplexctl serve`` or the embedded server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.commands import ROOT, SHORT, closed_port_url, duplexctl_cmd, serve
from support.junit import cases, suites, validate

from duplexctl.export import junit
from duplexctl.export.junit_cases import replay_suite

pytestmark = [pytest.mark.realtime]


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        duplexctl_cmd(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_probe_a_case_per_probe_passed_failed_with_evidence_or_skipped(tmp_path: Path) -> None:
    path = tmp_path / "probe.xml"
    with serve("--fault", "stuck-gate") as (url, _proc):
        run = _run(
            "probe", "--url", url, "--only", "handshake", "--only", "barge-in-race",
            "--only", "resume-after-grace", "--junit", str(path),
        )  # fmt: skip
    assert run.returncode == 1, run.stderr
    validate(path)
    found = cases(path)
    assert found["handshake"] == ("passed", "")
    kind, message = found["barge-in-race"]
    assert kind == "failure" and message
    assert found["resume-after-grace"][0] == "skipped" and "grace" in found["resume-after-grace"][1]
    (suite,) = suites(path)
    failed = next(c for c in suite if c.name == "barge-in-race")
    evidence = failed.result[0].text or ""
    assert " ms " in evidence and ("out" in evidence and "in " in evidence), evidence[:500]
    assert int(suite.tests) == 3 and int(suite.failures) == 1 and int(suite.skipped) == 1


def test_probe_that_cannot_reach_its_server_writes_an_error(tmp_path: Path) -> None:
    path = tmp_path / "probe.xml"
    run = _run("probe", "--url", closed_port_url(), "--junit", str(path))
    assert run.returncode == 3
    validate(path)
    ((kind, message),) = cases(path).values()
    assert kind == "error" and "refused" in message.lower()


@pytest.mark.timing  # level 1 must pass: a step fails as invalid_pacing when the client cannot keep time
def test_load_capacity_search_a_case_per_level(tmp_path: Path) -> None:
    path = tmp_path / "load.xml"
    run = _run(
        "load", SHORT, "--find-capacity", "--step-duration", "2s", "--max-level", "2",
        "--server-max-sessions", "1", "--server-option", "disconnect_grace_s=1", "--workers", "1",
        "--plain", "--junit", str(path),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    validate(path)
    found = cases(path)
    levels = {name: kind for name, (kind, _m) in found.items() if name.startswith("level ")}
    # one slot: level 1 meets the criteria, level 2 is rejected for capacity
    assert levels == {"level 1 sessions": "passed", "level 2 sessions": "failure"}
    assert "capacity rejections" in found["level 2 sessions"][1]
    assert found["a level met the capacity criteria"] == ("passed", "")


def test_load_that_admits_nobody_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "load.xml"
    run = _run(
        "load", SHORT, "--url", closed_port_url(), "--sessions", "1", "--duration", "1s",
        "--workers", "1", "--plain", "--slo", "ttfa_p95<=1s", "--junit", str(path),
    )  # fmt: skip
    assert run.returncode == 3
    validate(path)
    found = cases(path)
    assert (
        found["session admission"][0] == "error"
        and "no session was admitted" in found["session admission"][1]
    )
    assert found["ttfa_p95<=1s"] == ("failure", "ttfa_p95<=1s: no samples")


SCENARIO = f"""
name = "junit_case"
[settings]
turn_detection = "server_vad"
[[step]]
action = "say"
file = "{SHORT}"
[[step]]
action = "wait"
expect = {{ outcome = "spoke", ttfa_ms = "<1" }}
[expect]
drops = "==0"
"""


def test_replay_a_case_per_expectation(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    path = tmp_path / "replay.xml"
    run = _run("replay", str(scenario), "--junit", str(path), "--json")
    assert run.returncode == 1, run.stderr  # ttfa_ms < 1 cannot hold
    validate(path)
    found = cases(path)
    assert found["step 2: outcome spoke"][0] == "passed"
    kind, message = found["step 2: ttfa_ms <1"]
    assert kind == "failure" and "ttfa_ms" in message
    assert found["run: drops ==0"] == ("passed", "")
    assert found["protocol invariants"] == ("passed", "")
    assert found["every turn answered"] == ("passed", "")


def test_replay_that_cannot_reach_its_server_writes_an_error(tmp_path: Path) -> None:
    path = tmp_path / "replay.xml"
    run = _run("replay", SHORT, "--url", closed_port_url(), "--junit", str(path))
    assert run.returncode == 3
    validate(path)
    ((kind, _message),) = cases(path).values()
    assert kind == "error"


def test_one_suite_per_scenario(tmp_path: Path) -> None:
    """The multi-scenario replay's file: ``replay_suite`` of each report, one ``write``."""
    reports = [
        {"scenario": {"name": name}, "turns": [{"expectations": [
            {"step": 1, "turn": 1, "name": "outcome", "expected": "spoke", "actual": "spoke", "ok": ok}
        ]}], "expectations": {"failed": [], "not_reached": [], "run": []}}
        for name, ok in (("first", True), ("second", False))
    ]  # fmt: skip
    path = junit.write(tmp_path / "suite.xml", [replay_suite(r) for r in reports])
    validate(path)
    names = [s.name for s in suites(path)]
    assert names == ["duplexctl replay first", "duplexctl replay second"]
    assert [int(s.failures) for s in suites(path)] == [0, 1]


@pytest.mark.parametrize("command", ["probe", "load", "replay"])
def test_a_junit_path_that_cannot_be_written_is_exit_2(tmp_path: Path, command: str) -> None:
    args = {"probe": ["probe"], "load": ["load", SHORT, "--sessions", "1", "--duration", "1s"],
            "replay": ["replay", SHORT]}[command]  # fmt: skip
    for bad in (str(tmp_path), str(tmp_path / "missing" / "x.xml")):
        run = _run(*args, "--junit", bad, timeout=60)
        assert run.returncode == 2, run.stderr
        (line,) = run.stderr.strip().splitlines()
        assert line.startswith("duplexctl: error: --junit")


def test_a_replay_suite_is_one_test_suite_per_scenario(tmp_path: Path) -> None:
    """``replay a.toml b.toml --junit``: CI sees each scenario as a suite of its own, its
    expectations as cases, a failing scenario's failures in its suite only."""
    ok, failing = tmp_path / "ok.toml", tmp_path / "failing.toml"
    ok.write_text(
        f'[[step]]\naction = "say"\nfile = "{SHORT}"\nexpect = {{ ttfa_ms = "<20000" }}\n'
    )
    failing.write_text(
        f'[[step]]\naction = "say"\nfile = "{SHORT}"\nexpect = {{ ttfa_ms = "<1" }}\n'
    )
    path = tmp_path / "suite.xml"
    run = _run("replay", str(ok), str(failing), "--junit", str(path))
    assert run.returncode == 1, run.stderr
    validate(path)
    by_suite = {s.name: s for s in suites(path)}
    assert len(by_suite) == 2, list(by_suite)
    ok_suite = next(s for name, s in by_suite.items() if "ok" in name)
    failing_suite = next(s for name, s in by_suite.items() if "failing" in name)
    assert int(ok_suite.failures) == 0 and int(ok_suite.tests) >= 1
    assert int(failing_suite.failures) >= 1
