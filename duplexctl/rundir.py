"""Where a run's files go: one rule for every command that writes a directory (issue 17.3).

``load --out``, ``replay --out``, ``talk --record``, ``report --out`` and ``report --plot``
all write a directory of files, some of them incrementally (JSONL appended as turns finish,
WAVs per response). Writing into a directory that already holds a run mixed the two: JSONL
appended to, ``report.json`` replaced, the old run's WAVs left beside the new ones. The rule:

* a directory that does not exist, or is empty, is used (and created);
* a non-empty directory is refused in one line (exit 2) — unless ``--overwrite``, which
  empties it first, but only if duplexctl wrote it (it holds :data:`MARKER`, which every
  run directory gets): ``--out . --overwrite`` must never delete someone's files;
* a path that exists and is not a directory is refused in one line (exit 2).

Refusing (rather than a new timestamped directory per run) keeps the path the user gave the
path the files are in, so ``load --out run1`` then ``report run1`` works as written and
scripts need not discover a generated name. Every command ends by saying where its files
went (:func:`announce`), on stderr so that ``--json`` output stays one document.

**A write that fails** (the disk fills mid-run, an I/O error, the directory removed, no
permission; issue 31.2) is handled where each file is written, with the primitives below,
the same way everywhere:

* the file stays readable: :class:`JsonLines` appends whole lines or nothing (a short write
  is cut back to the last complete line), :func:`write_atomic` replaces a document whole or
  leaves the previous one (its temporary file removed), a WAV keeps its last valid header;
* the first failure is reported to the run's :class:`Writes`, which keeps it as a
  :class:`~duplexctl.errors.WriteFailed` (the path and the cause, exit code 4) and calls the
  run's stop once, from whichever thread failed; every later write of the run is skipped
  (one line about the cause, not a cascade);
* the command then ends as after Ctrl-C — sessions closed — and says that one line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, TextIO

from duplexctl import __version__
from duplexctl.errors import BadInput, WriteFailed

#: Written into every run directory; only a directory holding it may be emptied.
MARKER: Final = ".duplexctl-run"


def prepare_run_dir(path: str | Path, *, flag: str, overwrite: bool, command: str) -> Path:
    """Make ``path`` ready for one run's files (see the module docstring); ``BadInput`` (one
    line naming ``flag`` and the problem) if it cannot be used."""
    target = Path(path)
    where = f"{flag} {target}"
    if target.exists() and not target.is_dir():
        raise BadInput(f"{where}: exists and is not a directory")
    if target.is_dir() and any(target.iterdir()):
        if not overwrite:
            raise BadInput(
                f"{where}: directory is not empty (choose a new one, or --overwrite to "
                "replace the run in it)"
            )
        if not (target / MARKER).is_file():
            raise BadInput(
                f"{where}: not empty and not written by duplexctl: not deleting it, even "
                "with --overwrite (choose a new directory)"
            )
        _empty(target)
    try:
        target.mkdir(parents=True, exist_ok=True)
        (target / MARKER).write_text(
            json.dumps(
                {
                    "written_by": f"duplexctl {__version__}",
                    "command": command,
                    "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                }
            )
            + "\n"
        )
    except OSError as exc:
        raise BadInput(f"{where}: cannot write there ({exc.strerror or exc})") from None
    return target


def _empty(directory: Path) -> None:
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def announce(path: str | Path, stream: TextIO | None = None) -> None:
    """The last line of a run that wrote files: where they are."""
    print(f"duplexctl: files written to {Path(path)}/", file=stream or sys.stderr, flush=True)


# -- writing a run's files (see the module docstring) ----------------------------------------


class Writes:
    """The writes of one run: the first that failed, and what stops the run then."""

    def __init__(self, stop: Callable[[], None] | None = None) -> None:
        self.failure: WriteFailed | None = None
        self._stops: list[Callable[[], None]] = [] if stop is None else [stop]
        self._lock = threading.Lock()

    @property
    def ok(self) -> bool:
        """No write of the run has failed (so later ones are still attempted)."""
        return self.failure is None

    def on_failure(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` when a write fails (at once if one already has). It may be called
        from any thread: a stop that touches an event loop uses ``call_soon_threadsafe``."""
        with self._lock:
            failed = self.failure is not None
            if not failed:
                self._stops.append(stop)
        if failed:
            stop()

    def failed(self, path: str | Path, exc: OSError) -> WriteFailed:
        """``path`` could not be written: keep the first failure, stop the run (once)."""
        with self._lock:
            first = self.failure is None
            if first:
                self.failure = WriteFailed(path, exc)
            stops, self._stops = (self._stops, []) if first else ([], self._stops)
            failure = self.failure
        assert failure is not None
        for stop in stops:
            stop()
        return failure

    def check(self) -> None:
        """Raise the run's write failure, if there was one."""
        if self.failure is not None:
            raise self.failure


class JsonLines:
    """An append-only JSONL file that holds whole lines only: each :meth:`write` reaches the
    kernel at once (a killed run keeps every line up to the kill), entirely or not at all.
    A failure goes to ``writes`` (when given; else it raises :class:`WriteFailed`), and the
    file is then left as it is: nothing more is written to it."""

    def __init__(
        self, path: str | Path, writes: Writes | None = None, *, append: bool = False
    ) -> None:
        self.path = Path(path)
        self.writes = writes
        self._fd: int | None = None
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        try:
            self._fd = os.open(self.path, flags, 0o644)
            self._size = os.fstat(self._fd).st_size
        except OSError as exc:
            self._fail(exc)

    def write(self, data: bytes) -> bool:
        """Append ``data`` (whole lines, newline-terminated); False once nothing is written."""
        fd = self._fd
        if fd is None or (self.writes is not None and not self.writes.ok):
            return False
        try:
            written = os.write(fd, data)
            if written != len(data):  # the disk filled in the middle: nothing half-written
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self._size)
            self.close()
            self._fail(exc)
            return False
        self._size += written
        return True

    def _fail(self, exc: OSError) -> None:
        if self.writes is None:
            raise WriteFailed(self.path, exc) from None
        self.writes.failed(self.path, exc)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)


def write_atomic(path: str | Path, data: str | bytes, writes: Writes | None = None) -> bool:
    """Replace ``path`` with ``data`` whole (a temporary file, then a rename): a reader, a
    Ctrl-C or a full disk never leaves half a document. On failure the previous file stays,
    the temporary one is removed, and the failure goes to ``writes`` (else it raises
    :class:`WriteFailed`); with a run's earlier write failed, nothing is attempted."""
    target = Path(path)
    if writes is not None and not writes.ok:
        return False
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if writes is None:
            raise WriteFailed(target, exc) from None
        writes.failed(target, exc)
        return False
    return True
