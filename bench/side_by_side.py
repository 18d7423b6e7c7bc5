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
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
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


def one_round(trees: list[Path], url: str, n: int, duration: float, settle: float) -> list[float]:
    """Run every tree's load at once; CPU s per session-minute of each, in ``trees`` order."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for tree in trees:
            cmd = command("load", url, n, duration, 2.0, 10)
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
    args = parser.parse_args()
    trees = [tree_root(spec) for spec in args.tree]
    if len(trees) < 2:
        raise SystemExit("give at least two --tree")
    if args.duration < args.settle + 5:
        raise SystemExit(f"--duration must be at least --settle + 5 s ({args.settle + 5:g})")
    server, port, url = start_server(trees[0], args.sessions * len(trees))
    print(f"# {' '.join(sys.argv)}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}; server from {trees[0]}")
    for i, tree in enumerate(trees):
        print(f"# tree {i}: {tree}")
    print("round | " + " | ".join(f"tree {i} CPU s/session·min" for i in range(len(trees))))
    rows: list[list[float]] = []
    try:
        wait_healthy(port, server)
        for r in range(args.rounds):
            k = r % len(trees)  # rotate the launch order (a tree may be given twice: A/A)
            cpu = one_round(trees[k:] + trees[:k], url, args.sessions, args.duration, args.settle)
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
