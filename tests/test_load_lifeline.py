"""Workers die with their parent (issue 16.3), tested with SIGKILL over real processes.

``duplexctl load --workers 2`` against a ``duplexctl serve`` subprocess whose disconnect grace
(120 s) is far longer than the bounds here: once the load parent is SIGKILLed, every worker
must be gone within a generous bound, and the server must admit new sessions in every slot
again — which it only does that soon if the workers *closed* their sessions (a dropped
socket holds its slot for the whole grace). A second test kills a parent whose worker has
only the portable detector (the lifeline pipe), not Linux's parent-death signal.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.commands import (
    HELLO,
    LIFELINE_PARENT,
    ROOT,
    admitted,
    children_of,
    duplexctl_cmd,
    pids_alive,
    serve,
    wait_for,
)

from duplexctl.load.lifeline import GRACE_S

pytestmark = [
    pytest.mark.realtime,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

#: Generous: the workers must be gone within GRACE_S of the parent's death; this allows for a
#: loaded two-core machine several times over.
GONE_WITHIN_S = 30.0


def test_sigkill_of_load_stops_its_workers_and_frees_the_servers_slots() -> None:
    server_args = ("--max-sessions", "2", "--disconnect-grace-s", "120", "--reply-seconds", "2")
    with serve(*server_args) as (url, _server):
        args = ["load", HELLO, "--url", url, "--sessions", "2", "--workers", "2"]
        load = subprocess.Popen(
            duplexctl_cmd(*args, "--duration", "120s", "--plain"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
        try:
            # the load holds both slots: a third session is refused
            assert wait_for(lambda: asyncio.run(admitted(url, 1)) == 0, 90.0, every_s=0.5)
            workers = children_of(load.pid)
            assert len(workers) >= 2  # two workers (and multiprocessing's resource tracker)
            load.send_signal(signal.SIGKILL)
            load.wait(timeout=10)
            killed_at = time.monotonic()
            assert wait_for(lambda: not pids_alive(workers), GONE_WITHIN_S), (
                f"workers still running {GONE_WITHIN_S:g} s after their parent died: "
                f"{pids_alive(workers)}"
            )
            gone_after_s = time.monotonic() - killed_at
            # both slots free again long before the server's 120 s disconnect grace
            assert wait_for(lambda: asyncio.run(admitted(url, 2)) == 2, 20.0, every_s=0.5)
            assert gone_after_s < GONE_WITHIN_S
        finally:
            if load.poll() is None:
                load.kill()
            for pid in pids_alive(children_of(load.pid)):
                os.kill(pid, signal.SIGKILL)


def test_worker_with_only_the_portable_detector_stops_when_its_parent_is_killed(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "lost"
    parent = subprocess.Popen(
        [sys.executable, "-c", LIFELINE_PARENT, str(marker), str(ROOT / "tests")], cwd=ROOT
    )
    try:
        assert wait_for(lambda: Path(str(marker) + ".armed").exists(), 60.0)
        child = int(Path(str(marker) + ".armed").read_text())
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert wait_for(lambda: not pids_alive([child]), GRACE_S + GONE_WITHIN_S)
        assert marker.read_text() == "the parent's end of the lifeline closed"
    finally:
        if parent.poll() is None:
            parent.kill()
