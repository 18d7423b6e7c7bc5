"""Where a client's CPU goes by kind: scheduler CPU, user/system split, wake-ups, syscalls.

``compare_clients.py`` says how much CPU each client uses; this says what kind, for the same
workload (its :func:`~bench.compare_clients.command`): CPU from the scheduler's own
nanosecond sum (``/proc/PID/schedstat``; ``/proc/PID/stat``'s user/system split is sampled at
the kernel's tick and only shown for its proportion), voluntary context switches per
session-second (≈ how often the process fell asleep and was woken: each costs ~0.2 ms of CPU
here after an idle gap, ``wake_cost.py``), the CPU spent per such wake-up, and write syscalls
per session-second. Used in
issue 7's round 4 to test whether load's cost is wake-ups (it is not, mostly: see
BENCHMARKS.md). ``--server-root`` runs the server from other code than the clients, for
ablations (a server without some event, say).

    .venv/bin/python bench/client_wakeups.py --sessions 50 --duration 20 --clients load,streamer
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.compare_clients import CLIENTS, command, start_server  # noqa: E402
from bench.procstat import scheduled_seconds  # noqa: E402
from bench.serve_capacity import wait_healthy  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
SETTLE_S = 6.0


@dataclass(frozen=True)
class Sample:
    """One reading of a process's counters."""

    wall: float
    sched_s: float
    user_s: float
    system_s: float
    writes: int
    voluntary: int
    involuntary: int


def sample(pid: int) -> Sample:
    with open(f"/proc/{pid}/stat") as fh:
        stat = fh.read().rsplit(")", 1)[1].split()
    with open(f"/proc/{pid}/io") as fh:
        io = dict(line.split(": ") for line in fh.read().splitlines())
    with open(f"/proc/{pid}/status") as fh:
        status = dict(line.split(":\t") for line in fh.read().splitlines() if ":\t" in line)
    return Sample(
        wall=time.monotonic(),
        sched_s=scheduled_seconds(pid),
        user_s=int(stat[11]) / _TICK,
        system_s=int(stat[12]) / _TICK,
        writes=int(io["syscw"]),
        voluntary=int(status["voluntary_ctxt_switches"]),
        involuntary=int(status["nonvoluntary_ctxt_switches"]),
    )


def measure(cmd: list[str], root: Path, n: int, duration: float) -> str:
    """Run one client; its counters between SETTLE_S after launch and 1 s before the end."""
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(SETTLE_S)
        a = sample(proc.pid)
        time.sleep(duration - SETTLE_S - 1.0)
        b = sample(proc.pid)
    finally:
        proc.communicate(timeout=duration + 120)
    wall = b.wall - a.wall
    session_min = n * wall / 60
    session_s = n * wall
    cpu = (b.sched_s - a.sched_s) / session_min
    ticks = (b.user_s - a.user_s) + (b.system_s - a.system_s)
    user_share = (b.user_s - a.user_s) / ticks if ticks else 0.0
    switches = b.voluntary - a.voluntary
    per_switch_us = 1e6 * (b.sched_s - a.sched_s) / switches if switches else 0.0
    return (
        f"{cpu:.4f} | {100 * user_share:.0f} % | "
        f"{switches / session_s:.2f} | {per_switch_us:.0f} | "
        f"{(b.involuntary - a.involuntary) / session_s:.2f} | "
        f"{(b.writes - a.writes) / session_s:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--clients", default="load,streamer")
    parser.add_argument("--phases", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--duplexctl-root", type=Path, default=HERE.parent, help="client code")
    parser.add_argument("--server-root", type=Path, help="server code (default: client code)")
    args = parser.parse_args()
    if args.duration < SETTLE_S + 5:
        raise SystemExit(f"--duration must be at least {SETTLE_S + 5:g} s")
    clients = [c for c in args.clients.split(",") if c]
    if unknown := set(clients) - set(CLIENTS):
        raise SystemExit(f"unknown client(s) {sorted(unknown)}; choose from {CLIENTS}")
    root = args.duplexctl_root.resolve()
    server_root = (args.server_root or root).resolve()
    server, port, url = start_server(server_root, args.sessions)
    print(f"# {' '.join(sys.argv)}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}; clients from {root}; server from {server_root}")
    print(
        "client | CPU s/session·min (schedstat) | user share | voluntary switches/session·s"
        " | CPU µs per voluntary switch | involuntary/session·s | writes/session·s"
    )
    try:
        wait_healthy(port, server)
        for _ in range(args.repeat):
            for client in clients:
                cmd = command(client, url, args.sessions, args.duration, 2.0, args.phases)
                figures = measure(cmd, root, args.sessions, args.duration)
                print(f"{client} | {figures}", flush=True)
                time.sleep(2)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
