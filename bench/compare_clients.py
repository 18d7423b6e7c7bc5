"""CPU per session-minute and pacing of three clients driving the same real-time sessions.

Issue 7's generator-efficiency goal is a *ratio* measured side by side, because these
machines are shared and their speed drifts (docs/testing.md): ``duplexctl load`` must stay within
1.5x of the bare streamer's CPU and be at least 2x cheaper per session than vLLM-Omni's own
``DuplexClient``. So one separate ``duplexctl serve`` process (turn profile, 300 ms time to
first audio, 2 s tone replies in 200 ms chunks) is started once and, for each session count
N, the three clients run one after the other against it, each as its own process:

* ``load``: ``duplexctl load hello.wav hello.wav … --workers 1 --turn-detection none`` (the
  full client; one session per user for the whole run, see :func:`load_turns`);
* ``streamer``: ``bench/streamer.py --commit-at-ms`` (the practical floor);
* ``duplexclient``: ``bench/duplexclient_driver.py`` under the peer venv's Python;

All three stream ``recordings/hello.wav`` in 100 ms appends on an absolute schedule,
commit 200 ms after the end of speech, let the 2 s answer play and acknowledge it, repeat.
They send at the same instants: every schedule starts on one of ``--phases`` send phases
per chunk (``load --send-phases``; ``bench/phase_grid.py`` for the other two), because how
many sessions send at one instant decides how often a process wakes up, a large part of its
CPU. Load and the DuplexClient driver ack as the answer plays (~10 acks per answer), the
streamer once per answer (it is the floor).

The machine drifts between runs by 10-20 %; ``--repeat K`` runs K rounds per N (client
order rotated each round) and takes the ratios from the medians.

CPU is read from ``/proc`` for the client's process tree at two instants inside the steady
state (``--settle`` s after launch, and 1 s before the streaming ends), so interpreter
start-up, connection ramp and close are excluded; the whole-process CPU (rusage, start-up
included) is printed too. A client *holds* N when all N sessions were admitted and its
send-lag p99 stayed ≤ 10 ms.

    .venv/bin/python bench/compare_clients.py --sessions 50,100,200,300 --duration 20 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from bench.procstat import cpu_seconds, descendants  # noqa: E402
from bench.serve_capacity import free_port, wait_healthy  # noqa: E402

HELD_LAG_MS = 10.0
WAV = ROOT / "recordings" / "hello.wav"
TAIL_MS = 200.0
PEER_PYTHON = (
    Path(
        os.environ.get(
            "DUPLEXCTL_PEER_VENV",
            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "duplexctl-peer-venv",
        )
    )
    / "bin"
    / "python"
)
CLIENTS = ("load", "streamer", "duplexclient")
#: Where ``python -m duplexctl`` is imported from (its cwd). Other engineers edit the working
#: tree while benchmarks run, so ``--duplexctl-root`` can point at a snapshot of a commit
#: (``git archive HEAD | tar -x -C DIR``) to measure fixed code.
DUPLEXCTL_ROOT = [ROOT]


def start_server(root: Path, sessions: int) -> tuple[subprocess.Popen[bytes], int, str]:
    """The benchmark's ``duplexctl serve`` (code from ``root``), room for ``sessions``: turn
    profile, 300 ms to first audio, 2 s answers in 200 ms chunks. Returns it, its port, its URL."""
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "duplexctl", "serve", "--port", str(port),
            "--max-sessions", str(sessions + 64), "--model-profile", "turn",
            "--chunk-ms", "200", "--ttfa-ms", "300",
        ],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root,
    )  # fmt: skip
    return server, port, f"ws://127.0.0.1:{port}/v1/realtime?duplex=1"


def commit_at_ms() -> float:
    """Where each client commits: end of speech (manifest) + the tail load uses by default."""
    manifest = json.loads((ROOT / "recordings" / "manifest.json").read_text())
    return float(manifest["files"][WAV.name]["speech_end_ms"]) + TAIL_MS


def load_turns(duration: float) -> list[str]:
    """``load``'s inputs: the WAV once per turn, enough turns to fill ``duration``.

    ``load`` speaks its inputs one turn each and then ends the session (closed loop: the
    user opens a new one). The streamer and the DuplexClient driver keep one session for the
    whole run, so load gets as many turns as fit (a turn takes ≈ 6.5 s: 4.2 s of speech,
    commit, 0.3 s to first audio, 2 s answer): the three then carry the same sessions, and
    no run pays for reconnecting that the others do not.
    """
    return [str(WAV)] * (int(duration / 5.0) + 2)


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and every live descendant (a client may fork workers)."""
    total = 0.0
    for p in (pid, *descendants(pid)):
        try:
            total += cpu_seconds(p)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return total


