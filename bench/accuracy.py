"""How close duplexctl's measured time to first audio is to a known, injected one.

The reference server lets us inject the truth: ``duplexctl serve --ttfa-ms 300`` (turn
profile, no jitter) releases a reply's first audio exactly 300 ms after it announced the
response. A client's ``ttfa_created_ms`` (recv first audio delta − recv ``response.created``)
should therefore read 300 ms, and ``ttfa_commit_ms`` (− send of the commit) 300 ms plus the
server's commit handling; every millisecond above that is added by scheduling — the
client's own event loop above all, which is what grows with concurrency. So for 1, 50 and
300 concurrent sessions, in the same run and against the same separate server process:

* ``duplexctl load --workers 1 --turn-detection none --out DIR`` → every turn's
  ``ttfa_created_ms`` / ``ttfa_commit_ms`` from ``turns.jsonl``;
* ``bench/duplexclient_driver.py`` (vLLM-Omni's ``DuplexClient``, its ``EventCollector``
  timings ``response_created_to_first_audio_ms`` / ``commit_to_first_audio_ms``) with the
  same sessions;
* a **witness**: one extra bare session run from this (otherwise idle) process during each
  of those runs, stamping frames as they come off the socket. Its figure is what a nearly
  idle client sees from the same server at the same moment: when it grows too, the server
  (sharing the 2 vCPUs) is late, not the client under test.

Error = measured − injected (300 ms); printed as median / p90 / p99 with n.
Goals (issue 7): duplexctl median error ≤ 5 ms at 1 session, ≤ 15 ms at 300.

    .venv/bin/python bench/accuracy.py --sessions 1,50,300 --duration 45
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bench.compare_clients import (  # noqa: E402
    DUPLEXCTL_ROOT,
    PEER_PYTHON,
    TAIL_MS,
    WAV,
    commit_at_ms,
    describe_root,
    load_turns,
    machine,
)
from bench.serve_capacity import free_port, wait_healthy  # noqa: E402
from bench.streamer import ACK_ALL, COMMIT, SESSION, append_frames  # noqa: E402

TTFA_MS = 300.0
_TYPE_RE = re.compile(r'"type":\s*"([^"]+)"')


def pctl(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (None for no data)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def witness_session(url: str, stop: threading.Event, out: dict[str, list[float]]) -> None:
    """One bare commit-and-ack session; recv stamped right when ``ws.recv`` returns."""
    from websockets.asyncio.client import connect

    frames = append_frames(WAV, 100, silence_s=2.5)
    commit_chunk = int(commit_at_ms() // 100)
    session = {**SESSION, "turn_detection": None}
    async with connect(url, compression=None, max_size=None, proxy=None) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        await ws.recv()
        marks: dict[str, float] = {}

        async def reader() -> None:
            async for raw in ws:
                now = time.monotonic()
                match = _TYPE_RE.search(raw)
                kind = match.group(1) if match else None
                if kind == "response.created":
                    marks["created"] = now
                elif kind == "response.output_audio.delta" and "created" in marks:
                    out["created"].append(1000 * (now - marks.pop("created")) - TTFA_MS)
                    if "commit" in marks:
                        out["commit"].append(1000 * (now - marks.pop("commit")) - TTFA_MS)
                elif kind == "response.done":
                    await ws.send(ACK_ALL)

        task = asyncio.create_task(reader())
        t0 = time.monotonic()
        k = 0
        while not stop.is_set():
            await asyncio.sleep(max(0.0, t0 + k * 0.1 - time.monotonic()))
            await ws.send(frames[k % len(frames)])
            if k % len(frames) == commit_chunk:
                await ws.send(COMMIT)
                marks["commit"] = time.monotonic()
            k += 1
        await ws.send(json.dumps({"type": "session.close"}))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, 5)
        task.cancel()


def start_witness(url: str) -> tuple[threading.Event, threading.Thread, dict[str, list[float]]]:
    stop = threading.Event()
    out: dict[str, list[float]] = {"created": [], "commit": []}
    thread = threading.Thread(
        target=lambda: asyncio.run(witness_session(url, stop, out)), daemon=True
    )
    thread.start()
    return stop, thread, out


def run_load(url: str, n: int, duration: float) -> dict[str, list[float]]:
    """Every turn's error from ``turns.jsonl`` of one ``duplexctl load`` run."""
    with tempfile.TemporaryDirectory() as out_dir:
        cmd = [
            sys.executable, "-m", "duplexctl", "load", *load_turns(duration), "--url", url,
            "--sessions", str(n), "--duration", f"{duration}s", "--workers", "1",
            "--plain", "--turn-detection", "none", "--out", out_dir,
        ]  # fmt: skip
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=duration + 240, cwd=DUPLEXCTL_ROOT[0]
        )
        if proc.returncode not in (0, 1):
            raise SystemExit(f"load failed: {proc.stderr.strip()[-400:]}")
        errors: dict[str, list[float]] = {"created": [], "commit": []}
        for line in (Path(out_dir) / "turns.jsonl").read_text().splitlines():
            figures = json.loads(line).get("figures") or {}
            for key, name in (("created", "ttfa_created_ms"), ("commit", "ttfa_commit_ms")):
                value = (figures.get(name) or {}).get("value")
                if value is not None:
                    errors[key].append(float(value) - TTFA_MS)
        return errors


