"""The same load through ``--ray`` (a two-node Ray cluster on this host) and ``--workers 2``.

Issue 18's goal: Ray costs at most 10 % more CPU per session than local worker processes
and adds at most a few seconds of start-up. For each N (default 100 and 200 closed-loop
sessions against one ``duplexctl serve``), two runs side by side:

* ``local``: ``duplexctl load --workers 2``;
* ``ray``: ``duplexctl load --ray ADDRESS --workers-per-node 1`` on a
  ``ray.cluster_utils.Cluster`` of two nodes (one CPU each, as two load hosts would give);
  the cluster is started once and warmed up by one short untimed run, and its own cost
  while a run goes (raylets, GCS, agents) is counted against Ray, since a user pays it.

The two modes alternate, ``--rounds`` times per N; the table gives each round and the
median (the machine is shared: identical runs differ by 10-20 %).

Figures per run: **CPU s per session-minute** (every process of the load, sampled from /proc
every 0.25 s by :class:`TreeSampler`: for ``local`` the ``load`` process and its workers; for
``ray`` the driver, the actors and the cluster's own processes — raylets, GCS, agents; never
the server; the idle cluster's CPU, measured for 20 s before the runs, is taken off the local
runs, which share the host with it), **send-lag p99** (the report's), **start-up s** (from
launching ``load`` to the common start, the origin of the report's slices, both on this
host's monotonic clock). Usage::

    .venv/bin/python bench/ray_vs_local.py [--sessions 100 200] [--duration 30]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.procstat import descendants  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
HELLO = str(ROOT / "recordings" / "hello.wav")


def own_cpu_seconds(pid: int) -> float | None:
    """``pid``'s own CPU so far (utime + stime), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


class TreeSampler:
    """CPU of every process below this script, sampled every ``every_s`` from /proc.

    Sampled, not read from the parents' ``cutime`` at the end: Ray's raylet does not add the
    CPU of the actor processes it ends to its own children's time (a killed actor's CPU would
    vanish), so each process's last reading before it went is kept instead. A process's last
    ``every_s`` of CPU before it ends can be missed (the workers and actors are idle by then).
    """

    def __init__(self, exclude: set[int], every_s: float = 0.25) -> None:
        self.exclude = exclude
        self.every_s = every_s
        self.last: dict[int, float] = {}
        self.base: dict[int, float] = {}
        self.names: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        skip = set(self.exclude)
        for pid in self.exclude:
            skip |= set(descendants(pid))
        for pid in descendants(os.getpid()):
            if pid in skip:
                continue
            cpu = own_cpu_seconds(pid)
            if cpu is not None:
                self.last[pid] = cpu
                if pid not in self.names:
                    self.names[pid] = process_kind(pid)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def __enter__(self) -> TreeSampler:
        self._sample()
        self.base = dict(self.last)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def cpu_s(self) -> float:
        return sum(v - self.base.get(pid, 0.0) for pid, v in self.last.items())

    def by_kind(self) -> dict[str, float]:
        """CPU s per kind of process (:func:`process_kind`): where a mode's CPU goes."""
        kinds: dict[str, float] = {}
        for pid, v in self.last.items():
            kind = self.names.get(pid, "?")
            kinds[kind] = kinds.get(kind, 0.0) + v - self.base.get(pid, 0.0)
        return dict(sorted(kinds.items(), key=lambda kv: -kv[1]))


