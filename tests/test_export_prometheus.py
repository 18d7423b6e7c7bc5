"""``--prometheus-rw`` and the Grafana dashboard against a real Prometheus (issue 36).

One Prometheus for the module (``tests/support/prometheus.py``: Debian's binary, remote-write
receiver and native histograms on, storage in a temporary directory), scraping one
``duplexctl serve`` every second. The module's runs go three at a time, each a real command
pushing every second:

* ``A``: a load on two worker processes (drops, resumes and barge-ins in its mix, two SLOs,
  ``--junit``), native histograms;
* ``B``: a load of the bundled barge-in scenario (the stop latency);
* ``W``: a load with a warm-up (the ``phase`` label);
* ``C``: a load asking for percentiles instead of native histograms (barge-ins too);
* ``E``: a load in the model-native lane against a server that fails every 20th append (the
  ``errors`` series);
* ``R``: a replay.

Then Prometheus's HTTP query API must return every series with the counts of each run's
report, and every query of the dashboard must return data.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.commands import ROOT, SHORT, duplexctl_cmd, serve
from support.paths import RECORDINGS
from support.prometheus import Prometheus, running

from duplexctl.export import dashboard
from duplexctl.export.names import HISTOGRAMS

pytestmark = [pytest.mark.realtime]

INTERVAL = ["--prometheus-rw-interval", "1"]
#: when the module's runs had all ended (the dashboard's queries are evaluated then)
ENDED: list[float] = []


@dataclass
class Run:
    name: str
    returncode: int
    report: dict[str, Any]
    stderr: str
    junit: Path | None

    @property
    def run_id(self) -> str:
        return str(self.report["prometheus_remote_write"]["run_id"])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with serve("--max-sessions", "64", "--reply-seconds", "1.5", "--output-chunk-ms", "200") as (
        url,
        _proc,
    ):
        yield url


@pytest.fixture(scope="module")
def prom(server: str) -> Iterator[Prometheus]:
    host = re.match(r"ws://([^/]+)", server)
    assert host is not None
    with running(scrape=[host.group(1)]) as found:
        yield found


@pytest.fixture(scope="module")
def runs(server: str, prom: Prometheus, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    tmp = tmp_path_factory.mktemp("pushes")
    rw = ["--prometheus-rw", prom.write_url, *INTERVAL]
    with serve("--fault", "fail-append-every=5", "--max-sessions", "16") as (failing, _p):
        commands = {
            "A": [
                "load", SHORT, SHORT, "--url", server, "--sessions", "6", "--duration", "6s",
                "--workers", "2", "--mix", "barge_in=0.6,drop_resume=0.3", "--seed", "7",
                "--slo", "ttfa_p95<=20s", "--slo", "turn_p99<=1ms", "--junit", str(tmp / "a.xml"),
            ],
            "B": [
                "load", str(RECORDINGS / "barge_in.toml"), "--url", server, "--sessions", "4",
                "--duration", "13s", "--workers", "1",  # two turn cycles: a 6 s run ends none
            ],
            "W": [
                "load", SHORT, "--url", server, "--sessions", "3", "--warmup", "3s",
                "--duration", "3s", "--workers", "1",
            ],
            "C": [
                "load", SHORT, SHORT, "--url", server, "--sessions", "8", "--duration", "6s",
                "--workers", "1", "--mix", "barge_in=0.9", "--seed", "3",
                "--prometheus-rw-histograms", "percentiles",
            ],
            "E": [
                "load", SHORT, "--url", failing, "--sessions", "3", "--duration", "4s",
                "--workers", "1", "--auto-response",
            ],
            "R": ["replay", SHORT, "--url", server, "--junit", str(tmp / "r.xml")],
            "S": ["replay", *_two_scenarios(tmp), "--url", server],
        }  # fmt: skip
        out: dict[str, Run] = {}
        for wave in ("ABR", "WCE", "S"):  # three at a time: real-time runs on a 2-core machine
            procs = {
                name: subprocess.Popen(
                    duplexctl_cmd(
                        *commands[name],
                        "--json",
                        *rw,
                        *(["--plain"] if commands[name][0] == "load" else []),
                    ),
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for name in wave
            }
            for name, proc in procs.items():
                stdout, stderr = proc.communicate(timeout=180)
                junit = next((Path(a) for a in commands[name] if a.endswith(".xml")), None)
                out[name] = Run(name, proc.returncode, json.loads(stdout), stderr, junit)
    time.sleep(1.5)  # two more scrapes of the server after the last run
    ENDED.append(time.time())
    return out


def _two_scenarios(tmp: Path) -> list[str]:
    """A suite of two one-turn scenarios (``replay a.toml b.toml``)."""
    paths = []
    for name in ("first", "second"):
        path = tmp / f"{name}.toml"
        path.write_text(f'[[step]]\naction = "say"\nfile = "{SHORT}"\n')
        paths.append(str(path))
    return paths


def _sel(run: Run, **labels: str) -> str:
    pairs = {"run_id": run.run_id, **labels}
    return ", ".join(f'{k}="{v}"' for k, v in pairs.items())


def _value(prom: Prometheus, expr: str) -> float:
    rows = prom.wait_for(expr)
    assert len(rows) == 1, (expr, rows)
    return float(rows[0]["value"][1])


def test_every_run_pushed_all_it_had_and_said_so_in_its_report(runs: dict[str, Run]) -> None:
    for run in runs.values():
        rw = run.report["prometheus_remote_write"]
        assert rw["dropped"] == 0 and rw["sent"] == rw["pushes"] >= 3, (run.name, rw)
        assert f"run_id={run.run_id}" in run.stderr
        assert "warning: --prometheus-rw" not in run.stderr, run.stderr
    assert runs["A"].returncode == 1  # turn_p99<=1ms cannot hold
    assert {n: r.returncode for n, r in runs.items() if n != "A"} == dict.fromkeys("BWCERS", 0)


def test_the_counters_equal_the_load_report(prom: Prometheus, runs: dict[str, Run]) -> None:
    run = runs["A"]
    report = run.report
    assert report["turns"]["count"] > 0
    for outcome, n in report["admission"]["by_kind"].items():
        assert _value(prom, f"duplexctl_attempts_total{{{_sel(run, outcome=outcome)}}}") == n
    for outcome, n in report["turns"]["outcomes"].items():
        assert _value(prom, f"duplexctl_turns_total{{{_sel(run, outcome=outcome)}}}") == n
    resume = report["resume"]
    for family, n in (
        ("duplexctl_drops_total", resume["drops"]),
        ("duplexctl_unplanned_drops_total", resume["unplanned_drops"]),
        ("duplexctl_resumes_total", resume["resumes"]),
        ("duplexctl_resume_failures_total", resume["resume_failures"]),
        ("duplexctl_interruptions_total", report["interruptions"]["attempted"]),
        ("duplexctl_underruns_total", report["turns"]["underruns"]),
    ):
        assert _value(prom, f"{family}{{{_sel(run)}}}") == n, family
    assert resume["drops"] > 0 and resume["resumes"] > 0  # the mix dropped and resumed
    audio = _value(prom, f"duplexctl_audio_received_seconds_total{{{_sel(run)}}}")
    assert math.isclose(
        audio, report["scalars"]["audio_throughput"] * report["wall_s"], rel_tol=1e-3
    )  # wall_s is rounded to ms
    # the sessions are over: both gauges read 0 in the last push, and were up before
    assert _value(prom, f"duplexctl_sessions_active{{{_sel(run)}}}") == 0
    assert _value(prom, f"max_over_time(duplexctl_sessions_active{{{_sel(run)}}}[5m])") > 0
    # pushed every second while it ran, not only at the end
    assert (
        _value(prom, f"count_over_time(duplexctl_turns_total{{{_sel(run, outcome='spoke')}}}[5m])")
        >= 3
    )
    errors = runs["E"].report["errors"]
    assert errors.get("runtime_append_failed", 0) > 0
    for code, n in errors.items():
        assert _value(prom, f"duplexctl_errors_total{{{_sel(runs['E'], code=code)}}}") == n


def test_a_native_histograms_count_equals_the_reports_n(
    prom: Prometheus, runs: dict[str, Run]
) -> None:
    run = runs["A"]
    figures = run.report["figures"]
    assert {"ttfa_ms", "ttft_ms", "turn_ms", "send_lag_ms"} <= set(figures)
    assert "stop_latency_ms" in runs["B"].report["figures"]
    for each in (run, runs["B"]):
        for figure, summary in each.report["figures"].items():
            name = HISTOGRAMS[figure].name
            count = _value(prom, f"histogram_count(sum({name}{{{_sel(each)}}}))")
            assert count == summary["n"], (each.name, figure)
    # a PromQL quantile of the native histogram lands near the report's (schema 5: 2 % buckets)
    p50 = _value(prom, f"histogram_quantile(0.5, sum(duplexctl_ttfa_seconds{{{_sel(run)}}}))")
    assert p50 == pytest.approx(figures["ttfa_ms"]["p50"] / 1000, rel=0.05)
    mean = _value(
        prom,
        f"histogram_sum(sum(duplexctl_send_lag_seconds{{{_sel(run)}}})) / "
        f"histogram_count(sum(duplexctl_send_lag_seconds{{{_sel(run)}}}))",
    )
    assert mean == pytest.approx(figures["send_lag_ms"]["mean"] / 1000, rel=0.01, abs=1e-6)


def test_the_warmup_is_its_own_phase(prom: Prometheus, runs: dict[str, Run]) -> None:
    run = runs["W"]
    report = run.report
    n = report["figures"]["send_lag_ms"]["n"]
    after = _value(
        prom, f'histogram_count(sum(duplexctl_send_lag_seconds{{{_sel(run)}, phase!="warmup"}}))'
    )
    warm = _value(
        prom, f'histogram_count(sum(duplexctl_send_lag_seconds{{{_sel(run)}, phase="warmup"}}))'
    )
    assert after == n > 0
    assert warm > 0  # two seconds of appends before the headline began
    # every append is counted once: the warm-up's and the headline's add up to all of them
    assert after + warm == report["sessions"]["appends"]


def test_percentiles_mode_pushes_the_reports_percentiles(
    prom: Prometheus, runs: dict[str, Run]
) -> None:
    run = runs["C"]
    assert run.report["prometheus_remote_write"]["histograms"] == "percentiles"
    ttfa = run.report["figures"]["ttfa_ms"]
    for q, key in (("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99")):
        got = _value(prom, f"max(duplexctl_ttfa_seconds{{{_sel(run, quantile=q)}}})")
        assert got == pytest.approx(ttfa[key] / 1000, rel=1e-9), q
    assert _value(prom, f"sum(duplexctl_ttfa_seconds_count{{{_sel(run)}}})") == ttfa["n"]


def test_a_replays_pushes_equal_its_report(prom: Prometheus, runs: dict[str, Run]) -> None:
    run = runs["R"]
    turns = run.report["turns"]
    assert turns and all(t["outcome"] == "spoke" for t in turns)
    assert _value(
        prom, f"duplexctl_turns_total{{{_sel(run, outcome='spoke', command='replay')}}}"
    ) == len(turns)
    assert _value(prom, f"duplexctl_attempts_total{{{_sel(run, outcome='admitted')}}}") == 1
    count = _value(prom, f"histogram_count(duplexctl_ttfa_seconds{{{_sel(run)}}})")
    assert count == sum("ttfa_ms" in t["figures"] for t in turns)
    appends = run.report["pacing"]["appends"]
    assert _value(prom, f"histogram_count(duplexctl_send_lag_seconds{{{_sel(run)}}})") == appends


def _substituted(expr: str, runs: dict[str, Run]) -> str:
    ids = "|".join(runs[n].run_id for n in ("A", "B", "C", "E"))
    return (
        expr.replace("$run_id", ids)
        .replace("$node", ".*")
        .replace("$server", ".*")
        .replace("$__rate_interval", "1m")
    )


def test_every_dashboard_query_returns_data(prom: Prometheus, runs: dict[str, Run]) -> None:
    document = dashboard.load()
    queries = list(dashboard.queries(document))
    assert len(queries) >= 40
    in_percentiles = set(runs["C"].report["figures"])
    with_data: dict[str, bool] = {}
    empty = []
    for title, ref, expr in queries:
        rows = prom.query(_substituted(expr, runs), at=ENDED[-1])
        values = [float(r["value"][1]) for r in rows if "value" in r]
        found = any(math.isfinite(v) for v in values)
        with_data[title] = with_data.get(title, False) or found
        quantiles = re.search(r"(duplexctl_\w+)_seconds\{[^}]*quantile=~", expr)
        if quantiles is not None:  # percentiles mode: data where run C recorded the figure
            figure = quantiles.group(1).removeprefix("duplexctl_") + "_ms"
            if found != (figure in in_percentiles):
                empty.append(
                    f"{title} [{ref}] (C has {figure}: {figure in in_percentiles}): {expr}"
                )
        elif not found:
            empty.append(f"{title} [{ref}]: {expr}")
    assert not empty, "\n".join(empty)
    assert all(with_data.values()), [t for t, ok in with_data.items() if not ok]
    # the variables' label_values() queries too, through the series API Grafana uses
    for var in document["templating"]["list"]:
        if var["type"] != "query":
            continue
        found = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"]["query"])
        assert found is not None, var
        match, label = _substituted(found.group(1), runs), found.group(2)
        values = prom.api(f"/api/v1/label/{label}/values", **{"match[]": match})
        if label != "node":  # a local run has no node label: the variable's All matches it
            assert values, var["name"]


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    document = dashboard.load()
    assert document["uid"] and document["schemaVersion"] >= 36
    ids = [p["id"] for p in document["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard.panels(document):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel[
            "gridPos"
        ]["w"] <= 24
        assert [t["refId"] for t in panel["targets"]] == [
            chr(65 + i) for i in range(len(panel["targets"]))
        ]
    # every pushed family a panel reads is one the client pushes (names.py)
    from duplexctl.export.names import FAMILIES

    read = {
        m for _t, _r, e in dashboard.queries(document) for m in re.findall(r"duplexctl_[a-z_]+", e)
    }
    known = set(FAMILIES) | {f"{n}_count" for n in FAMILIES} | {f"{n}_sum" for n in FAMILIES}
    assert read <= known, read - known


def test_the_load_junit_file_has_a_case_per_slo(runs: dict[str, Run]) -> None:
    from support.junit import cases, validate

    run = runs["A"]
    assert run.junit is not None
    validate(run.junit)
    found = cases(run.junit)
    assert found["ttfa_p95<=20s"] == ("passed", "")
    kind, message = found["turn_p99<=1ms"]
    assert kind == "failure" and "turn_p99<=1ms" in message
    assert found["session admission"][0] == "passed"
    replay = runs["R"]
    assert replay.junit is not None
    validate(replay.junit)
    assert cases(replay.junit)["protocol invariants"] == ("passed", "")


def test_a_replay_suite_is_one_pushed_run_of_every_scenarios_turns(
    prom: Prometheus, runs: dict[str, Run]
) -> None:
    suite = runs["S"]
    assert suite.report["kind"] == "duplexctl.replay_suite"
    scenarios = suite.report["scenarios"]
    assert [s["verdict"] for s in scenarios] == ["DONE", "DONE"]  # no expectations: run, not judged
    spoke = sum(s["turns"] for s in scenarios)
    assert spoke == 2
    got = _value(prom, f"duplexctl_turns_total{{{_sel(suite, outcome='spoke', command='replay')}}}")
    assert got == spoke  # both scenarios' turns under the suite's one run id
