"""The Ray cluster the ``load --ray`` tests share (one per test session: ``tests/conftest.py``
``cluster``), and how those tests drive it: real ``duplexctl load --ray`` driver processes.

The cluster is ``ray.cluster_utils.Cluster``: a head and a second node on this host, each with
its own raylet, two CPUs, a small object store and no dashboard; the head also serves Ray
Client on a free port (``--ray ray://…``). Never ``ray stop`` in tests: it ends every Ray
process of the machine, not only the suite's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from duplexctl.load.cluster.connect import CLIENT_JOIN_TIMEOUT_S, RAY_CLIENT_RECONNECT_GRACE_S
from support.commands import duplexctl_cmd
from support.paths import ROOT, free_port

#: Small on purpose: CI has two cores, shared with the server and the drivers.
NODE_ARGS: dict[str, Any] = {"num_cpus": 2, "object_store_memory": 80 * 2**20}
#: The server keeps a dropped session's slot this long: far beyond every bound of the tests.
GRACE_ARGS = ("--disconnect-grace-s", "120", "--reply-seconds", "2")
#: The actors notice the driver's death within their heartbeat timeout (15 s) and close
#: within the lifeline's grace (5 s): generous for a loaded two-core machine.
FREED_WITHIN_S = 40.0
#: How long the head's Ray Client proxy waits for the server process it starts per driver
#: (Ray's RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S, 30 s by default): that process imports
#: Ray, which on this two-core machine beside the rest of the suite took over 30 s. Not
#: more than the time a join attempt of ``load`` leaves Ray's clean-up of a refused join
#: (this wait, then the reconnect grace): at 180 s, a join refused by ray-project/ray#63202
#: was still being cleaned up when its attempt's bound ran out, and CI reported the test
#: cluster as absent. A property of the test cluster's host, for its processes only.
CLIENT_SERVER_READY_S = str(int(CLIENT_JOIN_TIMEOUT_S - RAY_CLIENT_RECONNECT_GRACE_S - 30.0))


@contextmanager
def two_node_cluster() -> Iterator[Any]:
    """A head and a second node, shut down on exit."""
    from ray.cluster_utils import Cluster

    client_port = free_port()  # the head also serves Ray Client (--ray ray://…)
    head = {**NODE_ARGS, "include_dashboard": False, "ray_client_server_port": client_port}
    # inherited by the head's processes as they start, and only by them
    with mock.patch.dict(
        os.environ, {"RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": CLIENT_SERVER_READY_S}
    ):
        c = Cluster(initialize_head=True, head_node_args=head)
    c.client_port = client_port
    try:
        c.add_node(**NODE_ARGS)
        c.wait_for_nodes()
        yield c
    finally:
        c.shutdown()


class SharedCluster:
    """The cluster of :func:`two_node_cluster`, started on first use; :meth:`release` shuts
    it down (the next :meth:`get` starts a new one)."""

    def __init__(self) -> None:
        self._running: contextlib.ExitStack | None = None
        self._cluster: Any = None

    def get(self) -> Any:
        if self._running is None:
            stack = contextlib.ExitStack()
            self._cluster = stack.enter_context(two_node_cluster())
            self._running = stack
        return self._cluster

    def release(self) -> None:
        stack, self._running, self._cluster = self._running, None, None
        if stack is not None:
            stack.close()


@contextmanager
def refuse_next_join(cluster: Any) -> Iterator[list[int]]:
    """Kill the next server process the head's Ray Client proxy starts for a driver, as soon
    as it appears: the proxy then refuses that driver's join, as it does when Ray loses the
    process to ray-project/ray#63202 (which cannot be caused on demand), and Ray's own
    clean-up of the refused join follows. Yields the pids killed (one, once it happened).

    Watches ``/proc`` for processes that appeared since the last look (every 10 ms), so it
    costs next to nothing while the suite's other tests run (a full process-tree scan every
    few ms took most of a core, beside real-time tests)."""
    proxy = cluster.head_node.all_processes["ray_client_server"][0].process.pid
    killed: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        seen = set(_pids())
        ours = {proxy}  # the proxy and every process it started since
        while not stop.is_set():
            for pid in _pids():
                if pid in seen:
                    continue
                stat, cmdline = _read(f"/proc/{pid}/stat"), _read(f"/proc/{pid}/cmdline")
                if stat is None or cmdline is None:
                    seen.add(pid)  # gone already
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) not in ours:
                    seen.add(pid)
                    continue
                ours.add(pid)
                if "--mode=specific-server" in cmdline:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                    return
                # not yet exec'd into the server: looked at again next time
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, name="refuse-next-join", daemon=True)
    watcher.start()
    try:
        yield killed
    finally:
        stop.set()
        watcher.join(5)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode(errors="replace").replace("\0", " ")
    except OSError:
        return None


def client_server_logs(cluster: Any, tail: int = 1500) -> str:
    """The end of each of the head's Ray Client server logs (the proxy and the server it
    starts per driver): what a failed ``ray://`` join leaves to read."""
    logs = Path(cluster.head_node.get_logs_dir_path())
    return "".join(
        f"\n--- {path.name}:\n{path.read_text(errors='replace')[-tail:]}"
        for path in sorted(logs.glob("ray_client_server*"))
    )


def load_cmd(cluster: Any, *args: str) -> list[str]:
    return duplexctl_cmd("load", "--ray", cluster.address, "--plain", *args)


def run_load(cluster: Any, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        load_cmd(cluster, *args), capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def report_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "report.json").read_text())


def wait_active(proc: subprocess.Popen[str], at_least: int, timeout_s: float = 120) -> None:
    """Read the driver's plain dashboard until it shows ``at_least`` active sessions."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        found = re.search(r"\] active (\d+)", line)
        if found and int(found.group(1)) >= at_least:
            return
    raise AssertionError(f"the run never had {at_least} active sessions")