def process_kind(pid: int) -> str:
    """A short name for a process of the load or the cluster: the load command itself,
    Ray's actors by class (``ray::LoadWorker``), Ray's daemons by program name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return "?"
    if not argv:
        return "?"
    if argv[0].startswith("ray::"):
        return argv[0].split()[0]
    if "duplexctl" in argv and "load" in argv:
        return "duplexctl load"
    if "-m" in argv and "duplexctl" in " ".join(argv):
        return "duplexctl (worker)"
    for a in argv[:3]:
        base = os.path.basename(a)
        if base in ("raylet", "gcs_server", "plasma_store") or base.endswith(".py"):
            return base
    return os.path.basename(argv[0])


def start_server() -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "duplexctl", "serve", "--port", "0", "--max-sessions", "1000",
         "--reply-seconds", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip
    assert server.stdout is not None
    while True:
        line = server.stdout.readline()
        found = re.search(r"listening on (ws://\S+)", line)
        if found:
            return server, found.group(1)
        if not line:
            raise SystemExit("duplexctl serve did not start")


def one_run(
    mode: str,
    n: int,
    duration: float,
    url: str,
    server: int,
    extra: list[str],
    idle_cpu_per_s: float = 0.0,
) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix=f"ray-vs-local-{mode}-{n}-"))
    cmd = [sys.executable, "-m", "duplexctl", "load", HELLO, "--url", url, "--sessions", str(n),
           "--duration", f"{duration:g}s", "--plain", "--out", str(out / "run"), *extra]  # fmt: skip
    # every process of the load: for local the load process and its workers; for ray the
    # driver, the actors and the cluster's own processes (for local the idle cluster's are
    # counted too, so they are subtracted: measured before the run over as long a time)
    launched = time.monotonic()
    with TreeSampler({server}) as sampler:
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=duration + 300)
    wall = time.monotonic() - launched
    cpu = sampler.cpu_s - (idle_cpu_per_s * wall if mode == "local" else 0.0)
    if run.returncode != 0:
        raise SystemExit(f"{mode} {n}: exit {run.returncode}: {run.stderr[-2000:]}")
    report = json.loads((out / "run" / "report.json").read_text())
    session_min = n * duration / 60
    return {
        "mode": mode,
        "sessions": n,
        "cpu_s": cpu,
        "cpu_per_session_min": cpu / session_min,
        "send_lag_p99_ms": report["validity"]["send_lag_p99_ms"],
        "startup_s": report["recorder"]["origin"] - launched,
        "admitted": report["sessions"]["admitted"],
        "nodes": len({w.get("node", "local") for w in report["workers"]}),
        "load_avg": os.getloadavg()[0],
        "by_kind": sampler.by_kind(),
    }


class IdleActor:
    """An actor placed as ``load --ray`` places its workers, that does nothing."""

    def ready(self) -> bool:
        return True


def idle_actors_cpu(address: str, server: int, seconds: float = 30.0) -> float:
    """CPU per second of one idle actor (two, one per node, as the runs use): what Ray's
    worker process costs by itself (its core worker's threads), whatever the actor does."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from duplexctl.load.cluster.connect import ACTOR_CONCURRENCY, ACTOR_CPUS

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        remote = ray.remote(num_cpus=ACTOR_CPUS, max_concurrency=ACTOR_CONCURRENCY)(IdleActor)
        actors = [
            remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote()
            for n in ray.nodes()
            if n["Alive"]
        ]
        ray.get([a.ready.remote() for a in actors])
        time.sleep(2)
        with TreeSampler({server}) as sampler:
            time.sleep(seconds)
        cpu = sum(v for k, v in sampler.by_kind().items() if k.startswith("ray::IdleActor"))
        for a in actors:
            ray.kill(a)
        return cpu / seconds / len(actors)
    finally:
        ray.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"$ {' '.join(sys.argv)}")
    print(f"machine: nproc {os.cpu_count()}, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC")  # fmt: skip
    from ray.cluster_utils import Cluster

    server, url = start_server()
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    node = {"num_cpus": 1, "object_store_memory": 80 * 2**20}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        print(f"cluster of two nodes up in {time.monotonic() - t0:.1f} s (once)")
        modes = {
            "local": ["--workers", "2"],
            "ray": ["--ray", cluster.address, "--workers-per-node", "1"],
        }
        for mode, extra in modes.items():  # warm-up, untimed: Ray's first workers, caches
            one_run(mode, 10, 3.0, url, server.pid, extra)
        with TreeSampler({server.pid}) as idle:  # the cluster alone, between runs
            time.sleep(20)
        idle_cpu_per_s = idle.cpu_s / 20
        print(f"idle cluster: {idle_cpu_per_s * 100:.1f} % of a core (charged to ray only)")
        for n in args.sessions:
            for _ in range(args.rounds):
                for mode, extra in modes.items():
                    rows.append(
                        one_run(mode, n, args.duration, url, server.pid, extra, idle_cpu_per_s)
                    )
        idle_actor_cpu_per_s = idle_actors_cpu(cluster.address, server.pid)
    finally:
        cluster.shutdown()
        server.terminate()
        server.wait(30)
    print(
        f"idle actors: {idle_actor_cpu_per_s * 100:.1f} % of a core each "
        f"({idle_actor_cpu_per_s * 60:.2f} CPU s per minute: Ray's own cost of a worker)"
    )
    for r in rows:
        kinds = ", ".join(f"{k} {v:.1f}" for k, v in r["by_kind"].items() if v >= 0.05)
        print(f"{r['mode']} {r['sessions']}: CPU s by process: {kinds}")
    print("| N | mode | CPU s / session-min, per round (median) | send-lag p99 ms | start-up s |"
          " admitted | load avg |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for n in args.sessions:
        for mode in ("local", "ray"):
            rs = [r for r in rows if r["mode"] == mode and r["sessions"] == n]
            cpu = " / ".join(f"{r['cpu_per_session_min']:.3f}" for r in rs)
            med = statistics.median(r["cpu_per_session_min"] for r in rs)
            lag = " / ".join(f"{r['send_lag_p99_ms']:.1f}" for r in rs)
            up = " / ".join(f"{r['startup_s']:.1f}" for r in rs)
            adm = " / ".join(str(r["admitted"]) for r in rs)
            la = " / ".join(f"{r['load_avg']:.1f}" for r in rs)
            print(f"| {n} | {mode} ({rs[0]['nodes']} node(s)) | {cpu} (**{med:.3f}**) | {lag} | "
                  f"{up} | {adm} | {la} |")  # fmt: skip
    for n in args.sessions:
        ratios = [
            ray["cpu_per_session_min"] / local["cpu_per_session_min"]
            for local, ray in zip(
                [r for r in rows if r["mode"] == "local" and r["sessions"] == n],
                [r for r in rows if r["mode"] == "ray" and r["sessions"] == n],
                strict=True,
            )
        ]
        ups = [
            ray["startup_s"] - local["startup_s"]
            for local, ray in zip(
                [r for r in rows if r["mode"] == "local" and r["sessions"] == n],
                [r for r in rows if r["mode"] == "ray" and r["sessions"] == n],
                strict=True,
            )
        ]
        print(f"N={n}: ray / local CPU per session-minute per round "
              f"{' / '.join(f'{x:.2f}' for x in ratios)} (median **{statistics.median(ratios):.2f}**,"
              f" goal <= 1.10); start-up difference {' / '.join(f'{u:+.1f}' for u in ups)} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