def run_duplexclient(url: str, n: int, duration: float) -> dict[str, list[float]]:
    """Every turn's error as vLLM-Omni's EventCollector reports it."""
    cmd = [
        str(PEER_PYTHON), str(HERE / "duplexclient_driver.py"), "--url", url,
        "--sessions", str(n), "--duration", str(duration), "--ramp", str(min(5.0, n / 50)),
        "--uvloop", "--raw", "--wav", str(WAV), "--tail-ms", str(TAIL_MS),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 240, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"duplexclient driver failed: {proc.stderr.strip()[-400:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "created": [x - TTFA_MS for x in result["created_to_first_audio_ms"]],
        "commit": [x - TTFA_MS for x in result["commit_to_first_audio_ms"]],
    }


def summary(values: list[float]) -> str:
    if not values:
        return "n=0"
    med, p90, p99 = statistics.median(values), pctl(values, 90), pctl(values, 99)
    return f"{med:+.1f} / {p90:+.1f} / {p99:+.1f} (n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="1,50,300")
    parser.add_argument("--duration", type=float, default=45.0, help="streaming s per run")
    parser.add_argument("--no-duplexclient", action="store_true")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--duplexctl-root", type=Path, default=ROOT, help="code to measure")
    args = parser.parse_args()
    DUPLEXCTL_ROOT[0] = args.duplexctl_root.resolve()
    counts = [int(x) for x in args.sessions.split(",")]
    clients = ["load"] if args.no_duplexclient else ["load", "duplexclient"]
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "duplexctl", "serve", "--port", str(port),
            "--max-sessions", str(max(counts) + 16), "--model-profile", "turn",
            "--chunk-ms", "200", "--ttfa-ms", str(TTFA_MS), "--ttfa-jitter-ms", "0",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=DUPLEXCTL_ROOT[0],
    )  # fmt: skip
    url = f"ws://127.0.0.1:{port}/v1/realtime?duplex=1"
    print(f"# {' '.join(sys.argv)}")
    print(f"# {machine()}; {time.strftime('%Y-%m-%d %H:%M')}; injected ttfa {TTFA_MS:g} ms")
    print(f"# duplexctl from {describe_root()}")
    print("error = measured − 300 ms, median / p90 / p99 (n turns)")
    print("sessions | client | ttfa_created error | ttfa_commit error | witness created error")
    rows: list[dict[str, Any]] = []
    try:
        wait_healthy(port, server)
        for n in counts:
            for client in clients:
                stop, thread, witness = start_witness(url)
                try:
                    if client == "load":
                        errs = run_load(url, n, args.duration)
                    else:
                        errs = run_duplexclient(url, n, args.duration)
                finally:
                    stop.set()
                    thread.join(timeout=15)
                name = "duplexctl load" if client == "load" else "DuplexClient"
                print(
                    f"{n} | {name} | {summary(errs['created'])} | {summary(errs['commit'])}"
                    f" | {summary(witness['created'])}",
                    flush=True,
                )
                rows.append({"sessions": n, "client": client, **errs, "witness": witness})
                time.sleep(2)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print()
    for n, goal in ((1, 5.0), (300, 15.0)):
        for r in rows:
            if r["sessions"] == n and r["client"] == "load" and r["created"]:
                med = statistics.median(r["created"])
                med_c = statistics.median(r["commit"]) if r["commit"] else float("nan")
                verdict = "met" if abs(med) <= goal else "MISSED"
                print(
                    f"goal at {n} session(s): median |error| ≤ {goal:g} ms — ttfa_created "
                    f"{med:+.1f} ms ({verdict}); ttfa_commit {med_c:+.1f} ms"
                )
    if args.json_out:
        args.json_out.write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
