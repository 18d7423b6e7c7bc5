"""What scraping the server's ``/metrics`` costs the load generator (issue 19's bench).

One separate ``duplexctl serve`` (the benchmark server of ``compare_clients.py``: turn
profile, 300 ms to first audio, 2 s answers in 200 ms chunks) runs for the whole benchmark;
against it, ``duplexctl load --sessions N --workers 1`` runs with scraping off, every 1 s and
every 100 ms, one after the other, ``--rounds`` times with the order rotated each round
(this machine's speed drifts between runs: docs/testing.md). Each run's own report gives
the client's send-lag p99 and loop-lag p99 and its CPU (``client_cpu_percent``: the load
process over the run, start-up excluded); the server's ``/metrics`` is the real one of
``duplexctl serve`` (about 8 kB of text a scrape). The goal: no measurable send-lag change at 1 s.

    .venv/bin/python bench/scrape_overhead.py --sessions 200 --duration 60 --rounds 3

On a shared machine whose load moves by the minute, one-after-the-other runs differ more by
when they ran than by what they did. ``--together`` runs the three modes *at the same time*
instead, each its own ``load`` process with ``--sessions`` sessions against the one server
(``--sessions 67 --together`` ≈ 200 sessions in all), so a change of the machine's load hits
the three alike and their ratios keep the difference scraping makes
(``bench/side_by_side.py`` does the same for two versions of load).

    .venv/bin/python bench/scrape_overhead.py --sessions 67 --duration 60 --rounds 3 --together
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bench.compare_clients import load_turns, start_server  # noqa: E402
from bench.serve_capacity import wait_healthy  # noqa: E402

MODES = {
    "off": ["--no-server-metrics"],
    "1 s": ["--scrape-interval", "1"],
    "100 ms": ["--scrape-interval", "0.1"],
}


def load_command(url: str, n: int, duration: float, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "duplexctl", "load", *load_turns(duration), "--url", url,
        "--sessions", str(n), "--duration", f"{duration}s", "--workers", "1", "--json",
        "--plain", "--turn-detection", "none", *extra,
    ]  # fmt: skip


def one_run(url: str, n: int, duration: float, extra: list[str]) -> dict[str, Any]:
    cmd = load_command(url, n, duration, extra)
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=duration + 300)
    return figures(run.stdout)


def together(url: str, n: int, duration: float) -> dict[str, dict[str, Any]]:
    """The three modes at once, each its own process: {mode: figures}."""
    procs = {
        mode: subprocess.Popen(
            load_command(url, n, duration, extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        for mode, extra in MODES.items()
    }
    out = {}
    for mode, proc in procs.items():
        stdout, _ = proc.communicate(timeout=duration + 300)
        out[mode] = figures(stdout)
    return out


def figures(stdout: str) -> dict[str, Any]:
    """What one load run's --json report says about its pacing, CPU and scrapes."""
    report = json.loads(stdout)
    v = report["validity"]
    scraped = report.get("server_metrics", {}).get("endpoints", [{}])
    return {
        "send_lag_p99_ms": v["send_lag_p99_ms"],
        "loop_lag_p99_ms": v["loop_lag_p99_ms"],
        "cpu_pct": v["client_cpu_percent"],
        "admitted": report["admission"]["by_kind"].get("admitted", 0),
        "scrapes": scraped[0].get("scrapes", 0) if scraped else 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--together", action="store_true", help="run the three modes at once (shared machine)"
    )
    args = ap.parse_args()
    server, port, url = start_server(ROOT, args.sessions * (3 if args.together else 1))
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    try:
        wait_healthy(port, server)
        names = list(MODES)
        for r in range(args.rounds):
            if args.together:
                for mode, res in together(url, args.sessions, args.duration).items():
                    results[mode].append(res)
                    print(f"round {r + 1} {mode:>6}: {res}", flush=True)
                time.sleep(2.0)
                continue
            order = names[r % len(names) :] + names[: r % len(names)]
            for mode in order:
                res = one_run(url, args.sessions, args.duration, MODES[mode])
                results[mode].append(res)
                print(f"round {r + 1} {mode:>6}: {res}", flush=True)
                time.sleep(2.0)
    finally:
        server.terminate()
        server.wait(timeout=30)
    how = "at the same time, each" if args.together else "one after the other"
    print(
        f"\nload --sessions {args.sessions} --duration {args.duration:g}s, {how}, "
        f"{args.rounds} rounds (medians)"
    )
    print("scraping | send_lag_p99_ms | loop_lag_p99_ms | client_cpu_% | cpu vs off | scrapes")
    base = statistics.median(x["cpu_pct"] for x in results["off"])
    for mode, runs in results.items():
        cpu = statistics.median(x["cpu_pct"] for x in runs)
        print(
            f"{mode:>8} | {statistics.median(x['send_lag_p99_ms'] for x in runs):15.2f} | "
            f"{statistics.median(x['loop_lag_p99_ms'] for x in runs):15.2f} | {cpu:12.1f} | "
            f"{cpu / base if base else float('nan'):10.3f} | "
            f"{statistics.median(x['scrapes'] for x in runs):7.0f}"
        )


if __name__ == "__main__":
    main()