def children_cpu_s() -> float:
    """CPU of every waited-for child so far (exact, start-up and teardown included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Window:
    """Two /proc samples of a running process tree, taken by a timer thread."""

    pid: int
    t_start: float
    t_end: float
    samples: list[tuple[float, float]] = field(default_factory=list)

    def run(self) -> None:
        for due in (self.t_start, self.t_end):
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                self.samples.append((time.monotonic(), tree_cpu_seconds(self.pid)))
            except OSError:
                return

    def rate(self) -> tuple[float, float] | None:
        """(CPU seconds, wall seconds) between the two samples, if both were taken."""
        if len(self.samples) < 2:
            return None
        (w0, c0), (w1, c1) = self.samples
        return c1 - c0, w1 - w0


def command(client: str, url: str, n: int, duration: float, ramp: float, phases: int) -> list[str]:
    if client == "load":
        return [
            sys.executable, "-m", "duplexctl", "load", *load_turns(duration), "--url", url,
            "--sessions", str(n), "--duration", f"{duration}s", "--workers", "1",
            "--json", "--plain", "--turn-detection", "none", "--send-phases", str(phases),
        ]  # fmt: skip
    if client == "streamer":
        return [
            sys.executable, str(HERE / "streamer.py"), "--url", url, "--sessions", str(n),
            "--duration", str(duration), "--ramp", str(ramp), "--uvloop",
            "--wav", str(WAV), "--commit-at-ms", str(commit_at_ms()), "--phases", str(phases),
        ]  # fmt: skip
    return [
        str(PEER_PYTHON), str(HERE / "duplexclient_driver.py"), "--url", url,
        "--sessions", str(n), "--duration", str(duration), "--ramp", str(ramp), "--uvloop",
        "--wav", str(WAV), "--tail-ms", str(TAIL_MS), "--phases", str(phases),
    ]  # fmt: skip


def parse(client: str, out: str) -> dict[str, Any]:
    """The client's own figures: admitted sessions, send-lag p99, answered turns."""
    if client == "load":
        report = json.loads(out)
        return {
            "admitted": report["admission"]["observed_capacity"],
            "send_lag_p99_ms": report["validity"]["send_lag_p99_ms"],
            "turns": report["turns"]["count"],
            "self_cpu_pct": report["validity"]["client_cpu_percent"],
        }
    result = json.loads(out.strip().splitlines()[-1])
    return {
        "admitted": result["admitted"],
        "send_lag_p99_ms": result["send_lag_p99_ms"],
        "turns": result.get("turns", result.get("responses_done")),
    }


