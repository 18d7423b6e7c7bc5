"""The parts of ``load --ray`` that need no cluster: addresses, placement, per-node pacing
the per-node dashboard lines and the per-second slices (issue 18). The heartbeat is tested on a real cluster, with
the driver killed (tests/test_load_ray.py)."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from support.commands import ROOT

from duplexctl.errors import BadInput, ServerUnreachable
from duplexctl.load.cluster import connect as connect_module
from duplexctl.load.cluster.connect import connect, parse_address, place
from duplexctl.load.cluster.driver import own_pacing
from duplexctl.load.cluster.seconds import ClusterSeconds, SecondTally
from duplexctl.load.config import workers_for
from duplexctl.load.dashboard import Dashboard
from duplexctl.load.recorder import Recorder
from duplexctl.report.histogram import HistogramSet
from duplexctl.report.load_report import build_report


def test_addresses() -> None:
    assert parse_address("10.0.0.5:6379").init == "10.0.0.5:6379"
    assert parse_address("head").port == 6379
    client = parse_address("ray://head")
    assert (client.init, client.port) == ("ray://head:10001", 10001)
    assert parse_address("auto", env={"RAY_ADDRESS": "h:1234"}).init == "h:1234"
    with pytest.raises(BadInput):
        parse_address("head:port")


def test_ray_client_may_take_as_long_to_join_as_ray_itself_allows() -> None:
    """Ray Client's head starts a server process per driver and waits for it (then up to
    30 s for its channel); a CI run on a busy machine failed at a 30 s bound."""
    assert parse_address("ray://head").join_timeout_s >= 60
    assert parse_address("head:6379").join_timeout_s < parse_address("ray://head").join_timeout_s


class FlakyRay:
    """``ray`` as ``connect`` uses it, whose ``init`` fails the way each item of ``fails`` says
    (an exception to raise, or None: it joins)."""

    def __init__(self, *fails: BaseException | None) -> None:
        self.fails = list(fails)
        self.calls = 0

    def is_initialized(self) -> bool:
        return False

    def init(self, **_: object) -> None:
        self.calls += 1
        failure = self.fails.pop(0)
        if failure is not None:
            raise failure


@pytest.fixture
def listening() -> Iterator[int]:
    """A loopback port that accepts connections (what connect checks before ray.init)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


ABORTED = ConnectionAbortedError("Initialization failure from server:\n")


@pytest.mark.parametrize(
    ("address", "fails", "calls", "joined"),
    [
        # Ray's proxy lost the driver's server process (ray-project/ray#63202): tried again
        ("ray://127.0.0.1:{port}", [ABORTED, None], 2, True),
        ("ray://127.0.0.1:{port}", [ABORTED, ABORTED, None], 3, True),
        ("ray://127.0.0.1:{port}", [ABORTED, ABORTED, ABORTED], 3, False),
        # any other failure, or an abort on the GCS port, is the answer at once
        ("ray://127.0.0.1:{port}", [RuntimeError("version mismatch"), None], 1, False),
        ("127.0.0.1:{port}", [ABORTED, None], 1, False),
    ],
)
def test_a_ray_client_join_the_proxy_aborts_is_tried_again_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
    listening: int,
    address: str,
    fails: list[BaseException | None],
    calls: int,
    joined: bool,
) -> None:
    flaky = FlakyRay(*fails)
    waits: list[float] = []
    monkeypatch.setattr(connect_module, "import_ray", lambda: flaky)
    monkeypatch.setattr(connect_module, "time", SimpleNamespace(sleep=waits.append))
    given = address.format(port=listening)
    if joined:
        assert connect(given) is flaky
    else:
        with pytest.raises(ServerUnreachable) as refused:
            connect(given)
        line = str(refused.value)
        assert "\n" not in line and line.startswith(f"--ray {given}: could not join the cluster")
        assert (f"in {calls} attempts" in line) == (calls > 1)
    assert flaky.calls == calls
    # one back-off between attempts, growing: Backoff's waits, jittered
    assert len(waits) == calls - 1 and all(w > 0 for w in waits)


def test_auto_without_a_cluster_is_unreachable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("duplexctl.load.cluster.connect.CURRENT_CLUSTER", tmp_path / "none")
    with pytest.raises(ServerUnreachable, match="ray start --head"):
        parse_address("auto", env={})


