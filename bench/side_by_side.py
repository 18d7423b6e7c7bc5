"""Two or more versions of ``load`` at the same time against one server: paired CPU ratios.

``compare_clients.py`` runs its clients one after the other, and this machine's speed drifts
by 10-20 % between runs (docs/testing.md), so a change worth 2-5 % cannot be told from noise
there, even over several rounds. Here every version runs *at the same time*, each its own
``load`` process with ``--sessions`` sessions against one ``duplexctl serve``, so a drift of
the machine hits all of them alike and cancels in their ratio: two identical trees measure
within ~2 % of each other round after round while the absolute figures move by 20 %.

Use it for ablations of ``load`` itself (versions of the same weight), not for comparing
different clients: running together they compete for the CPUs, which favours the lighter
process, so cross-client ratios stay with ``compare_clients.py``.

Each ``--tree`` is a duplexctl source tree (a ``git archive`` snapshot, say). The launch
order rotates every round. CPU is the scheduler's nanosecond sum (``/proc/PID/schedstat``) between ``--settle`` s after launch and
1 s before the streaming ends; the table gives each round's CPU s per session-minute and
every tree's ratio to the first, with the median and range over the rounds.

    .venv/bin/python bench/side_by_side.py --tree BEFORE --tree AFTER --rounds 5

``--args`` (one per ``--tree``, in order) adds load options to that tree's command, so one
tree can be measured against itself with and without an option; ``--prometheus`` starts
Debian's ``prometheus`` on a free loopback port (remote-write receiver and native histograms
on, storage in a temporary directory) and puts its write URL where an ``--args`` says
``{prometheus_rw}``: what pushing costs (issue 36):

    .venv/bin/python bench/side_by_side.py --tree . --tree . --args "" \
        --args "--prometheus-rw {prometheus_rw}" --prometheus --sessions 150 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.compare_clients import command, start_server  # noqa: E402
from bench.procstat import scheduled_seconds  # noqa: E402
from bench.serve_capacity import wait_healthy  # noqa: E402


def tree_root(spec: str) -> Path:
    """The duplexctl source tree ``spec`` names (SystemExit when it holds no package)."""
    root = Path(spec).resolve()
    if not (root / "duplexctl" / "__init__.py").exists():
        raise SystemExit(f"--tree {spec!r}: no duplexctl package in {root}")
    return root


@contextlib.contextmanager
def prometheus() -> Iterator[str]:
    """Debian's prometheus on a free loopback port; yields its remote-write URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("--prometheus: Debian's prometheus is not installed (bash install.sh)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    tmp = Path(tempfile.mkdtemp(prefix="bench-prometheus-"))
    (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--web.enable-remote-write-receiver",
         "--enable-feature=native-histograms"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1),
            ):
                break
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/api/v1/write"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        shutil.rmtree(tmp, ignore_errors=True)


def one_round(
    trees: list[Path], url: str, n: int, duration: float, settle: float, extra: list[list[str]]
) -> list[float]:
    """Run every tree's load at once; CPU s per session-minute of each, in ``trees`` order."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for tree, more in zip(trees, extra, strict=True):
            cmd = [*command("load", url, n, duration, 2.0, 10), *more]
            out = subprocess.DEVNULL
            procs.append(subprocess.Popen(cmd, cwd=tree, stdout=out, stderr=out))
        time.sleep(settle)
        start = [(time.monotonic(), scheduled_seconds(p.pid)) for p in procs]
        time.sleep(duration - settle - 1.0)
        end = [(time.monotonic(), scheduled_seconds(p.pid)) for p in procs]
    finally:
        for p in procs:
            p.wait(timeout=duration + 120)
    return [(c1 - c0) / (n * (w1 - w0) / 60) for (w0, c0), (w1, c1) in zip(start, end, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", required=True, help="a duplexctl source tree")
    parser.add_argument("--sessions", type=int, default=50, help="sessions per tree")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--args", action="append", default=None, help="extra load options of one --tree"
    )
    parser.add_argument("--prometheus", action="store_true", help="start a receiver")
    args = parser.parse_args()
    trees = [tree_root(spec) for spec in args.tree]
    if len(trees) < 2:
        raise SystemExit("give at least two --tree")
    extras = [shlex.split(a) for a in (args.args or [""] * len(trees))]
    if len(extras) != len(trees):
        raise SystemExit("give one --args per --tree (an empty one for none)")
    with contextlib.ExitStack() as stack:
        if args.prometheus:
            rw = stack.enter_context(prometheus())
            extras = [[a.replace("{prometheus_rw}", rw) for a in e] for e in extras]
        run(args, trees, extras)


def run(args: argparse.Namespace, trees: list[Path], extras: list[list[str]]) -> None:
    if args.duration < args.settle + 5:
        raise SystemExit(f"--duration must be at least --settle + 5 s ({args.settle + 5:g})")
    server, port, url = start_server(trees[0], args.sessions * len(trees))
    print(f"# {' '.join(sys.argv)}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}; server from {trees[0]}")
    for i, tree in enumerate(trees):
        print(f"# tree {i}: {tree} {shlex.join(extras[i])}")
    print("round | " + " | ".join(f"tree {i} CPU s/session·min" for i in range(len(trees))))
    rows: list[list[float]] = []
    try:
        wait_healthy(port, server)
        for r in range(args.rounds):
            k = r % len(trees)  # rotate the launch order (a tree may be given twice: A/A)
            order = trees[k:] + trees[:k]
            more = extras[k:] + extras[:k]
            cpu = one_round(order, url, args.sessions, args.duration, args.settle, more)
            rows.append(cpu[-k:] + cpu[:-k] if k else cpu)
            print(f"{r} | " + " | ".join(f"{v:.4f}" for v in rows[-1]), flush=True)
            time.sleep(2)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print("tree | median CPU s/session·min | ratio to tree 0: median (min-max), rounds lower")
    for i, tree in enumerate(trees):
        ratios = [row[i] / row[0] for row in rows]
        lower = sum(x < 1.0 for x in ratios)
        print(
            f"{i} {tree} | {statistics.median(r[i] for r in rows):.4f} | "
            f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}), "
            f"{lower}/{len(ratios)}"
        )


if __name__ == "__main__":
    main()
