"""One Ray actor of a ``--ray`` run: its share of the sessions, on the local worker's engine.

The actor runs :func:`duplexctl.load.workers.run_share` — the very coroutine a local
``--workers`` process runs, hundreds of asyncio sessions on one event loop — in a thread of
its own (Ray's threads serve the driver's calls meanwhile). What the engine puts on its
``messages`` queue (live snapshots, per-second deltas — :mod:`duplexctl.load.cluster.seconds`
— checkpoints, the final recorder) waits there until the driver's next
:meth:`LoadWorker.poll`, which also carries the JSONL lines written since.

**The driver's heartbeat.** Every :meth:`poll` (the driver polls twice a second) is a beat.
The actor holds a :class:`~duplexctl.load.lifeline.Lifeline` whose detector is "a beat came
within :data:`HEARTBEAT_TIMEOUT_S`": when the driver is killed (``kill -9``) or its host is
lost, the beats stop, the lifeline closes every session with ``session.close`` and the
actor's process exits after the lifeline's grace — whatever Ray does or does not do about
the driver's job. The actors are detached from the driver's job for that reason: Ray would
otherwise kill them with the job (their sockets dropped, the server's slots held for its
disconnect grace) instead of letting them close their sessions.

The class imports no ``ray``: the driver turns it into an actor (``ray.remote``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

from duplexctl.client.target import use_tls
from duplexctl.load.config import LoadConfig
from duplexctl.load.engine import Plan, make_plan
from duplexctl.load.lifeline import Lifeline
from duplexctl.load.workers import loop_runner, run_share

#: No beat from the driver for this long: the driver is gone, the sessions are closed. The
#: same silence after which the driver counts the actor lost (its ``LOST_AFTER_S`` is this):
#: at 5 s, on a busy host, an actor created 6 s before its sibling gave up while the driver
#: was still waiting for that sibling (a two-node test run under parallel load), and an
#: actor that gives up first only turns a slow cluster into a failed run.
HEARTBEAT_TIMEOUT_S: Final = 15.0
#: A checkpoint of the recorder at least this often (kept by the driver if the node dies).
CHECKPOINT_MIN_S: Final = 2.0


def normal_priority() -> int:
    """Put the calling thread back at CPU priority 0 if it may; the niceness it runs at.

    Ray starts its worker processes at niceness 15 (``RAY_worker_niceness``), below every
    ordinary process of the host: a load actor sharing a busy host would fall behind in
    pacing its sessions (send-lag p99 80-230 ms where local workers kept 6-37 ms on this
    project's two-core benchmark machine). Lowering a niceness needs ``CAP_SYS_NICE``; without
    it the actor keeps Ray's, and the report's worker entry says which it ran at."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    return os.getpriority(os.PRIO_PROCESS, 0)


class LoadWorker:
    """A Ray actor (see the module docstring). Calls: prepare → clock … → start → poll …"""

    def __init__(self, heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S) -> None:
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.last_beat = time.monotonic()
        self.lifeline = Lifeline(None, alive=self._driver_alive)
        self.lifeline.arm(death_signal=False)
        self.messages: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.config: LoadConfig | None = None
        self.plan: Plan | None = None
        self.index = 0
        self.url = ""
        self.out = Path(tempfile.mkdtemp(prefix="duplexctl-ray-"))
        self.read: dict[str, int] = {}  # JSONL file → bytes already sent
        self.stopper: Any = None
        self.thread: threading.Thread | None = None
        self.cpu0 = (time.process_time(), time.monotonic())
        self.polls = 0  # the driver's beats so far (reported: twice a second, not more)

    def _driver_alive(self) -> bool:
        return time.monotonic() - self.last_beat < self.heartbeat_timeout_s

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    def where(self) -> dict[str, Any]:
        """Where this actor runs: the node's id and address, the host, the process."""
        import ray

        context = ray.get_runtime_context()
        return {
            "node": context.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }

    def prepare(self, config: LoadConfig, index: int, url: str) -> dict[str, Any]:
        """Take the share and decode its audio (before the common start); where it runs."""
        self.beat()
        self.config, self.index, self.url = config, index, url
        use_tls(config.target.tls)  # the driver's --ca-file / --insecure, on this node
        self.plan = make_plan(config)
        return self.where()

    def clock(self) -> float:
        """This node's monotonic clock (the driver estimates the offset: round trip / 2)."""
        self.beat()
        return time.monotonic()

    def start(self, origin: float) -> None:
        """Run the share from ``origin`` (this node's clock) in the engine's thread."""
        self.beat()
        assert self.config is not None and self.plan is not None, "prepare first"
        self.thread = threading.Thread(
            target=self._run, args=(origin,), name="duplexctl-load", daemon=True
        )
        self.thread.start()

    def _run(self, origin: float) -> None:
        config, plan = self.config, self.plan
        assert config is not None and plan is not None
        nice = normal_priority()  # this thread's: Linux keeps a niceness per thread
        runner = loop_runner(config)
        checkpoint_s = max(CHECKPOINT_MIN_S, config.output.slice_s)
        try:
            encoded, info = runner(
                run_share(
                    config,
                    self.index,
                    self.url,
                    str(self.out),
                    self.messages,
                    origin,
                    plan,
                    self.lifeline,
                    main_thread=False,
                    checkpoint_s=checkpoint_s,
                    on_stopper=self._set_stopper,
                    live_seconds=True,
                )
            )
        except Exception as exc:
            self.messages.put(("error", self.index, f"{type(exc).__name__}: {exc}"))
            return
        self.messages.put(
            ("done", self.index, encoded, {**info, "nice": nice, "polls": self.polls})
        )

    def _set_stopper(self, stopper: Any) -> None:
        self.stopper = stopper

    def stop(self) -> None:
        """Ctrl-C on the driver: arrivals stop, every session closes (``session.close``)."""
        self.beat()
        if self.stopper is not None:
            self.stopper()

    def poll(self) -> list[tuple[Any, ...]]:
        """The driver's beat; everything the engine reported since the last poll, the JSONL
        written since (``("jsonl", name, text)``, whole lines) and this process's CPU."""
        self.beat()
        self.polls += 1
        out: list[tuple[Any, ...]] = []
        while True:
            try:
                out.append(self.messages.get_nowait())
            except queue.Empty:
                break
        out.extend(self._new_lines())
        cpu, wall = time.process_time() - self.cpu0[0], time.monotonic() - self.cpu0[1]
        out.append(("cpu", self.index, round(100 * cpu / wall, 1) if wall > 0 else 0.0))
        if any(m[0] in ("done", "error") for m in out):
            shutil.rmtree(self.out, ignore_errors=True)
        return out

    def _new_lines(self) -> list[tuple[Any, ...]]:
        found = []
        for path in sorted(self.out.glob("*.jsonl")):
            start = self.read.get(path.name, 0)
            with path.open("rb") as fh:
                fh.seek(start)
                data = fh.read()
            whole = data[: data.rfind(b"\n") + 1]
            if whole:
                self.read[path.name] = start + len(whole)
                found.append(("jsonl", path.name, whole.decode()))
        return found
