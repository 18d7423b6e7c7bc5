"""The same load through ``--ray`` (a two-node Ray cluster on this host) and ``--workers 2``.

Issue 18's goal: Ray costs at most 10 % more CPU per session than local worker processes
and adds at most a few seconds of start-up. For each N (default 100 and 200 closed-loop
sessions against one ``duplexctl serve``), two runs side by side:

* ``local``: ``duplexctl load --workers 2``;
* ``ray``: ``duplexctl load --ray ADDRESS --workers-per-node 1`` on a
  ``ray.cluster_utils.Cluster`` of two nodes (one CPU each, as two load hosts would give);
  the cluster is started once and warmed up by one short untimed run, and its own cost
  while a run goes (raylets, GCS, agents) is counted against Ray, since a user pays it.

The two modes alternate, ``--rounds`` times per N; the table gives each round and the
median (the machine is shared: identical runs differ by 10-20 %).

Figures per run: **CPU s per session-minute** (every process of the load from /proc, reaped
children included: for ``local`` the ``load`` process and its workers; for ``ray`` the driver
plus every process of the cluster — raylets, GCS, agents, actors; never the server), **send-lag p99** (the report's), **start-up s** (from
launching ``load`` to the common start, the origin of the report's slices, both on this
host's monotonic clock). Usage::

    .venv/bin/python bench/ray_vs_local.py [--sessions 100 200] [--duration 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.procstat import descendants  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
HELLO = str(ROOT / "recordings" / "hello.wav")


def all_cpu_seconds(pid: int) -> float:
    """``pid``'s CPU with that of its reaped children (utime+stime+cutime+cstime)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / TICKS


def tree_cpu(exclude: set[int]) -> float:
    """CPU of every process below this one (reaped ones included), minus ``exclude``'s
    subtrees (the server)."""
    skip: set[int] = set()
    for pid in exclude:
        skip |= {pid, *descendants(pid)}
    own = all_cpu_seconds(os.getpid())
    with open(f"/proc/{os.getpid()}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    own -= (int(fields[11]) + int(fields[12])) / TICKS  # this script's own work is not load
    return own + sum(all_cpu_seconds(p) for p in descendants(os.getpid()) if p not in skip)


def start_server() -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "duplexctl", "serve", "--port", "0", "--max-sessions", "1000",
         "--reply-seconds", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip
    assert server.stdout is not None
    while True:
        line = server.stdout.readline()
        found = re.search(r"listening on (ws://\S+)", line)
        if found:
            return server, found.group(1)
        if not line:
            raise SystemExit("duplexctl serve did not start")


def reaped_cpu() -> float:
    """CPU of this script's children that have ended and been waited for (a ``load`` run)."""
    with open(f"/proc/{os.getpid()}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / TICKS


def one_run(
    mode: str, n: int, duration: float, url: str, server: int, extra: list[str]
) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix=f"ray-vs-local-{mode}-{n}-"))
    cmd = [sys.executable, "-m", "duplexctl", "load", HELLO, "--url", url, "--sessions", str(n),
           "--duration", f"{duration:g}s", "--plain", "--out", str(out / "run"), *extra]  # fmt: skip
    # local: the load process and its workers only (the idle cluster's CPU is not theirs);
    # ray: the driver and the whole cluster
    measure = reaped_cpu if mode == "local" else (lambda: tree_cpu({server}))
    cpu0 = measure()
    launched = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=duration + 300)
    cpu = measure() - cpu0
    if run.returncode != 0:
        raise SystemExit(f"{mode} {n}: exit {run.returncode}: {run.stderr[-2000:]}")
    report = json.loads((out / "run" / "report.json").read_text())
    session_min = n * duration / 60
    return {
        "mode": mode,
        "sessions": n,
        "cpu_s": cpu,
        "cpu_per_session_min": cpu / session_min,
        "send_lag_p99_ms": report["validity"]["send_lag_p99_ms"],
        "startup_s": report["recorder"]["origin"] - launched,
        "admitted": report["sessions"]["admitted"],
        "nodes": len({w.get("node", "local") for w in report["workers"]}),
        "load_avg": os.getloadavg()[0],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"$ {' '.join(sys.argv)}")
    print(f"machine: nproc {os.cpu_count()}, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC")  # fmt: skip
    from ray.cluster_utils import Cluster

    server, url = start_server()
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    node = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        print(f"cluster of two nodes up in {time.monotonic() - t0:.1f} s (once)")
        modes = {
            "local": ["--workers", "2"],
            "ray": ["--ray", cluster.address, "--workers-per-node", "1"],
        }
        for mode, extra in modes.items():  # warm-up, untimed: Ray's first workers, caches
            one_run(mode, 10, 3.0, url, server.pid, extra)
        for n in args.sessions:
            for _ in range(args.rounds):
                for mode, extra in modes.items():
                    rows.append(one_run(mode, n, args.duration, url, server.pid, extra))
    finally:
        cluster.shutdown()
        server.terminate()
        server.wait(30)
    print("| N | mode | CPU s / session-min, per round (median) | send-lag p99 ms | start-up s |"
          " admitted | load avg |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for n in args.sessions:
        for mode in ("local", "ray"):
            rs = [r for r in rows if r["mode"] == mode and r["sessions"] == n]
            cpu = " / ".join(f"{r['cpu_per_session_min']:.3f}" for r in rs)
            med = statistics.median(r["cpu_per_session_min"] for r in rs)
            lag = " / ".join(f"{r['send_lag_p99_ms']:.1f}" for r in rs)
            up = " / ".join(f"{r['startup_s']:.1f}" for r in rs)
            adm = " / ".join(str(r["admitted"]) for r in rs)
            la = " / ".join(f"{r['load_avg']:.1f}" for r in rs)
            print(f"| {n} | {mode} ({rs[0]['nodes']} node(s)) | {cpu} (**{med:.3f}**) | {lag} | "
                  f"{up} | {adm} | {la} |")  # fmt: skip
    for n in args.sessions:
        ratios = [
            ray["cpu_per_session_min"] / local["cpu_per_session_min"]
            for local, ray in zip(
                [r for r in rows if r["mode"] == "local" and r["sessions"] == n],
                [r for r in rows if r["mode"] == "ray" and r["sessions"] == n],
                strict=True,
            )
        ]
        ups = [
            ray["startup_s"] - local["startup_s"]
            for local, ray in zip(
                [r for r in rows if r["mode"] == "local" and r["sessions"] == n],
                [r for r in rows if r["mode"] == "ray" and r["sessions"] == n],
                strict=True,
            )
        ]
        print(f"N={n}: ray / local CPU per session-minute per round "
              f"{' / '.join(f'{x:.2f}' for x in ratios)} (median **{statistics.median(ratios):.2f}**,"
              f" goal <= 1.10); start-up difference {' / '.join(f'{u:+.1f}' for u in ups)} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
