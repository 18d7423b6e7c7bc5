"""Start-up cost of the CLI: ``duplexctl --help`` and a one-turn ``replay``, wall time.

People type ``duplexctl --help`` and run one-turn replays in loops (CI smoke checks, shell
scripts), so the interpreter start plus imports is paid every time; issue 7 wants ``--help``
under 0.5 s. Measured hyperfine-style: ``--warmup`` untimed runs (page cache, .pyc), then
``--runs`` timed runs of each command, reporting median, min, max and the spread. The
replay target is a separate ``duplexctl serve`` started once (so server start-up is not
counted); the replay speaks ``recordings/short_ack.wav`` in real time and waits for the
answer (300 ms time to first audio, 0.5 s reply), so its wall time is mostly the audio
itself — the row ``replay − audio`` subtracts the clip and answer length to show the
overhead. ``python -c pass`` is the floor every command pays.

    .venv/bin/python bench/startup.py --runs 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bench.compare_clients import DUPLEXCTL_ROOT, describe_root, machine  # noqa: E402
from bench.serve_capacity import free_port, wait_healthy  # noqa: E402

CLIP = ROOT / "recordings" / "short_ack.wav"
REPLY_S = 0.5
TTFA_MS = 300.0
HELP_GOAL_S = 0.5


def timed(cmd: list[str], runs: int, warmup: int) -> list[float]:
    """Wall seconds of ``runs`` executions (after ``warmup`` untimed ones); fails loudly."""
    samples = []
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        proc = subprocess.run(
            cmd, capture_output=True, text=True, cwd=DUPLEXCTL_ROOT[0], timeout=120
        )
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-400:]}")
        if i >= warmup:
            samples.append(elapsed)
    return samples


def row(name: str, samples: list[float], offset: float = 0.0) -> str:
    s = [x - offset for x in samples]
    return (
        f"{name} | {statistics.median(s):.3f} | {min(s):.3f} | {max(s):.3f} | "
        f"{statistics.pstdev(s):.3f} | {len(s)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--replay-runs", type=int, default=5)
    parser.add_argument("--duplexctl-root", type=Path, default=ROOT, help="code to measure")
    args = parser.parse_args()
    DUPLEXCTL_ROOT[0] = args.duplexctl_root.resolve()
    clip_s = (
        json.loads((ROOT / "recordings" / "manifest.json").read_text())["files"][CLIP.name][
            "duration_ms"
        ]
        / 1000
    )
    exe = [sys.executable, "-m", "duplexctl"]  # imported from --duplexctl-root (cwd)
    print(f"# {' '.join(sys.argv)}")
    print(f"# {machine()}; {time.strftime('%Y-%m-%d %H:%M')}; duplexctl from {describe_root()}")
    print("command | median s | min s | max s | stdev s | runs")
    floor = timed([sys.executable, "-c", "pass"], args.runs, args.warmup)
    print(row("python -c pass", floor), flush=True)
    help_ = timed([*exe, "--help"], args.runs, args.warmup)
    print(row("duplexctl --help", help_), flush=True)
    script = timed([str(ROOT / ".venv" / "bin" / "duplexctl"), "--help"], args.runs, args.warmup)
    print(row(".venv/bin/duplexctl --help", script), flush=True)
    port = free_port()
    server = subprocess.Popen(
        [
            *exe, "serve", "--port", str(port), "--max-sessions", "4",
            "--model-profile", "turn", "--ttfa-ms", str(TTFA_MS),
            "--reply-seconds", str(REPLY_S), "--chunk-ms", "100",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=DUPLEXCTL_ROOT[0],
    )  # fmt: skip
    try:
        wait_healthy(port, server)
        url = f"ws://127.0.0.1:{port}/v1/realtime?duplex=1"
        replay = timed([*exe, "replay", str(CLIP), "--url", url, "--json"], args.replay_runs, 1)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(row("duplexctl replay short_ack.wav (1 turn)", replay), flush=True)
    print(row("  replay − (clip + ttfa + reply)", replay, clip_s + TTFA_MS / 1000 + REPLY_S))
    med = statistics.median(help_)
    verdict = "met" if med < HELP_GOAL_S else "MISSED"
    print(f"\ngoal: duplexctl --help median < {HELP_GOAL_S} s: {med:.3f} s ({verdict})")


if __name__ == "__main__":
    main()
