"""Ctrl-C during ``duplexctl load``: the first SIGINT stops the run cleanly, once.

The first SIGINT sets ``stop`` (arrivals stop, every session closes with ``session.close``,
the partial report is written, exit 130) and is forwarded to the worker processes, which stop
their sessions the same way; a second one only says the sessions are still closing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys


class Interrupts:
    """SIGINT → stop (once); workers are told too."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.interrupted = False
        self.children: list[int] = []

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self.on_sigint)

    def on_sigint(self) -> None:
        if self.interrupted:
            print("duplexctl: still closing sessions…", file=sys.stderr)
            return
        self.interrupted = True
        print("duplexctl: interrupted: stopping arrivals, closing sessions", file=sys.stderr)
        self.stop.set()
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