def node(i: int, cpus: float, alive: bool = True) -> dict[str, object]:
    return {"NodeID": f"{i:056x}", "Alive": alive, "Resources": {"CPU": cpus}}


def test_placement_spread_or_pinned_per_node() -> None:
    nodes = [node(2, 4), node(1, 2), node(3, 8, alive=False)]
    assert place(nodes, workers=5, per_node=None).nodes == (None,) * 5  # SPREAD
    pinned = place(nodes, workers=1, per_node=2).nodes
    assert pinned == (f"{1:056x}",) * 2 + (f"{2:056x}",) * 2  # dead node left out
    with pytest.raises(BadInput, match="6 CPUs"):
        place(nodes, workers=7, per_node=None)
    with pytest.raises(BadInput, match="fewer CPUs"):
        place(nodes, workers=1, per_node=3)


def test_worker_flags() -> None:
    assert workers_for(None, ray="auto", workers_per_node=None) == {
        "workers": 1,
        "workers_per_node": 1,
    }
    assert workers_for(6, ray="auto", workers_per_node=None)["workers"] == 6
    with pytest.raises(BadInput, match="not both"):
        workers_for(6, ray="auto", workers_per_node=2)
    with pytest.raises(BadInput, match="needs --ray"):
        workers_for(None, ray=None, workers_per_node=2)


def test_a_node_that_could_not_pace_flags_the_run_by_name() -> None:
    slow, fast = Recorder(origin=0.0), Recorder(origin=0.0)
    for i in range(100):
        slow.send_lag(0.01 * i, 250.0)  # a quarter second late: more than a 100 ms chunk
        fast.send_lag(0.01 * i, 1.0)
    for _ in range(20_000):
        fast.send_lag(0.5, 1.0)  # 100 late of 20 100: the pooled p99 stays small
    workers = [
        {"worker": 0, "node": "slow-node", **own_pacing(slow.encode(), 100)},
        {"worker": 1, "node": "fast-node", **own_pacing(fast.encode(), 100)},
    ]
    assert workers[0]["invalid_pacing"] and not workers[1]["invalid_pacing"]
    pooled = Recorder(origin=0.0)
    pooled.merge_encoded(slow.encode()).merge_encoded(fast.encode())
    report = build_report(pooled, config={}, workers=workers, wall_s=1.0, chunk_ms=100, url=None)
    assert report["validity"]["send_lag_p99_ms"] < 100  # the pool alone would hide it
    assert report["validity"]["invalid_pacing"] is True
    assert report["validity"]["invalid_pacing_nodes"] == ["slow-node"]


def test_the_dashboard_shows_one_line_per_node() -> None:
    stream = io.StringIO()
    dash = Dashboard("plain", title="t", stream=stream)
    nodes = {
        "aaaa": {"workers": 2, "active": 40, "send_lag_p99_ms": 3.2, "cpu_percent": 61.0},
        "bbbb": {"workers": 1, "active": 20, "send_lag_p99_ms": 180.0, "pacing_ok": False},
        "cccc (lost)": {"lost": True},
    }
    dash.update({"active": 60}, nodes=nodes)
    text = stream.getvalue()
    assert "node aaaa: 2 workers · active 40 · send lag p99 3.20 ms" in text
    assert "node bbbb:" in text and "INVALID PACING" in text.split("node bbbb:")[1]
    assert "node cccc (lost): LOST" in text


def test_partial_checkpoints_join_to_the_whole_recorder() -> None:
    """What the driver keeps of a worker that dies: its partial checkpoints joined equal the
    worker's whole recorder, across new slices and a doubling of the slice length."""
    from duplexctl.load.cluster.driver import Member
    from duplexctl.load.workers import Checkpoints
    from duplexctl.report.slices import TimeSlicer

    rec = Recorder(origin=0.0, slice_s=1.0)
    rec._slicer = TimeSlicer(1.0, origin=0.0, max_slices=4)  # doubles after 4 s
    checkpoints = Checkpoints(rec)
    member = Member(0, None, None)  # type: ignore[arg-type]
    sizes = []
    for second in range(12):
        for k in range(20):
            rec.send_lag(second + k / 20, float(second + k))
        part = checkpoints.next()
        sizes.append(len(part["slicer"]["slices"]))
        member.absorb(part)
        whole = rec.encode()
        assert member.last_checkpoint()["slicer"] == whole["slicer"], second
    assert rec.slicer.slice_s > 1.0  # it doubled on the way
    assert sizes[:4] == [1, 2, 2, 2], sizes  # before the doubling: the newest two at most