def run_client(
    client: str, url: str, n: int, duration: float, ramp: float, settle: float, phases: int
) -> dict[str, Any]:
    cmd = command(client, url, n, duration, ramp, phases)
    rusage0 = children_cpu_s()
    launched = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=DUPLEXCTL_ROOT[0],
    )
    window = Window(proc.pid, launched + settle, launched + duration - 1.0)
    sampler = threading.Thread(target=window.run, daemon=True)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=duration + 240)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": "timed out"}
    wall = time.monotonic() - launched
    total_cpu = children_cpu_s() - rusage0
    sampler.join(timeout=5)
    if proc.returncode not in (0, 1):
        return {"error": (err.strip().splitlines() or ["?"])[-1]}
    try:
        row = parse(client, out)
    except (ValueError, KeyError) as exc:
        return {"error": f"unparsable output: {exc}"}
    steady = window.rate()
    admitted = max(1, int(row["admitted"] or 0))
    if steady is not None:
        cpu, secs = steady
        row["cpu_pct"] = 100 * cpu / secs
        row["cpu_s_per_session_min"] = cpu / (admitted * secs / 60)
    row["total_cpu_s"] = total_cpu
    row["total_cpu_s_per_session_min"] = total_cpu / (admitted * duration / 60)
    row["turns_per_session_min"] = (row["turns"] or 0) / (admitted * duration / 60)
    row["wall_s"] = wall
    row["held"] = row["admitted"] == n and (row["send_lag_p99_ms"] or 1e9) <= HELD_LAG_MS
    return row


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def machine() -> str:
    model = "?"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"nproc {os.cpu_count()}, {model}, Python {platform.python_version()}"


def describe_root() -> str:
    """The measured code: the snapshot's recorded commit, or the live tree."""
    root = DUPLEXCTL_ROOT[0]
    marker = root / ".commit"
    return f"{root} @ {marker.read_text().strip()}" if marker.exists() else str(root)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def median_cpu(rows: list[dict[str, Any]], n: int, client: str) -> float | None:
    """Median CPU s per session-minute of ``client``'s rounds at ``n`` sessions that have one."""
    return median(
        [
            r["cpu_s_per_session_min"]
            for r in rows
            if r["sessions"] == n and r["client"] == client and r.get("cpu_s_per_session_min")
        ]
    )


def fit(rows: list[dict[str, Any]], client: str) -> tuple[float, float] | None:
    """(fixed CPU s per minute, CPU s per session-minute): least squares of the process's CPU
    per minute against its admitted sessions, over every round of every N."""
    points = [
        (float(r["admitted"]), r["cpu_s_per_session_min"] * r["admitted"])
        for r in rows
        if r["client"] == client and "error" not in r and r.get("cpu_s_per_session_min")
    ]
    if len({x for x, _ in points}) < 2:
        return None
    slope, intercept = statistics.linear_regression(*zip(*points, strict=True))
    return intercept, slope


