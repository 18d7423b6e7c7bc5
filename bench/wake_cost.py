"""What one event-loop wake-up costs on this machine, by how long the loop slept before it.

Why it matters (issue 7): every real-time client wakes up to send each append, and on these
virtual machines a wake-up after an idle gap costs CPU by itself (the vCPU left idle, caches
went cold) — with 10 send phases of 100 ms appends a process wakes 100 times a second, so
this cost is a per-process floor that ``load``, the bare streamer and ``DuplexClient`` all
pay, whatever they do per session. This script measures it: a uvloop task sleeps ``period``
and then does a fixed piece of work (decoding ``--frames`` JSON frames the size of a
``response.listen`` beat), for each period; CPU comes from the scheduler's own
``/proc/self/schedstat`` (nanoseconds, not tick samples). The "hot" column is the same work
run back to back, without sleeping.

    .venv/bin/python bench/wake_cost.py --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from collections.abc import Callable

import uvloop

LISTEN = json.dumps(
    {
        "type": "response.listen",
        "event_id": "event_" + "0" * 32,
        "session_id": "duplex-" + "0" * 32,
        "epoch": 0,
        "response": {
            "object": "realtime.response",
            "status": "listening",
            "metadata": {"type": "response.listen", "epoch": 0, "reason": "silence_or_noise"},
        },
        "server_event_seq": 2,
    }
)


def cpu_ns() -> int:
    """This process's CPU time in ns: the scheduler's sum when Linux exposes it."""
    try:
        with open("/proc/self/schedstat") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return time.process_time_ns()


def job(frames: int) -> Callable[[], int]:
    def run() -> int:
        total = 0
        for _ in range(frames):
            total += len(json.loads(LISTEN))
        return total

    return run


async def measure(period_s: float, work: Callable[[], int], seconds: float) -> float:
    """Mean CPU µs per wake-up (sleep ``period_s``, then ``work``)."""
    end = time.monotonic() + seconds
    wakes = 0
    c0 = cpu_ns()
    while time.monotonic() < end:
        await asyncio.sleep(period_s)
        work()
        wakes += 1
    return (cpu_ns() - c0) / wakes / 1000


def hot_us(work: Callable[[], int], runs: int = 2000) -> float:
    work()
    c0 = cpu_ns()
    for _ in range(runs):
        work()
    return (cpu_ns() - c0) / runs / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per period and work size")
    parser.add_argument("--periods-ms", default="1,10,100")
    parser.add_argument("--frames", default="0,20", help="JSON frames decoded per wake-up")
    args = parser.parse_args()
    periods = [float(p) / 1000 for p in args.periods_ms.split(",")]
    sizes = [int(f) for f in args.frames.split(",")]
    print(f"# {platform.node()} · {platform.machine()} · Python {platform.python_version()}")
    print("# .venv/bin/python bench/wake_cost.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()
    ))  # fmt: skip
    print(f"{'period ms':>9} {'frames':>6} {'CPU µs/wake':>12} {'hot µs':>7} {'wake µs':>8}")
    for frames in sizes:
        work = job(frames)
        hot = hot_us(work)
        for period in periods:
            per_wake = uvloop.run(measure(period, work, args.seconds))
            print(
                f"{period * 1000:9.0f} {frames:6d} {per_wake:12.1f} {hot:7.1f} {per_wake - hot:8.1f}"
            )


if __name__ == "__main__":
    main()
