"""How many real-time sessions one ``duplexctl serve`` process holds on this machine.

For each session count N it starts ``duplexctl serve`` in its own process (admission limit
above N, tone replies, server VAD answering each spoken turn), drives N sessions from a
separate bare-streamer process (100 ms appends of real speech then silence, paced in real
time), and reports side by side: sessions admitted, the server's CPU per session, the
streamer's send lag, and how the server's stop-to-first-audio latency (configured: 300 ms)
holds up. A count is "held" when every session was admitted, the streamer kept its pacing
(send lag p99 below one chunk) and p99 stop-to-first-audio stayed within 300 ms of the
configured value — beyond that the server is no longer keeping up in real time.

    .venv/bin/python bench/serve_capacity.py --sessions 50,100,200,300,400 --duration 20
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.procstat import CpuWindow  # noqa: E402

TTFA_MS = 300.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"duplexctl serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("duplexctl serve did not become healthy")


def measure(n: int, duration: float, uvloop: bool) -> dict[str, float | int | bool | str]:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "duplexctl", "serve", "--port", str(port),
            "--max-sessions", str(n + 16), "--ttfa-ms", str(TTFA_MS), "--chunk-ms", "200",
            "--model-profile", "turn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_healthy(port, server)
        window = CpuWindow(server.pid)
        window.start()
        cmd = [
            sys.executable, str(HERE / "streamer.py"),
            "--url", f"ws://127.0.0.1:{port}/v1/realtime?duplex=1",
            "--sessions", str(n), "--duration", str(duration), "--ramp", str(min(10.0, n / 30)),
        ]  # fmt: skip
        if uvloop:
            cmd.append("--uvloop")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
        cpu, wall = window.stop()
        if out.returncode != 0:
            return {"sessions": n, "error": out.stderr.strip().splitlines()[-1:][0]}
        result = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
        server.wait(timeout=30)
    held = (
        result["admitted"] == n
        and result["send_lag_p99_ms"] < 100
        and result["stop_to_first_audio_p99_ms"] <= TTFA_MS + 300
    )
    return {
        **result,
        "server_cpu_s": round(cpu, 2),
        "server_cpu_pct": round(100 * cpu / wall, 1),
        "server_cpu_ms_per_session_s": round(1000 * cpu / wall / n, 3),
        "held": held,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="50,100,200,300")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--no-uvloop", action="store_true", help="streamer on asyncio's loop")
    args = parser.parse_args()
    counts = [int(x) for x in args.sessions.split(",")]
    print(f"# {' '.join(sys.argv)}  (cores: {os.cpu_count()})")
    cols = [
        "sessions",
        "admitted",
        "server_cpu_pct",
        "server_cpu_ms_per_session_s",
        "send_lag_p99_ms",
        "stop_to_first_audio_p50_ms",
        "stop_to_first_audio_p99_ms",
        "responses_done",
        "held",
    ]
    print(" | ".join(cols))
    for n in counts:
        row = measure(n, args.duration, not args.no_uvloop)
        print(" | ".join(str(round(v, 1) if isinstance(v, float) else v) for v in (row.get(c, "-") for c in cols)), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