def delta(second: int, turns: int, lags: list[float]) -> dict[str, object]:
    """One worker's second as an actor cuts it (the real SecondTally)."""
    tally = SecondTally(origin=0.0)
    tally.second = second
    for _ in range(turns):
        tally.turn({"ttfa_ms": 500.0, "turn_ms": 900.0})
    tally.session("admitted", errors=0, drops=0)
    tally.send_lags(np.array(lags))
    return tally.cut(active=3)


def test_a_cluster_second_waits_for_every_running_worker_and_is_taken_once(
    tmp_path: Path,
) -> None:
    seconds = ClusterSeconds(tmp_path)
    seconds.add(0, delta(0, 2, [1.0, 2.0]))
    assert seconds.complete([0, 1]) == []  # worker 1 has not sent second 0 yet
    seconds.add(1, delta(0, 1, [3.0]))
    seconds.add(1, delta(0, 5, [9.0]))  # the same second again: taken once
    seconds.add(0, delta(1, 1, [4.0]))
    (row,) = seconds.complete([0, 1])
    assert row["second"] == 0 and row["counts"]["turns"] == 3 and row["active"] == 6
    assert row["workers"]["1"]["figures"]["send_lag_ms"] == 1
    assert HistogramSet.decode(row["histograms"])["send_lag_ms"].count == 3
    # worker 1 finished (or was lost): it holds nobody back; what is left comes out in order
    assert [r["second"] for r in seconds.complete([0])] == [1]
    assert seconds.last is not None and seconds.last["second"] == 1
    lines = (tmp_path / "seconds.jsonl").read_text().splitlines()
    assert [json.loads(line)["second"] for line in lines] == [0, 1]
    stream = io.StringIO()
    Dashboard("plain", title="t", stream=stream).update({}, second=seconds.last)
    assert "second 1: turns 1 · attempts 1 · ttfa p99 " in stream.getvalue()


def test_a_cut_second_starts_the_next_empty() -> None:
    tally = SecondTally(origin=100.0)
    tally.turn({"ttfa_ms": 500.0, "turn_ms": None})
    tally.session("refused", errors=2, drops=0)
    first = tally.cut(active=1)
    assert first["second"] == 0 and tally.due == 102.0
    assert first["counts"] == {"turns": 1, "admitted": 0, "rejected_capacity": 0, "failed": 1,
                               "errors": 2, "drops": 0}  # fmt: skip
    assert set(HistogramSet.decode(first["histograms"]).names()) == {"ttfa_ms"}
    second = tally.cut(active=0)
    assert second["second"] == 1 and not any(second["counts"].values())
    assert second["histograms"] == {}


PRIORITY = "from duplexctl.load.cluster.actor import normal_priority; print(normal_priority())"


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
def test_an_actor_without_the_right_to_renice_keeps_rays_niceness_and_says_so() -> None:
    """Ray starts workers at niceness 15; an actor goes back to 0 where it may (root, or
    ``CAP_SYS_NICE``) and otherwise runs on at 15, without an error: the value it returns
    is what the report's worker entry shows. Run as ``nobody`` for the second case."""
    here = [sys.executable, "-c", PRIORITY]
    # niceness 15 whatever this process runs at (a background lane of the suite runs at 19;
    # root may lower it): what Ray gives its workers
    at_15 = ["nice", "-n", str(15 - os.nice(0))]
    as_root = subprocess.run([*at_15, *here], capture_output=True, text=True)
    assert (as_root.returncode, as_root.stdout.strip()) == (0, "0"), as_root.stderr
    nobody = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
    if subprocess.run([*nobody, sys.executable, "-c", "import duplexctl"], cwd=ROOT).returncode:
        pytest.skip("user nobody cannot read this checkout or its interpreter")
    as_nobody = subprocess.run([*at_15, *nobody, *here], capture_output=True, text=True, cwd=ROOT)
    assert (as_nobody.returncode, as_nobody.stdout.strip()) == (0, "15"), as_nobody.stderr
