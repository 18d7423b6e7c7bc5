"""Memory over time: ``duplexctl serve`` under ``duplexctl load`` with the behaviour mix, every
process's RSS sampled (issue 16, item 5).

Starts the server and the load generator as separate processes on loopback (the load's
workers are found by walking /proc for the load process's descendants, so they are sampled
too), samples the resident set size of each every ``--interval`` seconds into a CSV (one row
per process per sample: t_s, role, pid, rss_mb), and prints per process: RSS at start, after
the warm-up, at the end, and the slope over the second half of the run from a least-squares
fit (MB/min). A process in steady state shows a slope of about 0; anything that grows per
session or per event shows as a positive slope that does not flatten.

    .venv/bin/python bench/soak.py                     # 30 minutes, 20 sessions
    .venv/bin/python bench/soak.py --duration 600 --csv soak.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.procstat import descendants  # noqa: E402
from bench.serve_process import serve  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
MIX = "barge_in=0.2,cancel=0.1,drop_resume=0.05"


def rss_mb(pid: int) -> float | None:
    """Resident set size in MB; None once the process is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE / 1e6
    except (OSError, IndexError, ValueError):
        return None


def command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def role_of(pid: int, load_pid: int) -> str:
    if pid == load_pid:
        return "load"
    cmd = command_of(pid)
    if "resource_tracker" in cmd:
        return "load resource tracker"
    return "load worker"


@dataclass
class Series:
    role: str
    pid: int
    points: list[tuple[float, float]] = field(default_factory=list)  # (t_s, rss_mb)

    def at(self, t_s: float) -> float | None:
        """The first sample at or after ``t_s``."""
        return next((mb for t, mb in self.points if t >= t_s), None)

    def slope_mb_per_min(self, since_s: float) -> float | None:
        pts = [(t, mb) for t, mb in self.points if t >= since_s]
        if len(pts) < 3:
            return None
        n = len(pts)
        mt = sum(t for t, _ in pts) / n
        mm = sum(mb for _, mb in pts) / n
        var = sum((t - mt) ** 2 for t, _ in pts)
        if var == 0:
            return None
        return 60.0 * sum((t - mt) * (mb - mm) for t, mb in pts) / var


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1800.0, help="seconds of load")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--mix", default=MIX)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds before 'after warm-up'")
    parser.add_argument(
        "--workers", type=int, default=None, help="load --workers (default: its own)"
    )
    parser.add_argument("--csv", type=Path, default=None, help="samples (default: a temp file)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="soak_"))
    csv_path = args.csv or workdir / "rss.csv"
    server_args = ["--max-sessions", str(4 * args.sessions)]
    with serve(server_args, workdir / "serve.log") as server:
        load_cmd = [
            sys.executable, "-m", "duplexctl", "load", "--url", server.url,
            "--sessions", str(args.sessions), "--mix", args.mix,
            "--duration", f"{args.duration:.0f}s", "--plain", "--out", str(workdir / "load"),
        ]  # fmt: skip
        if args.workers is not None:
            load_cmd += ["--workers", str(args.workers)]
        with open(workdir / "load.log", "wb") as load_log:
            load = subprocess.Popen(load_cmd, stdout=load_log, stderr=subprocess.STDOUT)
        series: dict[int, Series] = {}
        t0 = time.monotonic()
        time.sleep(min(2.0, args.interval))  # the load's interpreter and workers start
        deadline = t0 + args.duration + 180.0  # load ends by itself; this is the bound
        try:
            with open(csv_path, "w", newline="") as fh:
                out = csv.writer(fh)
                out.writerow(["t_s", "role", "pid", "rss_mb"])
                while True:
                    t = time.monotonic() - t0
                    pids = {server.pid: "serve", load.pid: "load"}
                    for pid in descendants(load.pid):
                        pids[pid] = role_of(pid, load.pid)
                    for pid, role in pids.items():
                        mb = rss_mb(pid)
                        if mb is None:
                            continue
                        series.setdefault(pid, Series(role, pid)).points.append((t, mb))
                        out.writerow([f"{t:.1f}", role, pid, f"{mb:.1f}"])
                    fh.flush()
                    if load.poll() is not None or time.monotonic() > deadline:
                        break
                    time.sleep(args.interval)
        finally:
            if load.poll() is None:
                load.send_signal(signal.SIGINT)
                try:
                    load.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    load.kill()
        wall = time.monotonic() - t0
    half = wall / 2
    print(
        f"soak: duplexctl serve {' '.join(server_args)} + duplexctl load --sessions "
        f"{args.sessions} --mix {args.mix} --duration {args.duration:.0f}s "
        f"(load exit {load.returncode}, serve exit {server.exit_code}); {wall:.0f} s, RSS every "
        f"{args.interval:g} s"
    )
    print(f"{'process':<24}{'pid':>8}{'start':>9}{'warm':>9}{'end':>9}{'slope 2nd half':>18}")
    for s in sorted(series.values(), key=lambda s: (s.role != "serve", s.role, s.pid)):
        if s.role == "load resource tracker":
            continue
        start = s.points[0][1]
        warm = s.at(args.warmup)
        end = s.points[-1][1]
        slope = s.slope_mb_per_min(half)
        print(
            f"{s.role:<24}{s.pid:>8}{start:>8.1f}M"
            + (f"{warm:>8.1f}M" if warm is not None else f"{'-':>9}")
            + f"{end:>8.1f}M"
            + (f"{slope:>+11.2f} MB/min" if slope is not None else f"{'-':>18}")
        )
    print(f"samples: {csv_path}; logs: {workdir}")
    return 0 if server.exit_code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
