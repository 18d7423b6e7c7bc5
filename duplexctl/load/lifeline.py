"""A worker's lifeline to the process that started it: when the parent dies, the worker stops.

A load generator that outlives its operator keeps loading someone's server (issue 16.3: after
``kill -9`` of ``load`` its workers kept their sessions going until ``--duration`` ended). So
every worker process holds a :class:`Lifeline` and, whatever way its parent dies — SIGKILL
included — closes its sessions (``session.close``, so the server frees their slots at once
instead of holding them for its disconnect grace) and exits within :data:`GRACE_S`.

The contract, for load's worker processes today and for any other kind of worker (a Ray
actor) tomorrow:

1. The parent makes a lifeline with :meth:`Lifeline.to_parent` and keeps the returned
   ``keep`` end open for as long as its workers may run (it never writes to it); it passes the
   lifeline to each worker.
2. The worker calls :meth:`Lifeline.arm` first thing. Two detectors then watch the parent:

   * on Linux, ``prctl(PR_SET_PDEATHSIG, SIGTERM)``: the kernel signals the worker the
     moment the parent (strictly: the parent *thread* that started it — load starts its
     workers from its main thread) exits. The parent may already have died before the call,
     so ``arm`` then checks that the parent is still the one that started the worker and
     gives up at once if not;
   * everywhere, a watcher thread: the ``keep`` pipe reaching end-of-file (every copy of its
     write end closed: the parent is gone) or ``os.getppid()`` changing (re-parented).

3. When the worker has something to stop, it calls :meth:`Lifeline.on_lost` with a
   thread-safe callback (load's: ``loop.call_soon_threadsafe(stop.set)``) and routes SIGTERM
   to :meth:`Lifeline.lose`. When the parent is gone the callback runs once and the process
   exits :data:`EXIT_PARENT_GONE` after :data:`GRACE_S` whatever the callback achieved; before
   a callback is set, the worker exits at once (it has no sessions yet).

A Ray actor keeps the same contract with another detector: pass ``alive`` (e.g. a check of
its owner's handle) instead of the pipe and the parent pid.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

#: prctl(2) option: the signal the kernel sends this process when its parent exits.
PR_SET_PDEATHSIG: Final = 1
#: Time between the parent's death and the worker's exit at the latest (sessions close first).
GRACE_S: Final = 5.0
#: How often the watcher thread looks (the pipe wakes it at once; getppid is polled).
POLL_S: Final = 0.5
#: Exit status of a worker that stopped because its parent died (EX_TEMPFAIL).
EXIT_PARENT_GONE: Final = 75


def set_parent_death_signal(sig: int) -> bool:
    """Ask the Linux kernel to send ``sig`` when the parent exits; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class Lifeline:
    """See the module docstring. Picklable: the pipe end travels to a spawned process."""

    def __init__(
        self,
        parent_pid: int | None,
        pipe: Any = None,
        *,
        alive: Callable[[], bool] | None = None,
        grace_s: float = GRACE_S,
    ) -> None:
        self.parent_pid = parent_pid
        self.pipe = pipe  # multiprocessing.connection.Connection (read end), or None
        self.alive = alive
        self.grace_s = grace_s
        self.reason = ""
        self._lost = threading.Event()
        self._lock = threading.Lock()
        self._callback: Callable[[], object] | None = None  # its result is ignored

    @classmethod
    def to_parent(cls, ctx: Any) -> tuple[Lifeline, Any]:
        """A lifeline to this process for workers started from ``ctx`` (a multiprocessing
        context), and the end this process keeps open (closing it tells the workers to stop)."""
        read_end, keep = ctx.Pipe(duplex=False)
        return cls(os.getpid(), read_end), keep

    def __getstate__(self) -> dict[str, Any]:
        return {"parent_pid": self.parent_pid, "pipe": self.pipe, "grace_s": self.grace_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["parent_pid"], state["pipe"], grace_s=state["grace_s"])  # type: ignore[misc]

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def arm(self, *, death_signal: bool = True) -> None:
        """Start watching the parent (call once, first thing in the worker);
        ``death_signal=False`` leaves only the portable watcher (tests, non-Linux)."""
        if death_signal:
            set_parent_death_signal(signal.SIGTERM)
        if self.parent_gone():  # it died before the kernel was told to tell us
            self.lose("the parent was gone before the worker started")
            return
        threading.Thread(target=self._watch, name="lifeline", daemon=True).start()

    def parent_gone(self) -> bool:
        """One look: is the process that started this worker gone?"""
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            return True
        return self.alive is not None and not self.alive()

    def on_lost(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` (from any thread) when the parent is gone; now if it already is."""
        with self._lock:
            self._callback = callback
            already = self.lost
        if already:
            callback()

    def lose(self, reason: str = "the parent died (SIGTERM)") -> None:
        """The parent is gone: stop (once), and exit after the grace period at the latest."""
        with self._lock:
            if self.lost:
                return
            self.reason = reason
            self._lost.set()
            callback = self._callback
        if callback is None:
            os._exit(EXIT_PARENT_GONE)
        threading.Thread(target=self._exit_after_grace, name="lifeline-exit", daemon=True).start()
        callback()

    def _exit_after_grace(self) -> None:
        threading.Event().wait(self.grace_s)
        os._exit(EXIT_PARENT_GONE)

    def _watch(self) -> None:
        while not self.lost:
            if self.pipe is not None:
                try:
                    if self.pipe.poll(POLL_S):
                        self.pipe.recv_bytes()  # the parent never writes: only EOF gets here
                except (EOFError, OSError):
                    self.lose("the parent's end of the lifeline closed")
                    return
            else:
                threading.Event().wait(POLL_S)
            if self.parent_gone():
                self.lose("the parent is gone (re-parented)")
                return