def print_fit(rows: list[dict[str, Any]], clients: list[str]) -> None:
    """Split each client's CPU into a part that does not grow with N and a per-session part.

    CPU s per session-minute at one N mixes what the process costs whatever it runs (mostly
    waking up ``--phases`` × 10 times a second, ~0.2 ms of CPU per wake-up on these machines:
    ``bench/wake_cost.py``) divided by N, with what each session adds. A straight line over
    the measured N separates them well enough to compare the clients' per-session costs
    apart from the floor they share. It is a fit over this range, not a law: sessions get
    cheaper as more of them share a wake-up (warmer caches), and that curvature lands in the
    fixed part — the slope is what one more session costs among 50–300, not the cost per
    session at any one N (the goal is judged on the medians table).
    """
    fits = {c: fit(rows, c) for c in clients}
    if not any(fits.values()):
        return
    print()
    print("fit over N (CPU s per minute = fixed + per_session × sessions):")
    print("client | fixed CPU s/min | fixed % core | per-session CPU s/session·min")
    for client, f in fits.items():
        if f is not None:
            print(f"{client} | {f[0]:.2f} | {f[0] / 0.6:.1f} | {f[1]:.4f}")
    load, floor, peer = (fits.get(c) for c in CLIENTS)
    if load and floor:
        print(f"slope load/streamer: {load[1] / floor[1]:.2f}")
    if load and peer:
        print(f"slope duplexclient/load: {peer[1] / load[1]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="50,100,200", help="comma-separated counts")
    parser.add_argument("--duration", type=float, default=30.0, help="streaming seconds")
    parser.add_argument("--ramp", type=float, default=2.0, help="streamer/driver start ramp")
    parser.add_argument("--settle", type=float, default=6.0, help="s before the CPU window")
    parser.add_argument(
        "--phases", type=int, default=10, help="send phases per chunk, for all three clients"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds per N (ratios from the medians)"
    )
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--json-out", type=Path, help="also write every row as JSON")
    parser.add_argument("--duplexctl-root", type=Path, default=ROOT, help="code to measure")
    args = parser.parse_args()
    DUPLEXCTL_ROOT[0] = args.duplexctl_root.resolve()
    counts = [int(x) for x in args.sessions.split(",")]
    clients = [c for c in args.clients.split(",") if c]
    if unknown := set(clients) - set(CLIENTS):
        raise SystemExit(f"unknown client(s) {sorted(unknown)}; choose from {CLIENTS}")
    if args.duration < args.settle + 8:
        raise SystemExit("--duration must leave at least 8 s of steady state after --settle")
    if "duplexclient" in clients and not PEER_PYTHON.exists():
        raise SystemExit(f"peer venv not found ({PEER_PYTHON}); drop duplexclient from --clients")
    server, port, url = start_server(DUPLEXCTL_ROOT[0], max(counts))
    print(f"# {' '.join(sys.argv)}")
    print(f"# {machine()}; {time.strftime('%Y-%m-%d %H:%M')}; duplexctl from {describe_root()}")
    cols = [
        "sessions", "client", "admitted", "turns/sess·min", "send_lag_p99_ms", "cpu_%",
        "cpu_s/sess·min", "total_cpu_s/sess·min", "held",
    ]  # fmt: skip
    print(" | ".join(cols), flush=True)
    rows: list[dict[str, Any]] = []
    try:
        wait_healthy(port, server)
        rounds = 0
        for n in counts:
            for _ in range(args.repeat):
                # rotate the order so a drift of the machine does not always hit one client
                k = rounds % len(clients)
                rounds += 1
                for client in clients[k:] + clients[:k]:
                    row = {"sessions": n, "client": client}
                    row.update(
                        run_client(
                            client, url, n, args.duration, args.ramp, args.settle, args.phases
                        )
                    )
                    rows.append(row)
                    if "error" in row:
                        print(f"{n} | {client} | error: {row['error']}", flush=True)
                    else:
                        keys = [
                            "admitted", "turns_per_session_min", "send_lag_p99_ms", "cpu_pct",
                            "cpu_s_per_session_min", "total_cpu_s_per_session_min", "held",
                        ]  # fmt: skip
                        cells = [str(n), client, *(fmt(row.get(k)) for k in keys)]
                        print(" | ".join(cells), flush=True)
                    time.sleep(2)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print()
    print(f"medians of {args.repeat} round(s), CPU s per session-minute:")
    print("sessions | load | streamer | duplexclient | load/streamer (goal ≤1.5) | "
          "duplexclient/load (goal ≥2)")  # fmt: skip
    held: dict[str, list[int]] = {c: [] for c in clients}
    for n in counts:
        cpu = {client: median_cpu(rows, n, client) for client in CLIENTS}
        for client in clients:
            runs = [r for r in rows if r["sessions"] == n and r["client"] == client]
            if runs and all("error" not in r and r["held"] for r in runs):
                held[client].append(n)
        load, floor, peer = cpu["load"], cpu["streamer"], cpu["duplexclient"]
        r1 = load / floor if load and floor else None
        r2 = peer / load if load and peer else None
        print(" | ".join(fmt(v) for v in (n, load, floor, peer, r1, r2)))
    print_fit(rows, clients)
    print()
    for client in clients:
        print(
            f"largest held N ({client}, send-lag p99 ≤ {HELD_LAG_MS:g} ms in every round): "
            f"{max(held[client] or [0])}"
        )
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
