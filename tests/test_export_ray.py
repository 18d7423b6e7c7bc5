"""``load --ray --prometheus-rw``: every node's figures pushed under its own ``node`` label
(issue 36), on the suite's two-node Ray cluster, into a real Prometheus (one for the module).

The actors send their recorders' states through the driver's polls; the driver — the one
process that pushes — labels them by node. Each node's series must equal the saved run of
the worker it ran (``--out``'s ``workers/wN``), and their sum the merged report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cluster import report_of, run_load
from support.commands import SHORT, serve
from support.prometheus import Prometheus, running

pytestmark = [pytest.mark.cluster, pytest.mark.realtime]


@pytest.fixture(scope="module")
def prom() -> Iterator[Prometheus]:
    with running() as found:
        yield found


def test_each_node_pushes_under_its_own_label(
    cluster: Any, prom: Prometheus, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    with serve("--max-sessions", "32", "--reply-seconds", "1") as (url, _server):
        run = run_load(
            cluster, SHORT, "--url", url, "--workers-per-node", "1", "--sessions", "6",
            "--duration", "6s", "--out", str(out), "--prometheus-rw", prom.write_url,
            "--prometheus-rw-interval", "1",
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = report_of(out)
    rw = report["prometheus_remote_write"]
    assert rw["dropped"] == 0 and rw["sent"] >= 3, rw
    sel = f'run_id="{rw["run_id"]}"'
    nodes = {w["worker"]: str(w["node"])[:12] for w in report["workers"]}
    assert len(set(nodes.values())) == 2
    pushed = {
        row["metric"]["node"]: float(row["value"][1])
        for row in prom.wait_for(f"sum by (node) (duplexctl_turns_total{{{sel}}})")
    }
    assert set(pushed) == set(nodes.values())
    for index, node in nodes.items():
        part = json.loads((out / "workers" / f"w{index}" / "report.json").read_text())
        assert pushed[node] == part["turns"]["count"], node
        count = prom.wait_for(
            f'histogram_count(sum(duplexctl_send_lag_seconds{{{sel}, node="{node}"}}))'
        )
        assert float(count[0]["value"][1]) == part["figures"]["send_lag_ms"]["n"]
    assert sum(pushed.values()) == report["turns"]["count"] > 0
