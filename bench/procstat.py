"""CPU seconds of a process from /proc (Linux), so benchmarks need no extra dependency."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds consumed so far by ``pid`` (default: this process)."""
    path = f"/proc/{pid or os.getpid()}/stat"
    with open(path) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    # fields[11] = utime, fields[12] = stime (0-based after the comm field)
    return (int(fields[11]) + int(fields[12])) / _TICKS


def scheduled_seconds(pid: int | None = None) -> float:
    """CPU seconds of ``pid`` (default: this process) from the scheduler's nanosecond sum
    (``/proc/PID/schedstat``): exact, where ``/proc/PID/stat`` counts ticks (4 ms here)."""
    with open(f"/proc/{pid or os.getpid()}/schedstat") as fh:
        return int(fh.read().split()[0]) / 1e9


@dataclass
class CpuWindow:
    """CPU used by a process over a wall-clock window."""

    pid: int
    cpu0: float = 0.0
    wall0: float = 0.0

    def start(self) -> None:
        self.cpu0 = cpu_seconds(self.pid)
        self.wall0 = time.monotonic()

    def stop(self) -> tuple[float, float]:
        """(cpu seconds, wall seconds) since start()."""
        return cpu_seconds(self.pid) - self.cpu0, time.monotonic() - self.wall0


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, their children, ...), read from /proc:
    a load generator's worker processes, for one."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(children.get(child, []))
    return sorted(found)
