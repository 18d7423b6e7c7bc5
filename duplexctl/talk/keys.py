"""Non-blocking single keys on a terminal; nothing at all without one.

``talk`` needs a few keys while audio flows (Enter ends a push-to-talk turn, ``c`` cancels
the answer, ``q`` quits) but must never block the event loop (keepalives would time out) nor
wait for a line. On a TTY, stdin is put in cbreak mode (keys arrive one by one, Ctrl-C still
raises SIGINT) and read through ``loop.add_reader``; the terminal mode is restored on stop,
on every exit path. Without a TTY (pipes, CI, tests) the reader does nothing, so stdin is
never consumed by surprise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any

KeyHandler = Callable[[str], None]


class KeyReader:
    """Calls ``handler(key)`` for each key pressed: ``"enter"``, or the character itself."""

    def __init__(self, handler: KeyHandler, stream: Any = None) -> None:
        self.handler = handler
        self.stream = stream if stream is not None else sys.stdin
        self.active = False
        self._fd: int | None = None
        self._saved: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> bool:
        """Start reading keys; False (and nothing done) when stdin is not a terminal."""
        try:
            fd = self.stream.fileno()
            if not os.isatty(fd):
                return False
            import termios
            import tty
        except (AttributeError, OSError, ValueError, ImportError):
            return False
        try:
            self._saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
        except termios.error:
            return False
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._on_readable)
        self.active = True
        return True

    def _on_readable(self) -> None:
        assert self._fd is not None
        try:
            data = os.read(self._fd, 64)
        except OSError:
            return
        for ch in data.decode(errors="ignore"):
            key = "enter" if ch in "\r\n" else ch.lower()
            self.handler(key)

    def stop(self) -> None:
        """Restore the terminal. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        self.active = False
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(fd)
        with contextlib.suppress(Exception):
            import termios

            termios.tcsetattr(fd, termios.TCSADRAIN, self._saved)
