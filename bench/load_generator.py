"""How many real-time sessions one ``duplexctl load`` process drives, and at what CPU cost.

A separate ``duplexctl serve`` process (turn profile, tone replies in 200 ms chunks, 300 ms
time to first audio, admission limit above the largest count) is started once. For each
session count N, in the same run and against the same server:

* ``duplexctl load --workers 1 --sessions N`` (one process, the full client: protocol state,
  playback clock, acks, HDR recording, JSONL), then
* ``bench/streamer.py --sessions N`` (the bare floor: pre-encoded appends, no state),

each for ``--duration`` seconds. Reported side by side: sessions admitted, the client's
send-lag p99, its CPU % and CPU ms per session-second. A count is **held** when every session
was admitted and the load process's send-lag p99 stayed ≤ 10 ms (its own pacing is then far
inside one 100 ms chunk). The ratio column is load's CPU per session over the streamer's.

    .venv/bin/python bench/load_generator.py --sessions 100,200,300 --duration 20
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import resource  # noqa: E402

from bench.serve_capacity import free_port, wait_healthy  # noqa: E402

HELD_LAG_MS = 10.0
WAVS = [str(ROOT / "recordings" / n) for n in ("hello.wav", "followup.wav", "short_ack.wav")]


def children_cpu_s() -> float:
    """CPU seconds of every waited-for child so far (exact, even after the child exited)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_load(url: str, n: int, duration: float) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "duplexctl", "load", *WAVS, "--url", url, "--sessions", str(n),
        "--duration", f"{duration}s", "--workers", "1", "--json", "--plain",
        "--turn-detection", "none",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    out, err = proc.communicate(timeout=duration + 180)
    if proc.returncode not in (0, 1):
        return {"error": (err.strip().splitlines() or ["?"])[-1]}
    report = json.loads(out)
    v = report["validity"]
    wall = report["wall_s"]
    cpu_pct = v["client_cpu_percent"]
    return {
        "admitted_peak": report["admission"]["observed_capacity"],
        "send_lag_p99_ms": v["send_lag_p99_ms"],
        "loop_lag_max_ms": v["loop_lag_max_ms"],
        "cpu_pct": cpu_pct,
        "cpu_ms_per_session_s": 10 * cpu_pct / n,
        "ttfa_commit_p50_ms": report["figures"].get("ttfa_commit_ms", {}).get("p50"),
        "turns": report["turns"]["count"],
        "wall_s": wall,
    }


def run_streamer(url: str, n: int, duration: float) -> dict[str, Any]:
    cmd = [
        sys.executable, str(HERE / "streamer.py"), "--url", url, "--sessions", str(n),
        "--duration", str(duration), "--ramp", "2", "--uvloop",
    ]  # fmt: skip
    cpu0, wall0 = children_cpu_s(), time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=duration + 180)
    cpu, wall = children_cpu_s() - cpu0, time.monotonic() - wall0
    if proc.returncode != 0:
        return {"error": (err.strip().splitlines() or ["?"])[-1]}
    result = json.loads(out.strip().splitlines()[-1])
    pct = 100 * cpu / wall
    return {
        "admitted": result["admitted"],
        "send_lag_p99_ms": result["send_lag_p99_ms"],
        "cpu_pct": pct,
        "cpu_ms_per_session_s": 10 * pct / n,
    }


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="100,200,300")
    parser.add_argument("--duration", type=float, default=20.0)
    args = parser.parse_args()
    counts = [int(x) for x in args.sessions.split(",")]
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "duplexctl", "serve", "--port", str(port),
            "--max-sessions", str(max(counts) + 64), "--model-profile", "turn",
            "--chunk-ms", "200", "--ttfa-ms", "300",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )  # fmt: skip
    url = f"ws://127.0.0.1:{port}/v1/realtime?duplex=1"
    print(f"# {' '.join(sys.argv)}  (cores: {os.cpu_count()}, server pid {server.pid})")
    cols = [
        "sessions", "load_peak", "load_lag_p99", "load_loop_lag_max", "load_cpu_%",
        "load_cpu_ms/sess·s", "streamer_lag_p99", "streamer_cpu_%", "streamer_cpu_ms/sess·s",
        "cpu_ratio", "ttfa_commit_p50", "held",
    ]  # fmt: skip
    print(" | ".join(cols), flush=True)
    try:
        wait_healthy(port, server)
        for n in counts:
            load = run_load(url, n, args.duration)
            time.sleep(2)
            floor = run_streamer(url, n, args.duration)
            time.sleep(2)
            if "error" in load or "error" in floor:
                print(f"{n} | error: {load.get('error') or floor.get('error')}", flush=True)
                continue
            held = load["admitted_peak"] == n and load["send_lag_p99_ms"] <= HELD_LAG_MS
            ratio = load["cpu_ms_per_session_s"] / max(floor["cpu_ms_per_session_s"], 1e-9)
            row = [
                n, load["admitted_peak"], load["send_lag_p99_ms"], load["loop_lag_max_ms"],
                load["cpu_pct"], load["cpu_ms_per_session_s"], floor["send_lag_p99_ms"],
                floor["cpu_pct"], floor["cpu_ms_per_session_s"], ratio,
                load["ttfa_commit_p50_ms"], held,
            ]  # fmt: skip
            print(" | ".join(fmt(v) for v in row), flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
