"""Ctrl-C during ``duplexctl load``: the first SIGINT stops the run cleanly, once.

The first SIGINT sets ``stop`` (arrivals stop, every session closes with ``session.close``,
the partial report is written, exit 130) and is forwarded to the worker processes, which stop
their sessions the same way; a second one only says the sessions are still closing.

SIGTERM (a container or service manager stopping the run, ``kill``) does exactly what Ctrl-C
does: left to its default action it would end the process with its sessions dropped instead
of closed (holding the server's slots for its disconnect grace) and no report written.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

from duplexctl.errors import STOP_SIGNALS


class Interrupts:
    """SIGINT or SIGTERM → stop (once); workers are told too."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.interrupted = False
        self.children: list[int] = []

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self.on_signal, signum)

    def on_signal(self, signum: int = signal.SIGINT) -> None:
        if self.interrupted:
            print("duplexctl: still closing sessions…", file=sys.stderr)
            return
        self.interrupted = True
        how = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
        print(f"duplexctl: {how}: stopping arrivals, closing sessions", file=sys.stderr)
        self.halt()

    def halt(self) -> None:
        """Stop the run the way Ctrl-C does (arrivals stop, every session closes, workers
        too), without it being an interruption: a result file could not be written."""
        self.stop.set()
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
