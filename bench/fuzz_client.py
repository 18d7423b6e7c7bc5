"""Malformed server streams against the client, at scale (issue 16.4, client side).

Each stream is what a broken server sends after a correct handshake (tests/support/hostile_servers.py
``malformed_stream``: fields missing, mistyped or out of range, wrong types, seqs, audio and
response ids, garbage frames, events after ``session.closed``), served by a real loopback
websocket server, and played into the replay runner through its library entry point
(``Replay.run``: open, a short clip, a client commit, wait for the answer, close) — the code
``replay`` and every ``load`` session run. ``--ending-rate`` of the streams' servers also keep
ending connections (tests/support/hostile_servers.py ``ending_script``: TCP dropped after a few
frames of every connection, ``session.close`` dropped or ignored, resumes hung or refused):
the slowest runs show the client's waits are bounded (docs/protocol.md §6.8). Every run is
bounded (``--run-timeout``). A sample
is also run through the command line (``python -m duplexctl replay``) to see what a user
sees: exit codes and whether anything resembling a traceback reached stderr.

Printed: streams, crashes (an exception escaping the runner), tracebacks (CLI), hangs (a run
that hit its bound), violations recorded by kind, exit codes seen, each run's wall time
(median, p99 and the slowest, apart for the servers that keep ending connections).

    python bench/fuzz_client.py --streams 1000 --cli-sample 30 --seed 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the hostile servers the test suite uses

from support.hostile_servers import (  # noqa: E402
    CLIP,
    Script,
    ending_script,
    hostile,
    malformed_stream,
    replay_against,
)

CRASH_SIGNS = ("Traceback", "exception was never retrieved", "Fatal error")


class Tally:
    def __init__(self) -> None:
        self.streams = 0
        self.crashes: list[str] = []
        self.hangs = 0
        self.violations: Counter[str] = Counter()
        self.exit_codes: Counter[int] = Counter()
        self.cli_runs = 0
        self.cli_tracebacks = 0
        self.cli_hangs = 0
        self.cli_exit_codes: Counter[int] = Counter()
        self.wall_s: dict[bool, list[float]] = {False: [], True: []}  # by "keeps ending"


async def library_run(
    stream: list[str | bytes], script: Script | None, bound_s: float, tally: Tally
) -> None:
    tally.streams += 1
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(bound_s):
            result = await replay_against(stream, script)
        tally.wall_s[script is not None].append(time.monotonic() - t0)
    except TimeoutError:
        tally.hangs += 1
        return
    except Exception as exc:
        tally.crashes.append(f"{type(exc).__name__}: {exc}")
        return
    tally.exit_codes[result.exit_code] += 1
    tally.violations.update(result.report["violation_counts"])


async def cli_run(stream: list[str | bytes], bound_s: float, tally: Tally) -> None:
    async with hostile("duplex", script=Script(after_handshake=stream)) as server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "duplexctl", "replay", str(CLIP), "--url", server.url,
            "--commit", "--turn-detection", "none", "--pace", "fast",
            "--response-timeout-s", "1", "--json",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip
        tally.cli_runs += 1
        try:
            _, err = await asyncio.wait_for(proc.communicate(), bound_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            tally.cli_hangs += 1
            return
        assert proc.returncode is not None
        tally.cli_exit_codes[proc.returncode] += 1
        if any(sign in err.decode(errors="replace") for sign in CRASH_SIGNS):
            tally.cli_tracebacks += 1


async def main(args: argparse.Namespace) -> Tally:
    rng = random.Random(args.seed)
    streams = [
        malformed_stream(rng, frames=args.frames, mutation_rate=rng.choice([0.2, 0.5, 1.0]))
        for _ in range(args.streams)
    ]
    scripts = [ending_script(rng) if rng.random() < args.ending_rate else None for _ in streams]
    tally = Tally()
    slots = asyncio.Semaphore(args.concurrency)

    async def bounded(coro: Any) -> None:
        async with slots:
            await coro

    await asyncio.gather(
        *(
            bounded(library_run(s, script, args.run_timeout, tally))
            for s, script in zip(streams, scripts, strict=True)
        )
    )
    sample = rng.sample(streams, min(args.cli_sample, len(streams)))
    await asyncio.gather(*(bounded(cli_run(s, args.run_timeout * 2, tally)) for s in sample))
    return tally


def report(tally: Tally, args: argparse.Namespace, wall_s: float) -> dict[str, Any]:
    return {
        "streams": tally.streams,
        "frames_per_stream": args.frames,
        "crashes": len(tally.crashes),
        "hangs": tally.hangs,
        "violations_by_kind": dict(tally.violations.most_common()),
        "exit_codes": {str(k): v for k, v in sorted(tally.exit_codes.items())},
        "cli_runs": tally.cli_runs,
        "cli_tracebacks": tally.cli_tracebacks,
        "cli_hangs": tally.cli_hangs,
        "cli_exit_codes": {str(k): v for k, v in sorted(tally.cli_exit_codes.items())},
        "first_crashes": tally.crashes[:5],
        "run_wall_s": _spread(tally.wall_s[False]),
        "run_wall_s_servers_ending_connections": _spread(tally.wall_s[True]),
        "wall_s": round(wall_s, 1),
    }


def _spread(values: list[float]) -> dict[str, float | int | None]:
    """n, median, p99 and the slowest of runs' wall times (s)."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    pick = lambda q: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)  # noqa: E731
    return {"n": len(ordered), "p50": pick(0.5), "p99": pick(0.99), "max": round(ordered[-1], 2)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=14, help="frames per stream")
    parser.add_argument("--cli-sample", type=int, default=30, help="streams also run as CLI")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--run-timeout", type=float, default=30.0, help="bound per run, s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--ending-rate",
        type=float,
        default=0.3,
        help="streams whose server keeps ending connections",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    ns = parser.parse_args()
    t0 = time.monotonic()
    result = report(asyncio.run(main(ns)), ns, time.monotonic() - t0)
    if ns.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    sys.exit(1 if result["crashes"] or result["hangs"] or result["cli_tracebacks"] else 0)
